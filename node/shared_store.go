package node

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"sync"
	"time"

	"github.com/hashicorp/go-hclog"
	"github.com/hashicorp/raft"

	"github.com/quorate/quorate/nodelog"
)

// LogStoreShared keeps the Raft logs of all a node's replicas in one log
// (package nodelog, under <data-dir>/log): appends of different groups
// that arrive together share one write and one fdatasync.
const LogStoreShared = "shared"

const (
	// sharedLogDirName is the node's shared log, under its data directory.
	sharedLogDirName = "log"
	// sharedMarkerName is the file a replica's directory holds when its log
	// is in the node's shared log: a replica keeps the store it was
	// created with, whatever --log-store says later.
	sharedMarkerName = "shared-log"
)

// storeKind is where a replica keeps its Raft log and stable store.
type storeKind int

const (
	storeWAL    storeKind = iota // raft-wal in <replica>/wal
	storeBolt                    // raft-boltdb in <replica>/raft.db
	storeShared                  // the node's shared log
)

// storeKind is the store of the replica: the one its directory holds (a
// bolt file, a WAL, or the shared log's marker), or, for a new replica,
// choice (the node's --log-store).
func (g *group) storeKind(choice string) storeKind {
	switch {
	case exists(g.boltPath()):
		return storeBolt
	case exists(g.walDir()):
		return storeWAL
	case exists(filepath.Join(g.dir, sharedMarkerName)):
		return storeShared
	case choice == LogStoreBolt:
		return storeBolt
	case choice == LogStoreShared:
		return storeShared
	}
	return storeWAL
}

func exists(path string) bool {
	_, err := os.Stat(path)
	return err == nil
}

// sharedLogs opens a node's shared log when a replica first needs it, and
// closes it after the last replica closed.
type sharedLogs struct {
	mu           sync.Mutex
	log          *nodelog.Log
	dir          string
	segmentBytes int // 0: nodelog's default
	// onSync is told each fdatasync's duration (nodelog.Options.SyncObserver).
	onSync func(time.Duration)
}

// get opens the shared log on first use; its open-time scan reports damage
// (a *nodelog.DamagedError naming the file), which stops the node.
func (s *sharedLogs) get(hlog hclog.Logger) (*nodelog.Log, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.log != nil {
		return s.log, nil
	}
	l, err := nodelog.Open(s.dir, nodelog.Options{SegmentBytes: int64(s.segmentBytes), Logger: hlog.Named("nodelog"), SyncObserver: s.onSync})
	if err != nil {
		var de *nodelog.DamagedError
		if errors.As(err, &de) {
			data := filepath.Dir(s.dir)
			return nil, fmt.Errorf("node: --data-dir: the node's shared Raft log is damaged, so none of its replicas can start: %w "+
				"(to recover: delete %s, %s and %s, and start the node again with --join to a running member, never --bootstrap: "+
				"it rejoins under the same ID and each group's leader sends its replica the group's state)",
				err, s.dir, filepath.Join(data, "raft"), filepath.Join(data, "groups"))
		}
		return nil, fmt.Errorf("node: --data-dir: opening %s: %w", s.dir, err)
	}
	s.log = l
	return l, nil
}

// close closes the shared log, if it was opened.
func (s *sharedLogs) close() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.log == nil {
		return nil
	}
	err := s.log.Close()
	s.log = nil
	return err
}

// drop voids a removed replica's entries and stable store in the shared
// log, if the node has one open.
func (s *sharedLogs) drop(id uint32) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.log == nil {
		return nil
	}
	return s.log.DropGroup(id)
}

// sharedStore is a replica's view of the node's shared log.
type sharedStore struct {
	raft.LogStore
	raft.StableStore
}

// IsMonotonic implements raft.MonotonicLogStore, as the view does.
func (s sharedStore) IsMonotonic() bool {
	m, ok := s.LogStore.(raft.MonotonicLogStore)
	return ok && m.IsMonotonic()
}

// Close implements replicaStore: the shared log outlives its replicas.
func (sharedStore) Close() error { return nil }

// openShared opens the replica's view of the node's shared log, marking
// its directory as a replica of the shared log first, and returns the
// log's first and last index (checked by the log's own open-time scan).
func (g *group) openShared(logs *sharedLogs, hlog hclog.Logger) (_ replicaStore, first, last uint64, err error) {
	l, err := logs.get(hlog)
	if err != nil {
		return nil, 0, 0, err
	}
	if marker := filepath.Join(g.dir, sharedMarkerName); !exists(marker) {
		// A new replica, or one whose directory was deleted to have it
		// start afresh: whatever the shared log still holds of the group
		// is a former replica's, void before the marker claims the log.
		if err := l.DropGroup(uint32(g.id)); err != nil {
			return nil, 0, 0, fmt.Errorf("node: --data-dir: dropping a former replica of group %d from %s: %w", g.id, logs.dir, err)
		}
		if err := writeSynced(marker, []byte("this replica's Raft log is in the node's shared log, <data-dir>/"+sharedLogDirName+"\n")); err != nil {
			return nil, 0, 0, fmt.Errorf("node: --data-dir: %w", err)
		}
	}
	view, err := l.Group(uint32(g.id))
	if err != nil {
		return nil, 0, 0, err
	}
	if first, err = view.FirstIndex(); err == nil {
		last, err = view.LastIndex()
	}
	if err != nil {
		return nil, 0, 0, err
	}
	return sharedStore{LogStore: view, StableStore: l.Stable(uint32(g.id))}, first, last, nil
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
