package nodelog

import (
	"fmt"

	"github.com/hashicorp/raft"
)

// Group returns group id's view of the log: a raft.LogStore, safe for
// concurrent use. Views of one id share its entries.
func (l *Log) Group(id uint32) (raft.LogStore, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.closed {
		return nil, ErrClosed
	}
	return &group{l: l, id: id}, nil
}

type group struct {
	l  *Log
	id uint32
}

var (
	_ raft.LogStore          = (*group)(nil)
	_ raft.MonotonicLogStore = (*group)(nil)
)

// IsMonotonic tells Raft that a group's log has no gaps: after installing
// a snapshot Raft empties it rather than keeping trailing entries below
// the snapshot, so the next entry may start anywhere.
func (g *group) IsMonotonic() bool { return true }

// state returns the group's state, creating it. mu held.
func (g *group) state() *groupState {
	s := g.l.groups[g.id]
	if s == nil {
		s = &groupState{}
		g.l.groups[g.id] = s
	}
	return s
}

func (g *group) FirstIndex() (uint64, error) {
	g.l.mu.Lock()
	defer g.l.mu.Unlock()
	if g.l.closed {
		return 0, ErrClosed
	}
	if s := g.l.groups[g.id]; s != nil {
		return s.first, nil
	}
	return 0, nil
}

func (g *group) LastIndex() (uint64, error) {
	g.l.mu.Lock()
	defer g.l.mu.Unlock()
	if g.l.closed {
		return 0, ErrClosed
	}
	if s := g.l.groups[g.id]; s != nil {
		return s.last, nil
	}
	return 0, nil
}

// GetLog reads entry index from its segment and checks its checksum. An
// entry still being written is waited for.
func (g *group) GetLog(index uint64, out *raft.Log) error {
	l := g.l
	var (
		lc  loc
		seg *segment
	)
	for {
		l.filesMu.RLock()
		l.mu.Lock()
		if l.closed {
			l.mu.Unlock()
			l.filesMu.RUnlock()
			return ErrClosed
		}
		var ok bool
		if s := l.groups[g.id]; s != nil {
			lc, ok = s.at(index)
		}
		if !ok || lc.n == 0 {
			l.mu.Unlock()
			l.filesMu.RUnlock()
			return raft.ErrLogNotFound
		}
		seg = l.byID[lc.seg]
		if seg.written >= int64(lc.off)+int64(lc.n) {
			l.mu.Unlock()
			break
		}
		if l.err != nil {
			err := l.err
			l.mu.Unlock()
			l.filesMu.RUnlock()
			return err
		}
		l.filesMu.RUnlock()
		l.cond.Wait()
		l.mu.Unlock()
	}
	defer l.filesMu.RUnlock()
	rec := make([]byte, lc.n)
	if _, err := seg.f.ReadAt(rec, int64(lc.off)); err != nil {
		return fmt.Errorf("nodelog: read %s at offset %d: %w", seg.path, lc.off, err)
	}
	h, err := decodeHeader(rec)
	if err == nil && (h.kind != kindEntry || h.group != g.id || h.index != index) {
		err = fmt.Errorf("record is kind %d of group %d index %d, not entry %d of group %d",
			h.kind, h.group, h.index, index, g.id)
	}
	if err != nil {
		return &DamagedError{File: seg.path, Offset: int64(lc.off), Detail: err.Error()}
	}
	decodeEntry(rec, h, out)
	return nil
}

func (g *group) StoreLog(log *raft.Log) error { return g.StoreLogs([]*raft.Log{log}) }

// StoreLogs appends logs, which must follow the group's last entry one
// by one (any index when the group is empty), and returns once they are
// synced: with the records other groups queued meanwhile, in one write.
func (g *group) StoreLogs(logs []*raft.Log) error {
	if len(logs) == 0 {
		return nil
	}
	var rec []byte
	ends := make([]uint32, len(logs))
	for i, lg := range logs {
		if lg.Index == 0 || (i > 0 && lg.Index != logs[i-1].Index+1) {
			return ErrNonSequential
		}
		rec = appendEntry(rec, g.id, lg)
		ends[i] = uint32(len(rec))
	}
	if len(rec) > maxRecordLen {
		return fmt.Errorf("nodelog: %d bytes in one StoreLogs, more than %d", len(rec), maxRecordLen)
	}
	l := g.l
	l.mu.Lock()
	defer l.mu.Unlock()
	if err := l.usable(); err != nil {
		return err
	}
	s := g.state()
	if !s.empty() && logs[0].Index != s.last+1 {
		return fmt.Errorf("%w: group %d last %d, first stored %d", ErrNonSequential, g.id, s.last, logs[0].Index)
	}
	seg, off, seq := l.place(rec)
	start := uint32(0)
	for i, lg := range logs {
		s.add(lg.Index, loc{seg: seg.id, off: uint32(off) + start, n: ends[i] - start})
		start = ends[i]
	}
	seg.live += len(logs)
	return l.waitDurable(seq)
}

// DeleteRange voids entries min to max: a head (after a snapshot) or a
// tail (a conflicting suffix), or all of them. It returns once the record
// saying so is synced; the segments left without live entries are deleted.
func (g *group) DeleteRange(min, max uint64) error {
	l := g.l
	l.mu.Lock()
	defer l.mu.Unlock()
	if err := l.usable(); err != nil {
		return err
	}
	s := l.groups[g.id]
	if min > max || s == nil || s.empty() || max < s.first || min > s.last {
		return nil
	}
	var rec []byte
	switch {
	case min <= s.first:
		rec = appendMark(nil, kindHead, g.id, max)
	case max >= s.last:
		rec = appendMark(nil, kindTail, g.id, min-1)
	default:
		return fmt.Errorf("%w: [%d, %d] of [%d, %d]", ErrMiddleDelete, min, max, s.first, s.last)
	}
	_, _, seq := l.place(rec)
	if min <= s.first {
		s.truncHead(max, l.gone(seq))
	} else {
		s.truncTail(min-1, l.gone(seq))
	}
	return l.waitDurable(seq)
}
