package nodelog

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/hashicorp/go-hclog"
)

// DefaultSegmentBytes is the size a segment grows to before the next
// record opens a new one.
const DefaultSegmentBytes = 16 << 20

// Options configure Open.
type Options struct {
	// SegmentBytes is the size past which a new segment is started
	// (DefaultSegmentBytes when zero, at most 2 GiB); each segment file is
	// zero-filled to it when created. One StoreLogs call's records never
	// span two segments, so a segment may end a little larger.
	SegmentBytes int64
	// SyncsInFlight is how many commits may be syncing at once (1 when
	// zero): while one commit's fdatasync runs, the writes queued
	// meanwhile may start the next rather than wait for it; the disk
	// may overlap them.
	SyncsInFlight int
	// Logger receives what Open repairs (a torn tail cut away). Nil logs
	// nowhere.
	Logger hclog.Logger
	// SyncObserver, if set, is told how long each commit's fdatasync of a
	// segment took (for a latency metric). It runs on the committing
	// goroutine, outside the log's lock: it must be quick.
	SyncObserver func(time.Duration)
}

var (
	// ErrClosed is returned by every call on a closed Log.
	ErrClosed = errors.New("nodelog: log closed")
	// ErrNonSequential is returned by StoreLogs when the entries do not
	// follow the group's last entry one by one.
	ErrNonSequential = errors.New("nodelog: entries not in sequence with the group's last entry")
	// ErrMiddleDelete is returned by DeleteRange of a range that leaves
	// entries on both sides (Raft deletes only a head or a tail).
	ErrMiddleDelete = errors.New("nodelog: DeleteRange would leave a gap in the log")
)

// DamagedError is the damage Open or GetLog found in a segment: a record
// that fails its checksum or does not fit the log, anywhere but in the
// torn tail of the last segment.
type DamagedError struct {
	File   string
	Offset int64
	Detail string
}

func (e *DamagedError) Error() string {
	return fmt.Sprintf("nodelog: %s at offset %d: %s; the node's Raft log is damaged and cannot be trusted: "+
		"wipe this node's replica data directory and let the node rejoin, its replicas are restored from their peers",
		e.File, e.Offset, e.Detail)
}

// segment is one segment file. end, written, live and zeroAt are guarded
// by Log.mu.
type segment struct {
	id      uint32
	path    string
	f       *os.File
	end     int64  // where the next record placed here goes
	written int64  // bytes written to the file so far
	live    int    // live entries with records here
	zeroAt  uint64 // the sequence number of the record that made live 0
}

// chunk is bytes waiting to be written at off in seg; create says the
// chunk opens the segment (whose directory entry must be synced too).
type chunk struct {
	seg    *segment
	off    int64
	buf    []byte
	create bool
}

// Log is one node's Raft log, shared by the groups it hosts. Safe for
// concurrent use.
type Log struct {
	dir    string
	opts   Options
	logger hclog.Logger

	// filesMu is held shared while reading a segment file, exclusively
	// while closing one; taken before mu, never while waiting on cond.
	filesMu sync.RWMutex

	mu        sync.Mutex
	cond      *sync.Cond // broadcast when a commit ends
	groups    map[uint32]*groupState
	segs      []*segment // ascending id; the last is the active one
	byID      map[uint32]*segment
	pending   []chunk
	seq       uint64    // sequence number of the last queued write
	durable   uint64    // every write up to this one is synced
	syncedSeg uint32    // the newest segment whose checkpoint is synced
	flights   []*flight // commits under way, oldest first
	exclusive bool      // a commit opening a segment is under way
	spare     *os.File  // the next segment's file, zero-filled ahead (spareFile)
	spareBusy bool      // a committer is zero-filling the spare
	err       error     // sticky: a failed write makes every later call fail
	closed    bool

	syncs   atomic.Uint64
	commits atomic.Uint64
}

// Stats are counters of a Log since Open.
type Stats struct {
	Commits  uint64 // writes of queued records
	Syncs    uint64 // fdatasync and directory fsync calls
	Segments int    // segment files
	Bytes    int64  // bytes of records in the segments (each file is zero-filled to SegmentBytes)
}

// Stats returns the Log's counters.
func (l *Log) Stats() Stats {
	l.mu.Lock()
	defer l.mu.Unlock()
	s := Stats{Commits: l.commits.Load(), Syncs: l.syncs.Load(), Segments: len(l.segs)}
	for _, sg := range l.segs {
		s.Bytes += sg.end
	}
	return s
}

func segName(id uint32) string { return fmt.Sprintf("%08x.seg", id) }

