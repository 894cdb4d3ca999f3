package replica

import (
	"errors"
	"fmt"
	"io"
	"io/fs"
	"path/filepath"
	"sync"
	"sync/atomic"
	"time"

	"github.com/hashicorp/raft"
)

// storageHealth is the last storage error of a replica (a failed write, a
// full disk, a damaged file), for its status. Safe for concurrent use.
type storageHealth struct {
	mu  sync.Mutex
	err error
	at  time.Time
	// onDamage, once set (after raft started), stops the replica.
	onDamage atomic.Pointer[func(error)]
}

// damage records err, a *DamagedError found while the replica runs, and
// stops the replica.
func (h *storageHealth) damage(err error) {
	h.record(err)
	if f := h.onDamage.Load(); f != nil {
		(*f)(err)
	}
}

func (h *storageHealth) record(err error) {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.err, h.at = err, time.Now()
}

// Last is the last error recorded and when, or nil.
func (h *storageHealth) Last() (error, time.Time) {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.err, h.at
}

// recordingStable is a raft.StableStore that records its write errors.
type recordingStable struct {
	raft.StableStore
	file   string
	health *storageHealth
}

var _ raft.StableStore = (*recordingStable)(nil)

// Set implements raft.StableStore.
func (s *recordingStable) Set(k, v []byte) error {
	return s.check(s.StableStore.Set(k, v))
}

// SetUint64 implements raft.StableStore.
func (s *recordingStable) SetUint64(k []byte, v uint64) error {
	return s.check(s.StableStore.SetUint64(k, v))
}

func (s *recordingStable) check(err error) error {
	if err != nil {
		s.health.record(fmt.Errorf("writing the stable store %s: %w", s.file, err))
	}
	return err
}

// recordingSnapshots is a raft.SnapshotStore that records the errors of
// writing snapshots. A snapshot that cannot be opened (one the leader was
// to send to a follower) is damaged: Open reports it to health, which
// stops the replica.
type recordingSnapshots struct {
	raft.SnapshotStore
	dir     string
	health  *storageHealth
	damaged func(file, detail string) *DamagedError
}

var _ raft.SnapshotStore = (*recordingSnapshots)(nil)

// Create implements raft.SnapshotStore.
func (s *recordingSnapshots) Create(version raft.SnapshotVersion, index, term uint64, configuration raft.Configuration,
	configurationIndex uint64, trans raft.Transport) (raft.SnapshotSink, error) {
	sink, err := s.SnapshotStore.Create(version, index, term, configuration, configurationIndex, trans)
	if err != nil {
		s.health.record(fmt.Errorf("creating a snapshot in %s: %w", s.dir, err))
		return nil, err
	}
	return &recordingSink{SnapshotSink: sink, dir: s.dir, health: s.health}, nil
}

// Open implements raft.SnapshotStore.
func (s *recordingSnapshots) Open(id string) (*raft.SnapshotMeta, io.ReadCloser, error) {
	meta, rc, err := s.SnapshotStore.Open(id)
	if err != nil && !errors.Is(err, fs.ErrNotExist) { // not reaped meanwhile
		err = s.damaged(filepath.Join(s.dir, id, "state.bin"), fmt.Sprintf("snapshot %s cannot be read: %v", id, err))
		s.health.damage(err)
	}
	return meta, rc, err
}

// recordingSink is a raft.SnapshotSink that records its write errors.
type recordingSink struct {
	raft.SnapshotSink
	dir    string
	health *storageHealth
}

func (s *recordingSink) Write(p []byte) (int, error) {
	n, err := s.SnapshotSink.Write(p)
	if err != nil {
		s.health.record(fmt.Errorf("writing snapshot %s: %w", filepath.Join(s.dir, s.ID()), err))
	}
	return n, err
}

func (s *recordingSink) Close() error {
	err := s.SnapshotSink.Close()
	if err != nil {
		s.health.record(fmt.Errorf("writing snapshot %s: %w", filepath.Join(s.dir, s.ID()), err))
	}
	return err
}
