package replica

import (
	"errors"
	"fmt"
	"path/filepath"

	"github.com/hashicorp/raft"

	"github.com/quorate/quorate/shard"
)

// ErrDamaged is wrapped by the errors of a group replica whose files
// on disk are damaged: a log entry that fails its checksum, a bolt file
// bbolt cannot read, a snapshot that fails its checksum or is missing. The
// replica does not start (or stops); the rest of the node goes on.
var ErrDamaged = errors.New("node: replica files damaged")

// DamagedError says which file of which replica is damaged, and how to
// recover. It wraps ErrDamaged.
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

func (e *DamagedError) Unwrap() error { return ErrDamaged }

// damaged is the error of file of g's replica, damaged as detail says.
func (g *Replica) damaged(file, detail string) *DamagedError {
	return &DamagedError{Group: g.ID, File: file, Dir: g.Dir, Detail: detail}
}

// checkSnapshots checks that the snapshot raft will restore (the newest)
// matches its checksum, and that the log continues it: the log's last run
// of consecutive entries (first..last, 0 when empty) starts at or before
// the entry after the snapshot, so any gap below it is covered. Raft
// retries a snapshot that fails to open, and panics on a log that starts
// after the state it restored.
func (g *Replica) checkSnapshots(snaps raft.SnapshotStore, first, last uint64) error {
	dir := filepath.Join(g.Dir, "snapshots")
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

// startRaft starts the replica's raft. raft panics, instead of failing, on
// some states of its stores that the checks above should already have
// refused; such a panic becomes a *DamagedError too.
func (g *Replica) startRaft(rc *raft.Config, logs raft.LogStore, stable raft.StableStore, snaps raft.SnapshotStore) (_ *raft.Raft, err error) {
	defer func() {
		if r := recover(); r != nil {
			err = g.damaged(g.Dir, fmt.Sprintf("starting raft from it failed: %v", r))
		}
	}()
	return raft.NewRaft(rc, g.FSM, logs, stable, snaps, g.transport)
}
