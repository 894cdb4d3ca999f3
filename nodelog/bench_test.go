package nodelog

import (
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/hashicorp/raft"
)

// BenchmarkStoreLogs: G groups each store 1-entry batches concurrently,
// synced, into one nodelog Log, with 1, 2 or 4 commits syncing at once.
// b.N is the number of StoreLogs calls in all; the figures are in doc.go.
func BenchmarkStoreLogs(b *testing.B) {
	for _, g := range []int{1, 8, 64} {
		for _, inflight := range []int{1, 2, 4} {
			b.Run(fmt.Sprintf("nodelog-inflight%d/G=%d", inflight, g), func(b *testing.B) {
				benchNodelog(b, g, inflight)
			})
		}
	}
}

func benchNodelog(b *testing.B, g, inflight int) {
	l, err := Open(b.TempDir(), Options{SyncsInFlight: inflight})
	if err != nil {
		b.Fatal(err)
	}
	defer l.Close()
	stores := make([]raft.LogStore, g)
	for i := range stores {
		if stores[i], err = l.Group(uint32(i + 1)); err != nil {
			b.Fatal(err)
		}
	}
	before := l.Stats()
	benchStores(b, stores)
	after := l.Stats()
	b.ReportMetric(float64(after.Syncs-before.Syncs)/float64(b.N), "fsyncs/op")
}

// benchStores has a goroutine per store append 1-entry batches of about
// 200 bytes until b.N are stored in all, and reports entries/s.
func benchStores(b *testing.B, stores []raft.LogStore) {
	data := make([]byte, 200)
	var n atomic.Int64
	var wg sync.WaitGroup
	b.ResetTimer()
	start := time.Now()
	for _, s := range stores {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := uint64(1); n.Add(1) <= int64(b.N); i++ {
				e := &raft.Log{Index: i, Term: 1, Type: raft.LogCommand, Data: data, AppendedAt: time.Now()}
				if err := s.StoreLogs([]*raft.Log{e}); err != nil {
					b.Error(err)
					return
				}
			}
		}()
	}
	wg.Wait()
	b.StopTimer()
	b.ReportMetric(float64(b.N)/time.Since(start).Seconds(), "entries/s")
}
