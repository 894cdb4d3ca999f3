package node

// An experiment for issue #7: should a node hosting many Raft groups keep one
// raft-boltdb file per group, or all the groups' logs in one shared bbolt
// file whose concurrent commits share one fsync? BenchmarkLogStore measures
// StoreLogs of 1-entry batches from G concurrent groups, fsync on, for each
// option. sharedBolt is the shared option, written here only to be measured,
// with three ways to commit: a transaction per write, bbolt's DB.Batch (a
// timer window), and a group commit without a timer.
//
// What it showed on a 2-vCPU VM with an ext4 virtual disk (3 runs; fsyncs
// are 2 per bbolt commit, checked with strace -c):
//
//	G=8   file per group        2.1k–2.8k entries/s  4.3k–5.6k fsyncs/s  2.9–3.7 ms/StoreLogs
//	      shared, DB.Batch 10ms    ~0.65k            ~165                 ~12 ms
//	      shared, DB.Batch 2ms     2.0k–2.3k         500–565              3.5–4.0 ms
//	      shared, group commit     2.3k–3.7k         1.3k–2.1k            2.1–3.5 ms
//	G=64  file per group        2.6k–3.1k            5.2k–6.1k            21–25 ms
//	      shared, group commit     6.9k–7.7k         430–490              8.3–9.2 ms
//	G=1   file per group / shared group commit: 0.5k–1.9k, same either way;
//	      DB.Batch costs a lone group its whole window (84/s at 10ms).
//
// So: one shared file with a timer-less group commit — as fast as a file per
// group at 8 groups and 2.5× at 64, with a tenth of the fsyncs — but not
// DB.Batch with its default 10ms window.

import (
	"encoding/binary"
	"errors"
	"fmt"
	"path/filepath"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/hashicorp/go-hclog"
	"github.com/hashicorp/raft"
	raftboltdb "github.com/hashicorp/raft-boltdb/v2"
	"go.etcd.io/bbolt"

	"github.com/quorate/quorate/shard"
)

// sharedBolt is one bbolt file holding the Raft log and stable store of many
// groups: a top-level bucket per group, holding a "logs" and a "conf"
// bucket. Safe for concurrent use.
type sharedBolt struct {
	db   *bbolt.DB
	mode sharedMode

	// sharedGroupCommit: writes queued while a commit runs go in the next.
	mu         sync.Mutex
	committing bool
	queue      []sharedWrite
}

// sharedMode is how a sharedBolt commits its groups' writes.
type sharedMode int

const (
	sharedUpdate      sharedMode = iota // one DB.Update (one commit) per write
	sharedBatch                         // DB.Batch: writes within MaxBatchDelay share a commit
	sharedGroupCommit                   // writes arriving during a commit share the next one
)

type sharedWrite struct {
	fn   func(*bbolt.Tx) error
	done chan error
}

var (
	sharedLogsBucket = []byte("logs")
	sharedConfBucket = []byte("conf")
	errSharedNoKey   = errors.New("not found") // raft matches the message, as raft-boltdb's ErrKeyNotFound
)

// openSharedBolt opens (creating) the file at path. maxDelay and maxSize,
// when not zero, set the DB.Batch window of sharedBatch.
func openSharedBolt(path string, mode sharedMode, maxDelay time.Duration, maxSize int) (*sharedBolt, error) {
	db, err := bbolt.Open(path, 0o600, &bbolt.Options{Timeout: time.Second})
	if err != nil {
		return nil, err
	}
	if maxDelay > 0 {
		db.MaxBatchDelay = maxDelay
	}
	if maxSize > 0 {
		db.MaxBatchSize = maxSize
	}
	return &sharedBolt{db: db, mode: mode}, nil
}

func (s *sharedBolt) Close() error { return s.db.Close() }

// lastTxID is the ID of the last committed write transaction: the count of
// commits since the file was created.
func (s *sharedBolt) lastTxID() uint64 {
	var id int
	s.db.View(func(tx *bbolt.Tx) error { id = tx.ID(); return nil })
	return uint64(id)
}