// Open opens the log in dir, creating it when missing, and replays its
// segments. Damage other than a torn tail is a *DamagedError.
func Open(dir string, opts Options) (*Log, error) {
	if opts.SegmentBytes <= 0 {
		opts.SegmentBytes = DefaultSegmentBytes
	}
	// Offsets are 32 bits: a segment may end a StoreLogs call (at most
	// maxRecordLen) past SegmentBytes.
	opts.SegmentBytes = min(opts.SegmentBytes, 1<<31)
	if opts.SyncsInFlight <= 0 {
		opts.SyncsInFlight = 1
	}
	logger := opts.Logger
	if logger == nil {
		logger = hclog.NewNullLogger()
	}
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return nil, err
	}
	l := &Log{
		dir: dir, opts: opts, logger: logger,
		groups: map[uint32]*groupState{}, byID: map[uint32]*segment{},
	}
	l.cond = sync.NewCond(&l.mu)
	if err := l.replay(); err != nil {
		l.closeFiles()
		return nil, err
	}
	// A fresh segment opening with a checkpoint of what the scan found:
	// from here on, older segments left without live entries can go.
	l.mu.Lock()
	l.roll()
	err := l.waitDurable(l.seq)
	l.mu.Unlock()
	if err != nil {
		l.closeFiles()
		return nil, err
	}
	l.removeDead()
	return l, nil
}

// Close waits for queued writes and closes the files.
func (l *Log) Close() error {
	l.mu.Lock()
	if l.closed {
		l.mu.Unlock()
		return ErrClosed
	}
	l.closed = true
	err := l.waitDurable(l.seq)
	for l.spareBusy {
		l.cond.Wait()
	}
	if l.spare != nil {
		l.spare.Close()
		l.spare = nil
	}
	l.mu.Unlock()
	if cerr := l.closeFiles(); err == nil {
		err = cerr
	}
	return err
}

func (l *Log) closeFiles() error {
	l.filesMu.Lock()
	defer l.filesMu.Unlock()
	var errs []error
	for _, s := range l.segs {
		if s.f != nil {
			errs = append(errs, s.f.Close())
		}
	}
	return errors.Join(errs...)
}

// usable returns why no write may be queued, if so. mu held.
func (l *Log) usable() error {
	if l.closed {
		return ErrClosed
	}
	return l.err
}

// gone is the bookkeeping of an entry voided by the write with sequence
// number seq. mu held.
func (l *Log) gone(seq uint64) func(loc) {
	return func(lc loc) {
		if s := l.byID[lc.seg]; s != nil && lc.n > 0 {
			s.live--
			if s.live == 0 {
				s.zeroAt = seq
			}
		}
	}
}

// place reserves n bytes for records in the active segment, opening a new
// one first when they do not fit, and queues rec there. It returns the
// segment and offset and the write's sequence number. mu held.
func (l *Log) place(rec []byte) (*segment, int64, uint64) {
	if a := l.segs[len(l.segs)-1]; a.end > 0 && a.end+int64(len(rec)) > l.opts.SegmentBytes {
		l.roll()
	}
	a := l.segs[len(l.segs)-1]
	off := a.end
	l.queue(a, rec, false)
	l.seq++
	return a, off, l.seq
}

// queue appends rec to the pending writes at the end of seg. mu held.
func (l *Log) queue(seg *segment, rec []byte, create bool) {
	if n := len(l.pending); n > 0 && !create {
		if c := &l.pending[n-1]; c.seg == seg && c.off+int64(len(c.buf)) == seg.end {
			c.buf = append(c.buf, rec...)
			seg.end += int64(len(rec))
			return
		}
	}
	l.pending = append(l.pending, chunk{seg: seg, off: seg.end, buf: slices.Clone(rec), create: create})
	seg.end += int64(len(rec))
}

// roll starts a new segment whose first record is a checkpoint of every
// live group. Its file is created when the chunk is written. mu held.
func (l *Log) roll() {
	id := uint32(1)
	if n := len(l.segs); n > 0 {
		id = l.segs[n-1].id + 1
	}
	s := &segment{id: id, path: filepath.Join(l.dir, segName(id))}
	l.segs = append(l.segs, s)
	l.byID[id] = s
	spans := make([]span, 0, len(l.groups))
	for id, g := range l.groups {
		if !g.empty() {
			spans = append(spans, span{group: id, first: g.first, last: g.last})
		}
	}
	slices.SortFunc(spans, func(a, b span) int { return int(int64(a.group) - int64(b.group)) })
	l.queue(s, appendCheckpoint(nil, spans), true)
	l.seq++
}

// waitDurable returns once write seq is synced, committing queued writes
// itself whenever a commit may start. mu held (released while syncing).
func (l *Log) waitDurable(seq uint64) error {
	for l.durable < seq {
		if l.err != nil {
			return l.err
		}
		if l.mayCommit() {
			l.commit()
			continue
		}
		l.cond.Wait()
	}
	return nil
}

// flight is a commit under way: the writes queued up to sequence number
// upto, in chunks.
type flight struct {
	upto   uint64
	chunks []chunk
	done   bool
	err    error
}

func opensSegment(chunks []chunk) bool {
	return slices.ContainsFunc(chunks, func(c chunk) bool { return c.create })
}

// mayCommit reports whether a commit of the pending writes may start now:
// fewer than SyncsInFlight are under way, and a commit that opens a
// segment runs alone. mu held.
func (l *Log) mayCommit() bool {
	if len(l.pending) == 0 || l.exclusive || len(l.flights) >= l.opts.SyncsInFlight {
		return false
	}
	return len(l.flights) == 0 || !opensSegment(l.pending)
}

