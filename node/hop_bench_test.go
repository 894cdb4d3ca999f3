package node_test

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/quorate/quorate/node/nodetest"
)

// BenchmarkAdmitHop measures what the forwarding hop costs: the same Admits
// sent to the key's group leader and to a follower, which forwards each to
// the leader over the peer port (AdmitBatch calls shared by its queue). A
// real 3-node cluster, one group. Besides ns/op it reports cpu-us/op, the
// CPU the whole process (all three nodes and the clients) spent per Admit,
// which a loaded machine disturbs less than wall time; compare the two
// targets within one run.
func BenchmarkAdmitHop(b *testing.B) {
	c := nodetest.NewCluster(b, 3)
	applyPolicy(b, c, "bench", 1_000_000_000, time.Second, 1_000_000_000)
	leader := c.Leader(b)
	for _, workers := range []int{1, 16} {
		for _, tc := range []struct {
			name   string
			target int
		}{{"leader", leader}, {"follower", (leader + 1) % c.Len()}} {
			b.Run(fmt.Sprintf("%s/workers-%d", tc.name, workers), func(b *testing.B) {
				benchHop(b, c, tc.target, workers)
			})
		}
	}
}

func benchHop(b *testing.B, c *nodetest.Cluster, target, workers int) {
	ctx := context.Background()
	run := benchRun.Add(1)
	var next atomic.Int64
	cpu0, entries0 := cpuTime(), appliedEntries(c)
	b.ResetTimer()
	var wg sync.WaitGroup
	for w := range workers {
		wg.Go(func() {
			for {
				i := next.Add(1) - 1
				if i >= int64(b.N) {
					return
				}
				key := fmt.Sprintf("key-%d", (int64(w)*7919+i)%10000)
				if _, err := admitID(ctx, c, target, "bench", key, "bench", fmt.Sprintf("h%d-%d", run, i)); err != nil {
					b.Error(err)
					return
				}
			}
		})
	}
	wg.Wait()
	b.StopTimer()
	b.ReportMetric(float64((cpuTime()-cpu0).Microseconds())/float64(b.N), "cpu-us/op")
	if e := appliedEntries(c) - entries0; e > 0 {
		b.ReportMetric(float64(b.N)/float64(e), "ops/entry")
	}
}

// cpuTime is the CPU time (user and system) the process has used.
func cpuTime() time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}
