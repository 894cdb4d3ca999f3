package main

import (
	"bufio"
	"bytes"
	"crypto/sha256"
	"encoding/binary"
	"errors"
	"fmt"
	"hash"
	"io"
	"os"
	"path/filepath"
	"slices"

	"google.golang.org/protobuf/proto"

	raftcmdv1 "github.com/quorate/quorate/proto/quorate/raftcmd/v1"
	quoratev1 "github.com/quorate/quorate/proto/quorate/v1"
)

// A backup file (quorate admin snapshot save) is:
//
//	magic "QUORATE BACKUP\n", then the format version as a uvarint;
//	frames, each a uvarint length and a quorate.v1.SaveSnapshotResponse:
//	the meta group's pages first (its first page carries the cluster ID
//	and the shard map), then each data group's, in the shard map's order;
//	a zero length (the end);
//	the SHA-256 of everything before it (32 bytes).
//
// restore reads it whole, checking all of it, before it changes anything.

const (
	backupMagic = "QUORATE BACKUP\n"
	// backupVersion is the format this binary writes and reads.
	backupVersion = 1
	// maxBackupFrame bounds one frame, so a damaged length cannot make
	// restore allocate without limit (a page is at most 4 MiB of records).
	maxBackupFrame = 16 << 20
)

// errBadBackup is returned for a file that is not a whole backup of a
// version this binary reads.
var errBadBackup = errors.New("not a usable backup file")

// backupWriter writes a backup to a temporary file next to its path, and
// renames it there once it is whole and synced: path never holds half a
// backup.
type backupWriter struct {
	path string
	f    *os.File
	w    *bufio.Writer
	h    hash.Hash
	n    int64
	buf  []byte
}

func createBackup(path string) (*backupWriter, error) {
	f, err := os.CreateTemp(filepath.Dir(path), "."+filepath.Base(path)+".tmp-*")
	if err != nil {
		return nil, err
	}
	b := &backupWriter{path: path, f: f, h: sha256.New()}
	b.w = bufio.NewWriterSize(io.MultiWriter(f, b.h), 256<<10)
	if err := b.write(binary.AppendUvarint([]byte(backupMagic), backupVersion)); err != nil {
		b.abort()
		return nil, err
	}
	return b, nil
}

func (b *backupWriter) write(p []byte) error {
	n, err := b.w.Write(p)
	b.n += int64(n)
	return err
}

// frame writes one page.
func (b *backupWriter) frame(m *quoratev1.SaveSnapshotResponse) error {
	var err error
	b.buf, err = proto.MarshalOptions{Deterministic: true}.Marshal(m)
	if err != nil {
		return err
	}
	if err := b.write(binary.AppendUvarint(nil, uint64(len(b.buf)))); err != nil {
		return err
	}
	return b.write(b.buf)
}

// commit ends the file, syncs it, and renames it to its path (whose
// directory is synced too). It returns the file's size.
func (b *backupWriter) commit() (int64, error) {
	if err := b.write([]byte{0}); err != nil {
		b.abort()
		return 0, err
	}
	if err := b.w.Flush(); err != nil {
		b.abort()
		return 0, err
	}
	sum := b.h.Sum(nil)
	if _, err := b.f.Write(sum); err != nil {
		b.abort()
		return 0, err
	}
	b.n += int64(len(sum))
	if err := b.f.Sync(); err != nil {
		b.abort()
		return 0, err
	}
	if err := b.f.Close(); err != nil {
		_ = os.Remove(b.f.Name())
		return 0, err
	}
	if err := os.Rename(b.f.Name(), b.path); err != nil {
		_ = os.Remove(b.f.Name())
		return 0, err
	}
	if d, err := os.Open(filepath.Dir(b.path)); err == nil {
		err = d.Sync()
		_ = d.Close()
		if err != nil {
			return 0, err
		}
	}
	return b.n, nil
}

// abort removes the temporary file.
func (b *backupWriter) abort() {
	_ = b.f.Close()
	_ = os.Remove(b.f.Name())
}

// backupSummary is what a backup file holds, as restore checked it.
type backupSummary struct {
	clusterID string
	shardMap  *quoratev1.ShardMapStatus
	policies  []*quoratev1.Policy
	groups    []groupSummary // in file order, the meta group (0) first
}

type groupSummary struct {
	group        uint32
	appliedIndex uint64
	records      uint64 // state records (policies apart)
	keys         uint64 // buckets and semaphores
}

// readBackup checks the backup at path whole: magic, version, checksum,
// and every frame, in order (each group's pages one session's, complete,
// each state page decodable). It calls page, when not nil, for each frame
// after the file checked out.
func readBackup(path string, page func(*quoratev1.SaveSnapshotResponse) error) (*backupSummary, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	st, err := f.Stat()
	if err != nil {
		return nil, err
	}
	br := bufio.NewReader(f)
	magic := make([]byte, len(backupMagic))
	if _, err := io.ReadFull(br, magic); err != nil || string(magic) != backupMagic {
		return nil, fmt.Errorf("%w: %s does not start as a Quorate backup does", errBadBackup, path)
	}
	v, err := binary.ReadUvarint(br)
	if err != nil {
		return nil, fmt.Errorf("%w: %s: no format version", errBadBackup, path)
	}
	if v != backupVersion {
		return nil, fmt.Errorf("%w: %s is format version %d; this binary reads version %d only", errBadBackup, path, v, backupVersion)
	}
	if err := checkSum(f, st.Size()); err != nil {
		return nil, fmt.Errorf("%w: %s: %w", errBadBackup, path, err)
	}
	s, err := scanBackup(f, st.Size()-sha256.Size, nil)
	if err != nil {
		return nil, fmt.Errorf("%w: %s: %w", errBadBackup, path, err)
	}
	if page != nil {
		if _, err := scanBackup(f, st.Size()-sha256.Size, page); err != nil {
			return s, err
		}
	}
	return s, nil
}

