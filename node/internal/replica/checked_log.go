package replica

import (
	"errors"
	"fmt"

	"github.com/hashicorp/raft"

	"github.com/quorate/quorate/nodelog"
)

// checkedLog is the raft.LogStore of a replica, over its view of the
// node's shared log. The log checks every record's checksum (and its
// group and index) when it reads it; a damaged entry found while the
// replica runs makes GetLog return a *DamagedError, reported to health
// (which stops the replica), so raft never sees an entry whose bytes
// changed on disk. Write errors are recorded in health. Methods are safe
// for concurrent use, as the log's are.
type checkedLog struct {
	store raft.LogStore
	// file is the log's directory, which its write errors name; damaged
	// the error of a damaged file.
	file    string
	damaged func(file, detail string) *DamagedError
	health  *storageHealth
}

var (
	_ raft.LogStore          = (*checkedLog)(nil)
	_ raft.MonotonicLogStore = (*checkedLog)(nil)
)

// IsMonotonic implements raft.MonotonicLogStore: it is the log's answer.
// A log that holds no gaps has raft delete the whole log when it installs
// a snapshot, instead of appending after a gap.
func (c *checkedLog) IsMonotonic() bool {
	m, ok := c.store.(raft.MonotonicLogStore)
	return ok && m.IsMonotonic()
}

// FirstIndex implements raft.LogStore.
func (c *checkedLog) FirstIndex() (uint64, error) { return c.store.FirstIndex() }

// LastIndex implements raft.LogStore.
func (c *checkedLog) LastIndex() (uint64, error) { return c.store.LastIndex() }

// GetLog implements raft.LogStore: it returns the entry at index only when
// the log found it intact.
func (c *checkedLog) GetLog(index uint64, l *raft.Log) error {
	err := c.store.GetLog(index, l)
	var de *nodelog.DamagedError
	switch {
	case err == nil, errors.Is(err, raft.ErrLogNotFound), errors.Is(err, nodelog.ErrClosed):
		return err
	case errors.As(err, &de):
		return c.damage(de.File, fmt.Sprintf("log entry %d, at offset %d: %s", index, de.Offset, de.Detail))
	}
	return c.damage(c.file, fmt.Sprintf("log entry %d cannot be read: %v", index, err))
}

// damage reports a damaged entry found while the replica runs.
func (c *checkedLog) damage(file, detail string) error {
	err := c.damaged(file, detail)
	c.health.damage(err)
	return err
}

// StoreLog implements raft.LogStore.
func (c *checkedLog) StoreLog(l *raft.Log) error {
	return c.StoreLogs([]*raft.Log{l})
}

// StoreLogs implements raft.LogStore.
func (c *checkedLog) StoreLogs(logs []*raft.Log) error {
	if err := c.store.StoreLogs(logs); err != nil {
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