func (s *sharedBolt) update(fn func(*bbolt.Tx) error) error {
	switch s.mode {
	case sharedBatch:
		return s.db.Batch(fn) // fn may run twice: every fn here is idempotent
	case sharedGroupCommit:
		return s.groupCommit(fn)
	default:
		return s.db.Update(fn)
	}
}

// groupCommit queues fn; the first writer to find no commit running commits
// everything queued in one transaction, again while more is queued, and
// hands each writer its result. No timer: a lone writer commits at once, and
// concurrent writers share the commit after the one in flight. When a batch
// fails, its writes are retried one transaction each, so that one group's
// error is not another's.
func (s *sharedBolt) groupCommit(fn func(*bbolt.Tx) error) error {
	w := sharedWrite{fn: fn, done: make(chan error, 1)}
	s.mu.Lock()
	s.queue = append(s.queue, w)
	if s.committing {
		s.mu.Unlock()
		return <-w.done
	}
	s.committing = true
	for len(s.queue) > 0 {
		batch := s.queue
		s.queue = nil
		s.mu.Unlock()
		err := s.db.Update(func(tx *bbolt.Tx) error {
			for _, w := range batch {
				if err := w.fn(tx); err != nil {
					return err
				}
			}
			return nil
		})
		for _, w := range batch {
			if err != nil && len(batch) > 1 {
				w.done <- s.db.Update(w.fn)
			} else {
				w.done <- err
			}
		}
		s.mu.Lock()
	}
	s.committing = false
	s.mu.Unlock()
	return <-w.done
}

// group returns the stores of group id, creating its buckets.
func (s *sharedBolt) group(id uint32) (*sharedGroup, error) {
	g := &sharedGroup{s: s, name: fmt.Appendf(nil, "g%d", id)}
	err := s.db.Update(func(tx *bbolt.Tx) error {
		b, err := tx.CreateBucketIfNotExists(g.name)
		if err != nil {
			return err
		}
		if _, err := b.CreateBucketIfNotExists(sharedLogsBucket); err != nil {
			return err
		}
		_, err = b.CreateBucketIfNotExists(sharedConfBucket)
		return err
	})
	return g, err
}

// sharedGroup is one group's raft.LogStore and raft.StableStore in a
// sharedBolt.
type sharedGroup struct {
	s    *sharedBolt
	name []byte
}

var (
	_ raft.LogStore    = (*sharedGroup)(nil)
	_ raft.StableStore = (*sharedGroup)(nil)
)

func (g *sharedGroup) bucket(tx *bbolt.Tx, name []byte) *bbolt.Bucket {
	return tx.Bucket(g.name).Bucket(name)
}

func (g *sharedGroup) edgeIndex(last bool) (uint64, error) {
	var idx uint64
	err := g.s.db.View(func(tx *bbolt.Tx) error {
		c := g.bucket(tx, sharedLogsBucket).Cursor()
		k, _ := c.First()
		if last {
			k, _ = c.Last()
		}
		if k != nil {
			idx = binary.BigEndian.Uint64(k)
		}
		return nil
	})
	return idx, err
}

func (g *sharedGroup) FirstIndex() (uint64, error) { return g.edgeIndex(false) }
func (g *sharedGroup) LastIndex() (uint64, error)  { return g.edgeIndex(true) }

func (g *sharedGroup) GetLog(index uint64, log *raft.Log) error {
	return g.s.db.View(func(tx *bbolt.Tx) error {
		v := g.bucket(tx, sharedLogsBucket).Get(binary.BigEndian.AppendUint64(nil, index))
		if v == nil {
			return raft.ErrLogNotFound
		}
		return decodeSharedLog(v, log)
	})
}

func (g *sharedGroup) StoreLog(log *raft.Log) error { return g.StoreLogs([]*raft.Log{log}) }

