package replica

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"sync"
	"time"

	"github.com/hashicorp/go-hclog"
	"github.com/hashicorp/raft"
	raftboltdb "github.com/hashicorp/raft-boltdb/v2"

	"github.com/quorate/quorate/nodelog"
	"github.com/quorate/quorate/shard"
)

const (
	// sharedLogDirName is the node's shared log, under its data directory:
	// the Raft log of every replica the node hosts (package nodelog).
	sharedLogDirName = "log"
	// sharedMarkerName is the file a replica's directory holds once the
	// shared log's entries of its group are the replica's: a directory
	// without it (new, or deleted to have the replica start afresh) has
	// whatever the shared log and the stable store still hold of the group
	// dropped first, as a former replica's.
	sharedMarkerName = "shared-log"
)

func exists(path string) bool {
	_, err := os.Stat(path)
	return err == nil
}

// NewSharedLogs are the shared log and stable store of the node whose data
// directory is dataDir; segmentBytes sizes the log's segment files (0:
// nodelog's default), onSync is told each fdatasync's duration.
func NewSharedLogs(dataDir string, segmentBytes int, onSync func(time.Duration)) *SharedLogs {
	return &SharedLogs{Dir: filepath.Join(dataDir, sharedLogDirName), StablePath: filepath.Join(dataDir, stableFileName),
		SegmentBytes: segmentBytes, OnSync: onSync}
}

// Exists reports whether dataDir holds a replica of group id: its
// directory has the shared-log marker.
func Exists(dataDir string, id shard.GroupID) bool {
	return exists(filepath.Join(GroupDir(dataDir, id), sharedMarkerName))
}

// SharedLogs opens a node's shared log and its stable store when a replica
// first needs them, and closes them after the last replica closed.
type SharedLogs struct {
	mu     sync.Mutex
	log    *nodelog.Log
	stable *raftboltdb.BoltStore
	// Dir is the shared log's directory; StablePath the stable store's file.
	Dir, StablePath string
	SegmentBytes    int // 0: nodelog's default
	// OnSync is told each fdatasync's duration (nodelog.Options.SyncObserver).
	OnSync func(time.Duration)
}

// get opens the stable store and the shared log on first use; damage to
// either (the log's open-time scan reports a *nodelog.DamagedError naming
// the file) stops the node.
func (s *SharedLogs) get(hlog hclog.Logger) (*nodelog.Log, *raftboltdb.BoltStore, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.log != nil {
		return s.log, s.stable, nil
	}
	data := filepath.Dir(s.Dir)
	recovery := fmt.Sprintf("to recover: delete %s, %s, %s and %s, and start the node again with --join to a running member, never --bootstrap: "+
		"it rejoins under the same ID and each group's leader sends its replica the group's state",
		s.Dir, s.StablePath, filepath.Join(data, "raft"), filepath.Join(data, "groups"))
	stable, err := openStable(s.StablePath)
	if err != nil {
		if errors.Is(err, errStableDamaged) {
			return nil, nil, fmt.Errorf("node: --data-dir: the node's stable store (every replica's term and vote) is damaged, "+
				"so none of its replicas can start: %w (%s)", err, recovery)
		}
		return nil, nil, fmt.Errorf("node: --data-dir: %w", err)
	}
	l, err := nodelog.Open(s.Dir, nodelog.Options{SegmentBytes: int64(s.SegmentBytes), Logger: hlog.Named("nodelog"), SyncObserver: s.OnSync})
	if err != nil {
		_ = stable.Close()
		var de *nodelog.DamagedError
		if errors.As(err, &de) {
			return nil, nil, fmt.Errorf("node: --data-dir: the node's shared Raft log is damaged, so none of its replicas can start: %w (%s)", err, recovery)
		}
		return nil, nil, fmt.Errorf("node: --data-dir: opening %s: %w", s.Dir, err)
	}
	s.log, s.stable = l, stable
	return l, stable, nil
}

// Close closes the shared log and the stable store, if they were opened.
func (s *SharedLogs) Close() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.log == nil {
		return nil
	}
	err := errors.Join(s.log.Close(), s.stable.Close())
	s.log, s.stable = nil, nil
	return err
}

