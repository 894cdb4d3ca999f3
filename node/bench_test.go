package node_test

import (
	"context"
	"fmt"
	"runtime"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"connectrpc.com/connect"

	"github.com/quorate/quorate/node"
	"github.com/quorate/quorate/node/nodetest"
	quoratev1 "github.com/quorate/quorate/proto/quorate/v1"
	"github.com/quorate/quorate/proto/quorate/v1/quoratev1connect"
)

// BenchmarkAdmit3Nodes measures Admit on a real 3-node cluster (in-process,
// real TCP, fsync'd bbolt logs) with 64 concurrent clients spread over all
// nodes (two thirds of the calls are forwarded to the leader), over 10k keys.
// It reports p50/p99 latency next to ns/op (ns/op × 64 is not latency:
// calls overlap).
//
// Sub-benchmarks: without request IDs, and with a unique request ID per call
// (recorded in the dedupe table), to show what exactly-once costs.
func BenchmarkAdmit3Nodes(b *testing.B) {
	c := nodetest.NewCluster(b, 3)
	applyPolicy(b, c, "bench", 1_000_000_000, time.Second, 1_000_000_000)
	b.Run("no-request-id", func(b *testing.B) { benchAdmit(b, c, false) })
	b.Run("request-id", func(b *testing.B) { benchAdmit(b, c, true) })
}

// BenchmarkAdmit3Nodes3Groups is BenchmarkAdmit3Nodes with the keys hashed
// to 3 data groups, the default topology (leaders spread over the nodes by
// the balancer).
func BenchmarkAdmit3Nodes3Groups(b *testing.B) {
	c := nodetest.NewClusterWith(b, nodetest.Options{Nodes: 3, Configure: func(i int, cfg *node.Config) {
		cfg.DataGroups, cfg.ExpectNodes = 3, 3
	}})
	applyPolicy(b, c, "bench", 1_000_000_000, time.Second, 1_000_000_000)
	b.Run("no-request-id", func(b *testing.B) { benchAdmit(b, c, false) })
}

// BenchmarkAdmitBatch3Nodes measures AdmitBatch (100 requests per call, keys
// drawn over 100k) with 16 concurrent clients spread over the nodes, on one
// group and on 3 (the default topology); one op is one decision.
func BenchmarkAdmitBatch3Nodes(b *testing.B) {
	for _, groups := range []int{0, 3} {
		b.Run(fmt.Sprintf("groups-%d", groups), func(b *testing.B) {
			c := nodetest.NewClusterWith(b, nodetest.Options{Nodes: 3, Configure: func(i int, cfg *node.Config) {
				if groups > 0 {
					cfg.DataGroups, cfg.ExpectNodes = groups, 3
				}
			}})
			applyPolicy(b, c, "bench", 1_000_000_000, time.Second, 1_000_000_000)
			benchAdmitBatch(b, c, 100, 16)
		})
	}
}

func benchAdmitBatch(b *testing.B, c *nodetest.Cluster, size, clients int) {
	ctx := context.Background()
	run := benchRun.Add(1)
	var next atomic.Int64
	var calls atomic.Int64
	entriesBefore := appliedEntries(c)
	b.ReportAllocs() // the whole process: three nodes and the clients
	b.ResetTimer()
	var wg sync.WaitGroup
	for w := range clients {
		client := c.Admission(w % c.Len()) // made once: allocs/op counts calls, not clients
		wg.Go(func() {
			for {
				first := next.Add(int64(size)) - int64(size)
				if first >= int64(b.N) {
					return
				}
				n := min(int64(size), int64(b.N)-first)
				req := &quoratev1.AdmitBatchRequest{}
				for i := range n {
					req.Requests = append(req.Requests, &quoratev1.AdmitRequest{Policy: "bench",
						Key: fmt.Sprintf("key-%d", (first+i)*7919%100_000), Caller: "bench", RequestId: fmt.Sprintf("b%d-%d", run, first+i)})
				}
				for {
					resp, err := client.AdmitBatch(ctx, connect.NewRequest(req))
					if err == nil && resp.Msg.GetResults()[0].GetError() == nil {
						break
					}
					if err != nil && connect.CodeOf(err) != connect.CodeUnavailable {
						b.Error(err)
						return
					}
				}
				calls.Add(1)
			}
		})
	}
	wg.Wait()
	b.StopTimer()
	if e := appliedEntries(c) - entriesBefore; e > 0 {
		b.ReportMetric(float64(b.N)/float64(e), "ops/entry")
	}
}

var benchRun atomic.Int64

func benchAdmit(b *testing.B, c *nodetest.Cluster, withID bool) {
	ctx := context.Background()
	run := benchRun.Add(1)
	var (
		mu   sync.Mutex
		lats []time.Duration
		next int
	)
	b.SetParallelism(64 / max(1, testingProcs()))
	entriesBefore := appliedEntries(c)
	b.ReportAllocs() // the whole process: three nodes and the clients
	b.ResetTimer()
	b.RunParallel(func(pb *testing.PB) {
		mu.Lock()
		w := next
		next++
		mu.Unlock()
		local := make([]time.Duration, 0, 1024)
		// A client per node, made once, so that allocs/op counts the
		// cluster's work and the calls', not clients being made.
		clients := []quoratev1connect.AdmissionServiceClient{c.Admission(0), c.Admission(1), c.Admission(2)}
		for i := 0; pb.Next(); i++ {
			key := fmt.Sprintf("key-%d", (w*7919+i)%10000)
			var id string
			if withID {
				id = fmt.Sprintf("r%d-%d-%d", run, w, i)
			}
			start := time.Now()
			req := connect.NewRequest(&quoratev1.AdmitRequest{Policy: "bench", Key: key, Caller: "bench", RequestId: id})
			if _, err := clients[(w+i)%3].Admit(ctx, req); err != nil {
				b.Error(err)
				return
			}
			local = append(local, time.Since(start))
		}
		mu.Lock()
		lats = append(lats, local...)
		mu.Unlock()
	})
	b.StopTimer()
	if len(lats) == 0 {
		return
	}
	if e := appliedEntries(c) - entriesBefore; e > 0 {
		b.ReportMetric(float64(len(lats))/float64(e), "ops/entry")
	}
	slices.Sort(lats)
	q := func(p float64) float64 { return float64(lats[int(p*float64(len(lats)-1))].Microseconds()) / 1000 }
	b.ReportMetric(q(0.50), "p50-ms")
	b.ReportMetric(q(0.99), "p99-ms")
}

// appliedEntries is the number of log entries node 0 applied in all its
// groups (a few of them are not decisions: policy copies, expiry).
func appliedEntries(c *nodetest.Cluster) uint64 {
	st := c.Node(0).Status()
	total := st.GetLastAppliedIndex()
	for _, g := range st.GetGroups() {
		total += g.GetLastAppliedIndex()
	}
	return total
}

func testingProcs() int { return runtime.GOMAXPROCS(0) }
