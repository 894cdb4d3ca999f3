package node

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"hash/crc32"

	"github.com/hashicorp/go-msgpack/v2/codec"
	"github.com/hashicorp/raft"
	raftwal "github.com/hashicorp/raft-wal"
	"go.etcd.io/bbolt"
)

// sumTag opens the Extensions of every log entry a checkedLog stores: the
// tag, then the entry's CRC-32C (big-endian), then the Extensions raft gave.
var sumTag = [4]byte{'q', 'c', 's', 1}

const sumLen = len(sumTag) + 4

var castagnoli = crc32.MakeTable(crc32.Castagnoli)

// checkedLog is the raft.LogStore of a replica: it stores every entry with
// a CRC-32C over its index, term, type, data and extensions, carried in
// front of the entry's Extensions, and GetLog checks and strips it, so raft
// never sees an entry whose bytes changed on disk. Entries stored without a
// checksum (by a Quorate that did not write one) are read as they are.
// Quorate itself never sets Extensions, so an entry whose Extensions are
// neither empty nor tagged is damaged too.
//
// A damaged entry makes GetLog return a *DamagedError, reported to health
// (which stops the replica). Write errors are recorded in health. Methods
// are safe for concurrent use, as the store's are.
type checkedLog struct {
	store raft.LogStore
	// file is the store's file (or directory) its write errors name;
	// damaged the error of a damaged entry at index.
	file    string
	damaged func(index uint64, detail string) *DamagedError
	health  *storageHealth
}

var (
	_ raft.LogStore          = (*checkedLog)(nil)
	_ raft.MonotonicLogStore = (*checkedLog)(nil)
)

// IsMonotonic implements raft.MonotonicLogStore: it is the store's answer.
// A store that holds no gaps (the WAL) has raft delete the whole log when
// it installs a snapshot, instead of appending after a gap.
func (c *checkedLog) IsMonotonic() bool {
	m, ok := c.store.(raft.MonotonicLogStore)
	return ok && m.IsMonotonic()
}

// entrySum is the CRC-32C of l's index, term, type, data and ext.
func entrySum(l *raft.Log, ext []byte) uint32 {
	var b [8 + 8 + 1 + 8]byte
	binary.BigEndian.PutUint64(b[0:], l.Index)
	binary.BigEndian.PutUint64(b[8:], l.Term)
	b[16] = byte(l.Type)
	binary.BigEndian.PutUint64(b[17:], uint64(len(l.Data)))
	c := crc32.Update(0, castagnoli, b[:])
	c = crc32.Update(c, castagnoli, l.Data)
	return crc32.Update(c, castagnoli, ext)
}

// sealed is a copy of l (raft keeps l, in the log cache too) with its
// checksum in front of its Extensions.
func sealed(l *raft.Log) *raft.Log {
	c := *l
	ext := make([]byte, sumLen, sumLen+len(l.Extensions))
	copy(ext, sumTag[:])
	binary.BigEndian.PutUint32(ext[len(sumTag):], entrySum(l, l.Extensions))
	c.Extensions = append(ext, l.Extensions...)
	return &c
}

// unseal checks the checksum of l, read from the store at index, and strips
// it. It returns what is wrong with l, or "".
func unseal(index uint64, l *raft.Log) string {
	if l.Index != index {
		return fmt.Sprintf("log entry %d is stored under index %d", l.Index, index)
	}
	ext := l.Extensions
	switch {
	case len(ext) == 0:
		return "" // stored before entries carried checksums
	case len(ext) < sumLen || !bytes.Equal(ext[:len(sumTag)], sumTag[:]):
		return fmt.Sprintf("log entry %d has an unknown checksum header", index)
	}
	want := binary.BigEndian.Uint32(ext[len(sumTag):])
	l.Extensions = ext[sumLen:]
	if len(l.Extensions) == 0 {
		l.Extensions = nil
	}
	if got := entrySum(l, l.Extensions); got != want {
		return fmt.Sprintf("log entry %d fails its checksum (stored %08x, computed %08x)", index, want, got)
	}
	return ""
}

// FirstIndex implements raft.LogStore.
func (c *checkedLog) FirstIndex() (uint64, error) { return c.store.FirstIndex() }

// LastIndex implements raft.LogStore.
func (c *checkedLog) LastIndex() (uint64, error) { return c.store.LastIndex() }

// GetLog implements raft.LogStore: it returns the entry at index only when
// its checksum matches.
func (c *checkedLog) GetLog(index uint64, l *raft.Log) error {
	err := c.store.GetLog(index, l)
	switch {
	case errors.Is(err, raft.ErrLogNotFound), errors.Is(err, bbolt.ErrDatabaseNotOpen), errors.Is(err, raftwal.ErrClosed):
		return err
	case err != nil:
		return c.damage(index, fmt.Sprintf("log entry %d cannot be read: %v", index, err))
	}
	if detail := unseal(index, l); detail != "" {
		return c.damage(index, detail)
	}
	return nil
}

// damage reports a damaged entry found while the replica runs.
func (c *checkedLog) damage(index uint64, detail string) error {
	err := c.damaged(index, detail)
	c.health.damage(err)
	return err
}

// StoreLog implements raft.LogStore.
func (c *checkedLog) StoreLog(l *raft.Log) error {
	return c.StoreLogs([]*raft.Log{l})
}

// StoreLogs implements raft.LogStore.
func (c *checkedLog) StoreLogs(logs []*raft.Log) error {
	out := make([]*raft.Log, len(logs))
	for i, l := range logs {
		out[i] = sealed(l)
	}
	if err := c.store.StoreLogs(out); err != nil {
		c.health.record(fmt.Errorf("writing log entries to %s: %w", c.file, err))
		return err
	}
	return nil
}

// DeleteRange implements raft.LogStore.
func (c *checkedLog) DeleteRange(min, max uint64) error {
	if err := c.store.DeleteRange(min, max); err != nil {
		c.health.record(fmt.Errorf("deleting log entries %d-%d from %s: %w", min, max, c.file, err))
		return err
	}
	return nil
}

// verifyEntries reads every entry of the log in tx (a read transaction on
// the bolt file of a raftboltdb store) and checks it, in one pass, before
// raft replays any: raft panics on an entry it cannot read while it starts.
// It returns where the log's last run of consecutive entries starts and
// its last index (0, 0 when empty), or what is wrong. The log may have
// gaps below that run: a follower that installed a snapshot keeps the
// entries raft's compaction left below it (TrailingLogs) and appends after
// the snapshot's index, so whether a gap is damage depends on the snapshot
// (checkSnapshots).
func verifyEntries(tx *bbolt.Tx) (first, last uint64, detail string) {
	b := tx.Bucket([]byte("logs"))
	if b == nil {
		return 0, 0, ""
	}
	dec := codec.NewDecoderBytes(nil, &codec.MsgpackHandle{})
	c := b.Cursor()
	for k, v := c.First(); k != nil; k, v = c.Next() {
		if len(k) != 8 {
			return 0, 0, fmt.Sprintf("the log holds a key of %d bytes after entry %d", len(k), last)
		}
		i := binary.BigEndian.Uint64(k)
		if first == 0 || i != last+1 {
			first = i // the first entry, or the first after a gap
		}
		last = i
		var l raft.Log
		dec.ResetBytes(v)
		if err := dec.Decode(&l); err != nil {
			return 0, 0, fmt.Sprintf("log entry %d cannot be decoded: %v", i, err)
		}
		if d := unseal(i, &l); d != "" {
			return 0, 0, d
		}
	}
	return first, last, ""
}
