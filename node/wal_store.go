package node

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"runtime/debug"
	"slices"
	"strings"
	"syscall"
	"time"

	"github.com/hashicorp/go-hclog"
	"github.com/hashicorp/raft"
	raftboltdb "github.com/hashicorp/raft-boltdb/v2"
	raftwal "github.com/hashicorp/raft-wal"
	walfs "github.com/hashicorp/raft-wal/fs"
	"github.com/hashicorp/raft-wal/metadb"
	"github.com/hashicorp/raft-wal/segment"
	waltypes "github.com/hashicorp/raft-wal/types"
	"go.etcd.io/bbolt"
)

// The log stores a replica may keep its Raft log and stable store in
// (Config.LogStore, --log-store).
const (
	// LogStoreWAL is a write-ahead log of segment files (raft-wal): one
	// fsync per append, and compaction deletes whole segment files.
	LogStoreWAL = "wal"
	// LogStoreBolt is one bbolt file, raft.db (raft-boltdb): the store of
	// every replica created before the WAL.
	LogStoreBolt = "bolt"
)

const (
	// walDirName is the directory of a WAL replica's store, under the
	// replica's directory; walMetaFile its meta file (the segment list, and
	// the stable store: term and vote).
	walDirName  = "wal"
	walMetaFile = "wal-meta.db"
	// defaultWALSegmentBytes is the size of a WAL segment file. Each is
	// preallocated, so a replica's directory holds at least one; entries of
	// a few hundred bytes fill one every ~15,000 entries.
	defaultWALSegmentBytes = 4 << 20
)

// replicaStore is a replica's Raft log and stable store: a
// raftboltdb.BoltStore or a raftwal.WAL.
type replicaStore interface {
	raft.LogStore
	raft.StableStore
	Close() error
}

// walDir is where a WAL replica keeps its segments and meta file.
func (g *group) walDir() string { return filepath.Join(g.dir, walDirName) }

// storeFiles are the replica's store files its write errors name: the bolt
// file, the WAL's directory and meta file, or the node's shared log
// (sharedDir) and its stable store.
func (g *group) storeFiles(kind storeKind, sharedDir string) (log, stable string) {
	switch kind {
	case storeBolt:
		return g.boltPath(), g.boltPath()
	case storeShared:
		return sharedDir, filepath.Join(sharedDir, "stable.db")
	}
	return g.walDir(), filepath.Join(g.walDir(), walMetaFile)
}

// openWAL opens (or creates) the replica's WAL and checks it, as checkBolt
// does a bolt file: every segment's frames and batch checksums, and every
// log entry's checksum, before raft reads any (checkWAL). It returns the
// log's first and last index. segmentBytes 0 means the default.
func (g *group) openWAL(dataDir string, segmentBytes int, hlog hclog.Logger) (_ *walStore, first, last uint64, err error) {
	dir := g.walDir()
	if err := os.MkdirAll(dir, 0o750); err != nil {
		return nil, 0, 0, fmt.Errorf("node: --data-dir: %w", err)
	}
	if err := g.checkWALMeta(dataDir); err != nil {
		return nil, 0, 0, err
	}
	if segmentBytes == 0 {
		segmentBytes = defaultWALSegmentBytes
	}
	meta := &metadb.BoltMetaDB{}
	wal, err := raftwal.Open(dir, raftwal.WithSegmentSize(segmentBytes), raftwal.WithLogger(hlog.Named("wal")),
		raftwal.WithMetaStore(meta), raftwal.WithSegmentFiler(walFiler{segment.NewFiler(dir, walfs.New())}))
	if err != nil {
		_ = meta.Close()
		var pe *fs.PathError
		var errno syscall.Errno
		if (errors.As(err, &pe) || errors.As(err, &errno)) && !errors.Is(err, fs.ErrNotExist) {
			// The file system's refusal (permissions, a full disk), not
			// damage; a segment file gone is damage.
			return nil, 0, 0, fmt.Errorf("node: --data-dir: opening %s: %w", dir, err)
		}
		return nil, 0, 0, g.damaged(dir, fmt.Sprintf("opening it failed: %v", err))
	}
	w := &walStore{WAL: wal, meta: meta}
	defer func() {
		if err != nil {
			_ = w.Close()
		}
	}()
	if first, last, err = g.checkWAL(w); err != nil {
		return nil, 0, 0, err
	}
	return w, first, last, nil
}

// dropLogBehindSnapshot deletes a WAL's whole log (first..last) when it
// ends before the newest snapshot in snaps. Raft deletes the whole log of a
// store without gaps once it has installed a snapshot; a crash in between
// leaves a log that ends below the snapshot, after which raft would append
// at the snapshot's index + 1: an append the WAL refuses, for a gap.
func (g *group) dropLogBehindSnapshot(snaps raft.SnapshotStore, first, last uint64) error {
	if last == 0 {
		return nil
	}
	metas, err := snaps.List()
	if err != nil || len(metas) == 0 || metas[0].Index <= last {
		return nil // checkSnapshots has reported what List failed on
	}
	if err := g.store.DeleteRange(first, last); err != nil {
		return fmt.Errorf("node: --data-dir: deleting log entries %d-%d of %s, all below snapshot %s: %w",
			first, last, g.walDir(), metas[0].ID, err)
	}
	return nil
}

// walStore is a replica's WAL with its meta store, which the WAL's Close
// leaves open.
type walStore struct {
	*raftwal.WAL
	meta *metadb.BoltMetaDB
}