// Drop voids a removed replica's entries in the shared log and its term
// and vote in the stable store, if the node has them open.
func (s *SharedLogs) Drop(id uint32) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.log == nil {
		return nil
	}
	if err := s.log.DropGroup(id); err != nil {
		return err
	}
	return replicaStable{s.stable, id}.forget()
}

// openShared opens the replica's view of the node's shared log and its
// part of the stable store, marking its directory as the group's replica
// first, and returns the log's first and last index (checked by the log's
// own open-time scan).
func (g *Replica) openShared(logs *SharedLogs, hlog hclog.Logger) (_ raft.LogStore, _ raft.StableStore, first, last uint64, err error) {
	l, stable, err := logs.get(hlog)
	if err != nil {
		return nil, nil, 0, 0, err
	}
	rs := replicaStable{stable, uint32(g.ID)}
	if marker := filepath.Join(g.Dir, sharedMarkerName); !exists(marker) {
		// A new replica, or one whose directory was deleted to have it
		// start afresh: whatever the shared log and the stable store still
		// hold of the group is a former replica's, void before the marker
		// claims them.
		if err := l.DropGroup(uint32(g.ID)); err != nil {
			return nil, nil, 0, 0, fmt.Errorf("node: --data-dir: dropping a former replica of group %d from %s: %w", g.ID, logs.Dir, err)
		}
		if err := rs.forget(); err != nil {
			return nil, nil, 0, 0, fmt.Errorf("node: --data-dir: dropping a former replica of group %d from %s: %w", g.ID, logs.StablePath, err)
		}
		if err := writeSynced(marker, []byte("this replica's Raft log is in the node's shared log, <data-dir>/"+sharedLogDirName+"\n")); err != nil {
			return nil, nil, 0, 0, fmt.Errorf("node: --data-dir: %w", err)
		}
	}
	view, err := l.Group(uint32(g.ID))
	if err != nil {
		return nil, nil, 0, 0, err
	}
	if first, err = view.FirstIndex(); err == nil {
		last, err = view.LastIndex()
	}
	if err != nil {
		return nil, nil, 0, 0, err
	}
	return view, rs, first, last, nil
}

// writeSynced writes a new file and syncs it and its directory: a marker
// lost in a power failure would have the replica's log dropped as a
// former replica's.
func writeSynced(path string, b []byte) error {
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_CREATE|os.O_TRUNC, 0o640)
	if err != nil {
		return err
	}
	_, err = f.Write(b)
	if err == nil {
		err = f.Sync()
	}
	if err = errors.Join(err, f.Close()); err != nil {
		return err
	}
	d, err := os.Open(filepath.Dir(path))
	if err != nil {
		return err
	}
	return errors.Join(d.Sync(), d.Close())
}

// dropLogBehindSnapshot deletes the replica's whole log (first..last) when
// it ends before the newest snapshot in snaps. Raft deletes the whole log
// of a store without gaps once it has installed a snapshot; a crash in
// between leaves a log that ends below the snapshot, after which raft
// would append at the snapshot's index + 1: an append the log refuses, for
// a gap.
func (g *Replica) dropLogBehindSnapshot(snaps raft.SnapshotStore, first, last uint64) error {
	if last == 0 {
		return nil
	}
	metas, err := snaps.List()
	if err != nil || len(metas) == 0 || metas[0].Index <= last {
		return nil // checkSnapshots has reported what List failed on
	}
	if err := g.Log.DeleteRange(first, last); err != nil {
		return fmt.Errorf("node: --data-dir: deleting log entries %d-%d of group %d from %s, all below snapshot %s: %w",
			first, last, g.ID, g.Log.file, metas[0].ID, err)
	}
	return nil
}

// OpenStopped opens group gid's view of the shared log and its part of the
// stable store from the data directory of a node that is not running, as
// Open finds them; closing logs closes them. Tests read a stopped node's
// votes and replay its replicas through it.
func OpenStopped(dataDir string, gid uint32) (logs *SharedLogs, view raft.LogStore, stable raft.StableStore, err error) {
	logs = NewSharedLogs(dataDir, 0, nil)
	l, s, err := logs.get(hclog.NewNullLogger())
	if err != nil {
		return nil, nil, nil, err
	}
	if view, err = l.Group(gid); err != nil {
		return nil, nil, nil, errors.Join(err, logs.Close())
	}
	return logs, view, replicaStable{s, gid}, nil
}