func (g *sharedGroup) StoreLogs(logs []*raft.Log) error {
	vals := make([][]byte, len(logs)) // encoded outside the write transaction
	for i, l := range logs {
		vals[i] = encodeSharedLog(l)
	}
	return g.s.update(func(tx *bbolt.Tx) error {
		b := g.bucket(tx, sharedLogsBucket)
		for i, l := range logs {
			if err := b.Put(binary.BigEndian.AppendUint64(nil, l.Index), vals[i]); err != nil {
				return err
			}
		}
		return nil
	})
}

func (g *sharedGroup) DeleteRange(lo, hi uint64) error {
	return g.s.update(func(tx *bbolt.Tx) error {
		c := g.bucket(tx, sharedLogsBucket).Cursor()
		for k, _ := c.Seek(binary.BigEndian.AppendUint64(nil, lo)); k != nil && binary.BigEndian.Uint64(k) <= hi; k, _ = c.Next() {
			if err := c.Delete(); err != nil {
				return err
			}
		}
		return nil
	})
}

func (g *sharedGroup) Set(k, v []byte) error {
	return g.s.update(func(tx *bbolt.Tx) error { return g.bucket(tx, sharedConfBucket).Put(k, v) })
}

func (g *sharedGroup) Get(k []byte) ([]byte, error) {
	var v []byte
	err := g.s.db.View(func(tx *bbolt.Tx) error {
		if b := g.bucket(tx, sharedConfBucket).Get(k); b != nil {
			v = append([]byte(nil), b...)
		}
		return nil
	})
	if err == nil && v == nil {
		err = errSharedNoKey
	}
	return v, err
}

func (g *sharedGroup) SetUint64(k []byte, v uint64) error {
	return g.Set(k, binary.BigEndian.AppendUint64(nil, v))
}

func (g *sharedGroup) GetUint64(k []byte) (uint64, error) {
	v, err := g.Get(k)
	if err != nil {
		return 0, err
	}
	return binary.BigEndian.Uint64(v), nil
}

// encodeSharedLog encodes a raft.Log: term, type and append time as fixed
// fields, data and extensions length-prefixed. (raft-boltdb uses msgpack;
// a few microseconds either way, against milliseconds of fsync.)
func encodeSharedLog(l *raft.Log) []byte {
	b := make([]byte, 0, 8+1+8+2*binary.MaxVarintLen64+len(l.Data)+len(l.Extensions))
	b = binary.BigEndian.AppendUint64(b, l.Term)
	b = append(b, byte(l.Type))
	b = binary.BigEndian.AppendUint64(b, uint64(l.AppendedAt.UnixNano()))
	b = binary.AppendUvarint(b, uint64(len(l.Data)))
	b = append(b, l.Data...)
	b = binary.AppendUvarint(b, uint64(len(l.Extensions)))
	return append(b, l.Extensions...)
}

func decodeSharedLog(b []byte, l *raft.Log) error {
	bad := errors.New("sharedBolt: corrupt log entry")
	if len(b) < 17 {
		return bad
	}
	l.Term, l.Type = binary.BigEndian.Uint64(b), raft.LogType(b[8])
	l.AppendedAt = time.Unix(0, int64(binary.BigEndian.Uint64(b[9:]))).UTC()
	b = b[17:]
	ok := true
	field := func() []byte {
		n, k := binary.Uvarint(b)
		if k <= 0 || uint64(len(b)-k) < n {
			ok = false
			return nil
		}
		f := append([]byte(nil), b[k:k+int(n)]...)
		b = b[k+int(n):]
		return f
	}
	l.Data = field()
	l.Extensions = field()
	if !ok || len(b) != 0 {
		return bad
	}
	return nil
}