// GetLog implements raft.LogStore. An entry compaction deleted is not
// found, as in a bolt store, even while the segment that held it is kept
// for later entries: raft sends a follower that needs it a snapshot.
func (w *walStore) GetLog(index uint64, l *raft.Log) error {
	if first, err := w.FirstIndex(); err == nil && index < first {
		return raft.ErrLogNotFound
	}
	return w.WAL.GetLog(index, l)
}

// Close closes the WAL, then its meta store.
func (w *walStore) Close() error {
	return errors.Join(w.WAL.Close(), w.meta.Close())
}

// walFiler is the WAL's segment filer. A segment the WAL sealed by
// truncating the log's tail (raft drops a follower's entries that conflict
// with a new leader's) is recorded as sealed without an index frame, so
// the filer's own Open could not read its entries after a restart: it is
// opened as the tail is, finding its entries by reading its frames.
type walFiler struct{ *segment.Filer }

// Open implements waltypes.SegmentFiler.
func (f walFiler) Open(info waltypes.SegmentInfo) (waltypes.SegmentReader, error) {
	if info.IndexStart == 0 {
		return f.RecoverTail(info)
	}
	return f.Filer.Open(info)
}

// checkWALMeta opens the WAL's meta file read-only first: a bbolt file held
// by another process would block the WAL's own open forever, and bbolt
// meets some damage with a panic naming no file.
func (g *group) checkWALMeta(dataDir string) (err error) {
	path := filepath.Join(g.walDir(), walMetaFile)
	if fi, err := os.Stat(path); errors.Is(err, os.ErrNotExist) || err == nil && fi.Size() == 0 {
		return nil
	}
	defer debug.SetPanicOnFault(debug.SetPanicOnFault(true))
	defer func() {
		if r := recover(); r != nil {
			err = g.damaged(path, fmt.Sprintf("reading it failed: %v", r))
		}
	}()
	db, err := bbolt.Open(path, 0o640, &bbolt.Options{ReadOnly: true, Timeout: time.Second})
	switch {
	case errors.Is(err, bbolt.ErrTimeout):
		return fmt.Errorf("node: --data-dir: opening %s (is another node using %s?): %w", path, dataDir, err)
	case err != nil:
		return g.damaged(path, fmt.Sprintf("opening it failed: %v", err))
	}
	defer db.Close()
	if err := db.View(func(tx *bbolt.Tx) error {
		return tx.ForEach(func(_ []byte, b *bbolt.Bucket) error { readBucket(b); return nil })
	}); err != nil {
		return g.damaged(path, err.Error())
	}
	return nil
}

// segmentFiles are the WAL's segment files, in log order.
func (g *group) segmentFiles() ([]string, error) {
	ents, err := os.ReadDir(g.walDir())
	if err != nil {
		return nil, err
	}
	var out []string
	for _, e := range ents {
		if strings.HasSuffix(e.Name(), ".wal") {
			out = append(out, filepath.Join(g.walDir(), e.Name()))
		}
	}
	slices.Sort(out) // named <base index, 20 digits>-<segment ID, 16 hex digits>.wal
	return out, nil
}

// segmentOf is the segment file that holds log entry index: the last one
// whose base index is at most index. It is the WAL's directory when none
// is found.
func (g *group) segmentOf(index uint64) string {
	files, _ := g.segmentFiles()
	for i := len(files) - 1; i >= 0; i-- {
		var base, id uint64
		if _, err := fmt.Sscanf(filepath.Base(files[i]), "%020d-%016x.wal", &base, &id); err == nil && base <= index {
			return files[i]
		}
	}
	return g.walDir()
}

// checkWAL reads every segment file of the replica's open WAL through
// (scanSegment) and checks every entry of its log (first..last: a WAL
// holds no gaps) against its checksum, decoding it from the segment that
// holds it: the last one whose base index is at most the entry's (a
// segment the log's tail was truncated in leaves the rest to the next).
func (g *group) checkWAL(w *walStore) (first, last uint64, err error) {
	if first, err = w.FirstIndex(); err == nil {
		last, err = w.LastIndex()
	}
	if err != nil {
		return 0, 0, g.damaged(g.walDir(), fmt.Sprintf("reading it failed: %v", err))
	}
	files, err := g.segmentFiles()
	if err != nil {
		return 0, 0, fmt.Errorf("node: --data-dir: %w", err)
	}
	bases := make([]uint64, len(files))
	for i, f := range files {
		var id uint64
		if _, err := fmt.Sscanf(filepath.Base(f), "%020d-%016x.wal", &bases[i], &id); err != nil {
			return 0, 0, g.damaged(f, "its name is not a segment's")
		}
	}
	var codec raftwal.BinaryCodec
	for i, f := range files {
		b, err := os.ReadFile(f)
		if err != nil {
			return 0, 0, g.damaged(f, fmt.Sprintf("reading it failed: %v", err))
		}
		entries, detail := scanSegment(b)
		if detail != "" {
			return 0, 0, g.damaged(f, detail)
		}
		hi := last
		if i+1 < len(files) {
			hi = min(hi, bases[i+1]-1)
		}
		for idx := max(first, bases[i]); first > 0 && idx <= hi; idx++ {
			k := idx - bases[i]
			if k >= uint64(len(entries)) {
				return 0, 0, g.damaged(f, fmt.Sprintf("log entry %d is missing from it", idx))
			}
			var l raft.Log
			if err := codec.Decode(entries[k], &l); err != nil {
				return 0, 0, g.damaged(f, fmt.Sprintf("log entry %d cannot be decoded: %v", idx, err))
			}
			if detail := unseal(idx, &l); detail != "" {
				return 0, 0, g.damaged(f, detail)
			}
		}
	}
	return first, last, nil
}

var (
	_ replicaStore = (*walStore)(nil)
	_ replicaStore = (*raftboltdb.BoltStore)(nil)
)