// commit writes every pending chunk and syncs it. Commits are written in
// order, under mu (into the page cache), and their fdatasyncs may
// overlap; a commit that opens a segment (creating and zero-filling the
// file) runs alone, outside mu. The writes are durable once their commit
// and every earlier one are. mu held, released meanwhile.
func (l *Log) commit() {
	f := &flight{upto: l.seq, chunks: l.pending}
	l.pending = nil
	l.flights = append(l.flights, f)
	if opensSegment(f.chunks) {
		l.exclusive = true
		l.mu.Unlock()
		f.err = l.write(f.chunks)
		l.mu.Lock()
		l.exclusive = false
	} else {
		// Only the active segment, created by an earlier commit.
		for _, c := range f.chunks {
			if _, err := c.seg.f.WriteAt(c.buf, c.off); err != nil && f.err == nil {
				f.err = fmt.Errorf("%s: %w", c.seg.path, err)
			}
		}
		if f.err == nil {
			seg := f.chunks[0].seg
			l.mu.Unlock()
			if err := l.syncSegment(seg.f); err != nil {
				f.err = fmt.Errorf("%s: %w", seg.path, err)
			}
			l.mu.Lock()
		}
	}
	f.done = true
	l.commits.Add(1)
	for len(l.flights) > 0 && l.flights[0].done {
		d := l.flights[0]
		l.flights = l.flights[1:]
		if d.err != nil && l.err == nil {
			l.err = fmt.Errorf("nodelog: write failed, the log refuses writes until reopened: %w", d.err)
		}
		if l.err != nil {
			continue
		}
		l.durable = d.upto
		for _, c := range d.chunks {
			c.seg.written = c.off + int64(len(c.buf))
			if c.create {
				l.syncedSeg = c.seg.id
			}
		}
	}
	l.cond.Broadcast()
	if l.err == nil && l.hasDead() {
		l.mu.Unlock()
		l.removeDead()
		l.mu.Lock()
	}
	l.prepareSpare()
}

// write writes chunks in order. A segment is synced before the next one
// is written to, so that only the last segment can end torn.
func (l *Log) write(chunks []chunk) error {
	for i, c := range chunks {
		if c.create {
			f, err := l.createSegment(c.seg.path)
			if err != nil {
				return err
			}
			l.mu.Lock()
			c.seg.f = f
			l.mu.Unlock()
		}
		if _, err := c.seg.f.WriteAt(c.buf, c.off); err != nil {
			return fmt.Errorf("%s: %w", c.seg.path, err)
		}
		if i+1 < len(chunks) && chunks[i+1].seg == c.seg {
			continue
		}
		if err := l.syncSegment(c.seg.f); err != nil {
			return fmt.Errorf("%s: %w", c.seg.path, err)
		}
		if c.create {
			if err := l.syncDir(); err != nil {
				return err
			}
		}
	}
	return nil
}

func (l *Log) syncDir() error {
	d, err := os.Open(l.dir)
	if err != nil {
		return err
	}
	defer d.Close()
	l.syncs.Add(1)
	return d.Sync()
}

// dead reports whether s can be deleted: not the active segment, older
// than a synced checkpoint, and without live entries since a synced write.
// mu held.
func (l *Log) dead(s *segment) bool {
	return s != l.segs[len(l.segs)-1] && s.id < l.syncedSeg && s.live == 0 && s.zeroAt <= l.durable
}

func (l *Log) hasDead() bool { return slices.ContainsFunc(l.segs, l.dead) }

// removeDead deletes the segments no group needs any more.
func (l *Log) removeDead() {
	l.filesMu.Lock()
	defer l.filesMu.Unlock()
	l.mu.Lock()
	var dead []*segment
	l.segs = slices.DeleteFunc(l.segs, func(s *segment) bool {
		if l.dead(s) {
			dead = append(dead, s)
			delete(l.byID, s.id)
			return true
		}
		return false
	})
	l.mu.Unlock()
	for _, s := range dead {
		if s.f != nil {
			s.f.Close()
		}
		if err := os.Remove(s.path); err != nil && !os.IsNotExist(err) {
			l.logger.Warn("nodelog: cannot remove a segment without live entries", "file", s.path, "error", err)
		}
	}
}

// DropGroup voids every entry of group id, durably:
// the replica is deleted. A later Group(id) starts empty.
func (l *Log) DropGroup(id uint32) error {
	rec := appendMark(nil, kindDrop, id, 0)
	l.mu.Lock()
	if err := l.usable(); err != nil {
		l.mu.Unlock()
		return err
	}
	_, _, seq := l.place(rec)
	if g := l.groups[id]; g != nil {
		g.drop(l.gone(seq))
		delete(l.groups, id)
	}
	err := l.waitDurable(seq)
	l.mu.Unlock()
	return err
}

// syncSegment is a commit's fdatasync of a segment file, counted and timed
// (Options.SyncObserver).
func (l *Log) syncSegment(f *os.File) error {
	l.syncs.Add(1)
	start := time.Now()
	err := fdatasync(f)
	if o := l.opts.SyncObserver; o != nil {
		o(time.Since(start))
	}
	return err
}