// checkSum compares the SHA-256 of f's first size-32 bytes with its last 32.
func checkSum(f *os.File, size int64) error {
	if size < int64(len(backupMagic))+1+sha256.Size {
		return errors.New("truncated")
	}
	h := sha256.New()
	if _, err := io.Copy(h, io.NewSectionReader(f, 0, size-sha256.Size)); err != nil {
		return err
	}
	want := make([]byte, sha256.Size)
	if _, err := f.ReadAt(want, size-sha256.Size); err != nil {
		return err
	}
	if !bytes.Equal(h.Sum(nil), want) {
		return errors.New("checksum mismatch: the file is damaged or truncated")
	}
	return nil
}

// scanBackup reads the frames of f (end: where the checksum starts),
// checking their order, and calls page (when not nil) on each.
func scanBackup(f *os.File, end int64, page func(*quoratev1.SaveSnapshotResponse) error) (*backupSummary, error) {
	br := bufio.NewReader(io.NewSectionReader(f, 0, end))
	if _, err := br.Discard(len(backupMagic)); err != nil {
		return nil, err
	}
	if _, err := binary.ReadUvarint(br); err != nil {
		return nil, err
	}
	s := &backupSummary{}
	var (
		cur     *groupSummary
		session string
		offset  uint64
		open    bool // a group's pages not done yet
		buf     []byte
	)
	for i := 0; ; i++ {
		n, err := binary.ReadUvarint(br)
		if err != nil {
			return nil, fmt.Errorf("frame %d: %w", i, err)
		}
		if n == 0 {
			break
		}
		if n > maxBackupFrame {
			return nil, fmt.Errorf("frame %d of %d bytes", i, n)
		}
		buf = append(buf[:0], make([]byte, n)...)
		if _, err := io.ReadFull(br, buf); err != nil {
			return nil, fmt.Errorf("frame %d: %w", i, err)
		}
		m := new(quoratev1.SaveSnapshotResponse)
		if err := proto.Unmarshal(buf, m); err != nil {
			return nil, fmt.Errorf("frame %d: %w", i, err)
		}
		if !open {
			if i == 0 && (m.GetGroup() != 0 || m.GetClusterId() == "") {
				return nil, errors.New("the first page is not the meta group's")
			}
			if i > 0 && m.GetGroup() == 0 {
				return nil, fmt.Errorf("frame %d: the meta group twice", i)
			}
			s.groups = append(s.groups, groupSummary{group: m.GetGroup(), appliedIndex: m.GetAppliedIndex()})
			cur, session, offset, open = &s.groups[len(s.groups)-1], m.GetSession(), 0, true
			if i == 0 {
				s.clusterID, s.shardMap = m.GetClusterId(), m.GetShardMap()
			}
		} else if m.GetGroup() != cur.group || m.GetSession() != session {
			return nil, fmt.Errorf("frame %d: group %d's pages end early", i, cur.group)
		}
		state := new(raftcmdv1.SlotState)
		if err := proto.Unmarshal(m.GetState(), state); err != nil {
			return nil, fmt.Errorf("frame %d: group %d's state: %w", i, cur.group, err)
		}
		got := uint64(len(m.GetPolicies()) + len(state.GetBuckets()) + len(state.GetSemaphores()) + len(state.GetReservations()) + len(state.GetDedupe()))
		if got != uint64(m.GetRecords()) {
			return nil, fmt.Errorf("frame %d: %d records, its page says %d", i, got, m.GetRecords())
		}
		if cur.group == 0 {
			s.policies = append(s.policies, m.GetPolicies()...)
		}
		offset += got
		cur.records += got - uint64(len(m.GetPolicies()))
		cur.keys += uint64(len(state.GetBuckets()) + len(state.GetSemaphores()))
		if m.GetDone() {
			if offset != m.GetTotalRecords() {
				return nil, fmt.Errorf("group %d: %d records, its session had %d", cur.group, offset, m.GetTotalRecords())
			}
			open = false
		}
		if page != nil {
			if err := page(m); err != nil {
				return nil, err
			}
		}
	}
	if open || len(s.groups) == 0 {
		return nil, errors.New("the last group's pages end early")
	}
	if _, err := br.ReadByte(); err != io.EOF {
		return nil, errors.New("data after the end")
	}
	for _, g := range s.shardMap.GetGroups() {
		if !slices.ContainsFunc(s.groups, func(x groupSummary) bool { return x.group == g.GetId() }) {
			return nil, fmt.Errorf("group %d of the shard map has no pages", g.GetId())
		}
	}
	return s, nil
}
