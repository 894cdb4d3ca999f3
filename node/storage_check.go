package node

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"runtime/debug"
	"time"

	"github.com/hashicorp/raft"
	raftboltdb "github.com/hashicorp/raft-boltdb/v2"
	"go.etcd.io/bbolt"

	"github.com/quorate/quorate/shard"
)

// ErrReplicaDamaged is wrapped by the errors of a group replica whose files
// on disk are damaged: a log entry that fails its checksum, a bolt file
// bbolt cannot read, a snapshot that fails its checksum or is missing. The
// replica does not start (or stops); the rest of the node goes on.
var ErrReplicaDamaged = errors.New("node: replica files damaged")

// DamagedError says which file of which replica is damaged, and how to
// recover. It wraps ErrReplicaDamaged.
type DamagedError struct {
	Group shard.GroupID
	// File is the damaged file; Dir the replica's directory, which the
	// recovery deletes.
	File, Dir string
	// Detail says what is wrong with File.
	Detail string
}

func (e *DamagedError) Error() string {
	if e.Group == shard.MetaGroup {
		return fmt.Sprintf("node: meta group replica: %s is damaged: %s; to recover, stop this node, "+
			"delete %s and start the node again with --join (not --bootstrap): the replica rejoins empty "+
			"and the group's leader sends it the group's state", e.File, e.Detail, e.Dir)
	}
	return fmt.Sprintf("node: group %d replica: %s is damaged: %s; the replica is stopped, the node's other "+
		"groups go on; to recover, delete %s (or stop the node, delete it and start the node again): "+
		"the replica reopens empty and the group's leader sends it the group's state", e.Group, e.File, e.Detail, e.Dir)
}

func (e *DamagedError) Unwrap() error { return ErrReplicaDamaged }

// damaged is the error of file of g's replica, damaged as detail says.
func (g *group) damaged(file, detail string) *DamagedError {
	return &DamagedError{Group: g.id, File: file, Dir: g.dir, Detail: detail}
}

// boltPath is the replica's bolt file: its Raft log and stable store.
func (g *group) boltPath() string { return filepath.Join(g.dir, "raft.db") }

// checkBolt reads every page of the replica's bolt file and checks every
// log entry (verifyEntries), before the store opens the file for writing;
// it returns where the log's last run of consecutive entries starts, and
// its last index. bbolt meets some damage
// (a truncated file, a page overwritten) with a panic, or with a fault
// reading past the end of its mapping, instead of an error, and the panic
// names no file: here both become a *DamagedError. The pages are read with
// cursors on this goroutine, not with tx.Check: opening the file writable
// rebuilds its freelist (the store does not write one) on a goroutine of
// bbolt's, where a panic could not be recovered, so the pages must be known
// good first.
func (g *group) checkBolt() (first, last uint64, err error) {
	path := g.boltPath()
	if fi, err := os.Stat(path); errors.Is(err, os.ErrNotExist) || err == nil && fi.Size() == 0 {
		return 0, 0, nil // new, or created by a process that stopped at once: bbolt initializes it
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
		return 0, 0, fmt.Errorf("node: --data-dir: opening %s (is another node using it?): %w", path, err)
	case err != nil:
		return 0, 0, g.damaged(path, fmt.Sprintf("opening it failed: %v", err))
	}
	defer db.Close()
	err = db.View(func(tx *bbolt.Tx) error {
		if size := fileSize(path); tx.Size() > size {
			return fmt.Errorf("it is %d bytes long, its pages need %d", size, tx.Size())
		}
		var detail string
		if first, last, detail = verifyEntries(tx); detail != "" {
			return errors.New(detail)
		}
		return tx.ForEach(func(name []byte, b *bbolt.Bucket) error {
			if string(name) != "logs" {
				readBucket(b)
			}
			return nil
		})
	})
	if err != nil {
		return 0, 0, g.damaged(path, err.Error())
	}
	return first, last, nil
}

// readBucket reads every key and nested bucket of b: every page under it.
func readBucket(b *bbolt.Bucket) {
	c := b.Cursor()
	for k, v := c.First(); k != nil; k, v = c.Next() {
		if v == nil {
			if nb := b.Bucket(k); nb != nil {
				readBucket(nb)
			}
		}
	}
}

func fileSize(path string) int64 {
	fi, err := os.Stat(path)
	if err != nil {
		return 0
	}
	return fi.Size()
}

// checkSnapshots checks that the snapshot raft will restore (the newest)
// matches its checksum, and that the log continues it: the log's last run
// of consecutive entries (first..last, 0 when empty) starts at or before
// the entry after the snapshot, so any gap below it is covered. Raft
// retries a snapshot that fails to open, and panics on a log that starts
// after the state it restored.
func (g *group) checkSnapshots(snaps raft.SnapshotStore, first, last uint64) error {
	dir := filepath.Join(g.dir, "snapshots")
	metas, err := snaps.List()
	if err != nil {
		return g.damaged(dir, fmt.Sprintf("listing snapshots failed: %v", err))
	}
	var covered uint64
	if len(metas) > 0 {
		m := metas[0]
		_, rc, err := snaps.Open(m.ID)
		var de *DamagedError
		if errors.As(err, &de) {
			return de
		}
		if err != nil {
			return g.damaged(filepath.Join(dir, m.ID, "state.bin"),
				fmt.Sprintf("snapshot %s (up to log entry %d) cannot be read: %v", m.ID, m.Index, err))
		}
		_ = rc.Close()
		covered = m.Index
	}
	if last > 0 && first > covered+1 {
		what := "no snapshot"
		if covered > 0 {
			what = fmt.Sprintf("the newest snapshot, up to entry %d,", covered)
		}
		return g.damaged(dir, fmt.Sprintf("the log runs on from entry %d but %s covers the entries before it "+
			"(a snapshot is missing or unreadable)", first, what))
	}
	return nil
}

// openStore opens the replica's bolt file as its Raft log and stable store.
// A panic of bbolt (damage checkBolt missed) becomes a *DamagedError.
func (g *group) openStore(dataDir string) (_ *raftboltdb.BoltStore, err error) {
	path := g.boltPath()
	defer func() {
		if r := recover(); r != nil {
			err = g.damaged(path, fmt.Sprintf("opening it failed: %v", r))
		}
	}()
	store, err := raftboltdb.New(raftboltdb.Options{
		Path: path,
		// The freelist is rebuilt on open instead of written by every
		// commit: one page less per fsync'd log append.
		BoltOptions: &bbolt.Options{Timeout: time.Second, NoFreelistSync: true, FreelistType: bbolt.FreelistMapType},
	})
	if err != nil {
		return nil, fmt.Errorf("node: --data-dir: opening %s (is another node using %s?): %w", path, dataDir, err)
	}
	return store, nil
}

// startRaft starts the replica's raft. raft panics, instead of failing, on
// some states of its stores that the checks above should already have
// refused; such a panic becomes a *DamagedError too.
func (g *group) startRaft(rc *raft.Config, logs raft.LogStore, stable raft.StableStore, snaps raft.SnapshotStore) (_ *raft.Raft, err error) {
	defer func() {
		if r := recover(); r != nil {
			err = g.damaged(g.dir, fmt.Sprintf("starting raft from it failed: %v", r))
		}
	}()
	return raft.NewRaft(rc, g.fsm, logs, stable, snaps, g.transport)
}