func TestSharedBoltLogStore(t *testing.T) {
	s, err := openSharedBolt(filepath.Join(t.TempDir(), "raft.db"), sharedGroupCommit, 0, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	g1, _ := s.group(1)
	g2, err := s.group(2)
	if err != nil {
		t.Fatal(err)
	}
	var logs []*raft.Log
	for i := uint64(1); i <= 5; i++ {
		logs = append(logs, &raft.Log{Index: i, Term: 2, Type: raft.LogCommand, Data: []byte{byte(i)}, AppendedAt: time.Unix(0, int64(i)).UTC()})
	}
	if err := g1.StoreLogs(logs); err != nil {
		t.Fatal(err)
	}
	if err := g1.DeleteRange(1, 2); err != nil {
		t.Fatal(err)
	}
	first, _ := g1.FirstIndex()
	last, _ := g1.LastIndex()
	if first != 3 || last != 5 {
		t.Fatalf("group 1 holds [%d, %d], want [3, 5]", first, last)
	}
	var got raft.Log
	if err := g1.GetLog(4, &got); err != nil || got.Term != 2 || got.Data[0] != 4 || !got.AppendedAt.Equal(time.Unix(0, 4)) {
		t.Fatalf("GetLog(4) = %+v, %v", got, err)
	}
	if err := g1.GetLog(2, &got); !errors.Is(err, raft.ErrLogNotFound) {
		t.Fatalf("GetLog of a deleted index: %v", err)
	}
	if last, _ := g2.LastIndex(); last != 0 {
		t.Fatalf("group 2 sees group 1's log: last index %d", last)
	}
	if err := g2.SetUint64([]byte("CurrentTerm"), 7); err != nil {
		t.Fatal(err)
	}
	if v, err := g2.GetUint64([]byte("CurrentTerm")); err != nil || v != 7 {
		t.Fatalf("GetUint64 = %d, %v", v, err)
	}
	if _, err := g1.GetUint64([]byte("CurrentTerm")); err == nil {
		t.Fatal("group 1 sees group 2's stable store")
	}

	// Concurrent groups' writes share commits and each lands in its group.
	var wg sync.WaitGroup
	for id := uint32(10); id < 18; id++ {
		g, err := s.group(id)
		if err != nil {
			t.Fatal(err)
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := uint64(1); i <= 20; i++ {
				if err := g.StoreLog(&raft.Log{Index: i, Data: []byte{byte(id)}}); err != nil {
					t.Error(err)
					return
				}
			}
		}()
	}
	wg.Wait()
	for id := uint32(10); id < 18; id++ {
		g, _ := s.group(id)
		var l raft.Log
		if last, _ := g.LastIndex(); last != 20 || g.GetLog(20, &l) != nil || l.Data[0] != byte(id) {
			t.Fatalf("group %d: last index %d, entry 20 %+v", id, last, l)
		}
	}
}

// logStoreOption opens the log stores of groups groups under dir, and
// returns how many write transactions (commits, 2 fdatasyncs each in bbolt)
// have run so far.
type logStoreOption struct {
	name string
	open func(tb testing.TB, dir string, groups int) (stores []raft.LogStore, commits func() uint64)
	// syncs is how many fsyncs a commit costs: 2 in bbolt, 1 in the WAL.
	syncs float64
}

var logStoreOptions = []logStoreOption{
	{"file-per-group", func(tb testing.TB, dir string, groups int) ([]raft.LogStore, func() uint64) {
		var stores []raft.LogStore
		var calls atomic.Uint64
		for g := range groups {
			s, err := raftboltdb.New(raftboltdb.Options{Path: filepath.Join(dir, fmt.Sprintf("g%d.db", g))})
			if err != nil {
				tb.Fatal(err)
			}
			tb.Cleanup(func() { s.Close() })
			stores = append(stores, &countingLogStore{LogStore: s, calls: &calls})
		}
		// raft-boltdb commits one write transaction per StoreLogs.
		return stores, calls.Load
	}, 2},
	{"wal-per-group", func(tb testing.TB, dir string, groups int) ([]raft.LogStore, func() uint64) {
		var stores []raft.LogStore
		var calls atomic.Uint64
		for id := range groups {
			g := &group{id: shard.GroupID(id + 1), dir: filepath.Join(dir, fmt.Sprint(id))}
			w, _, _, err := g.openWAL(dir, 0, hclog.NewNullLogger())
			if err != nil {
				tb.Fatal(err)
			}
			tb.Cleanup(func() { w.Close() })
			stores = append(stores, &countingLogStore{LogStore: w, calls: &calls})
		}
		// The WAL appends and fsyncs once per StoreLogs.
		return stores, calls.Load
	}, 1},
	{"shared-update", sharedOption(sharedUpdate, 0, 0), 2},
	{"shared-batch-10ms", sharedOption(sharedBatch, 0, 0), 2}, // bbolt's defaults: 10ms, 1000 calls
	{"shared-batch-2ms", sharedOption(sharedBatch, 2*time.Millisecond, 0), 2},
	{"shared-groupcommit", sharedOption(sharedGroupCommit, 0, 0), 2},
}

func sharedOption(mode sharedMode, maxDelay time.Duration, maxSize int) func(testing.TB, string, int) ([]raft.LogStore, func() uint64) {
	return func(tb testing.TB, dir string, groups int) ([]raft.LogStore, func() uint64) {
		s, err := openSharedBolt(filepath.Join(dir, "raft.db"), mode, maxDelay, maxSize)
		if err != nil {
			tb.Fatal(err)
		}
		tb.Cleanup(func() { s.Close() })
		var stores []raft.LogStore
		for g := range groups {
			gs, err := s.group(uint32(g))
			if err != nil {
				tb.Fatal(err)
			}
			stores = append(stores, gs)
		}
		base := s.lastTxID()
		return stores, func() uint64 { return s.lastTxID() - base }
	}
}

type countingLogStore struct {
	raft.LogStore
	calls *atomic.Uint64
}

func (s *countingLogStore) StoreLogs(logs []*raft.Log) error {
	s.calls.Add(1)
	return s.LogStore.StoreLogs(logs)
}

// BenchmarkLogStore has G groups each store 1-entry batches (a 128-byte
// command) as fast as they can, fsync on, until b.N entries in all. It
// reports entries/s, commits/s, fdatasyncs/s (bbolt's Tx.Commit syncs the
// data pages, then the meta page: 2 per commit, plus one when the file
// grows; the WAL syncs once per append) and the mean StoreLogs latency.
//
//	go test -run '^$' -bench BenchmarkLogStore -benchtime 3s ./node/
func BenchmarkLogStore(b *testing.B) {
	for _, groups := range []int{1, 8, 64} {
		for _, opt := range logStoreOptions {
			b.Run(fmt.Sprintf("groups=%d/%s", groups, opt.name), func(b *testing.B) {
				stores, commits := opt.open(b, b.TempDir(), groups)
				data := make([]byte, 128)
				var next atomic.Int64 // entries claimed so far
				var busy atomic.Int64 // nanoseconds spent inside StoreLogs, all groups
				var wg sync.WaitGroup
				c0 := commits()
				b.ResetTimer()
				start := time.Now()
				for _, s := range stores {
					wg.Add(1)
					go func() {
						defer wg.Done()
						for idx := uint64(1); next.Add(1) <= int64(b.N); idx++ {
							t0 := time.Now()
							err := s.StoreLogs([]*raft.Log{{Index: idx, Term: 1, Type: raft.LogCommand, Data: data, AppendedAt: t0}})
							busy.Add(int64(time.Since(t0)))
							if err != nil {
								b.Error(err)
								return
							}
						}
					}()
				}
				wg.Wait()
				sec := time.Since(start).Seconds()
				b.StopTimer()
				n := commits() - c0
				b.ReportMetric(float64(b.N)/sec, "entries/s")
				b.ReportMetric(float64(n)/sec, "commits/s")
				b.ReportMetric(opt.syncs*float64(n)/sec, "fsyncs/s")
				b.ReportMetric(float64(b.N)/float64(max(n, 1)), "entries/commit")
				b.ReportMetric(float64(busy.Load())/float64(b.N)/1e3, "µs/StoreLogs")
			})
		}
	}
}
