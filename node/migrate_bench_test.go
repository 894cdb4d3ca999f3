package node_test

import (
	"context"
	"fmt"
	"slices"
	"sync"
	"testing"
	"time"

	"connectrpc.com/connect"

	"github.com/quorate/quorate/node"
	"github.com/quorate/quorate/node/nodetest"
	quoratev1 "github.com/quorate/quorate/proto/quorate/v1"
)

// BenchmarkMoveSlots moves group 1's 2048 slots, holding keys buckets and
// as many request IDs, to group 2 and back (one move per iteration), while
// a client admits on a moving key; it reports records and bytes copied per
// second and the slowest admit on the moving key during a move (how long
// its slot was unavailable, retries included).
func BenchmarkMoveSlots(b *testing.B) {
	for _, keys := range []int{10_000, 50_000} {
		b.Run(fmt.Sprintf("keys-%d", keys), func(b *testing.B) {
			c := nodetest.NewClusterWith(b, nodetest.Options{Configure: func(i int, cfg *node.Config) {
				cfg.DataGroups, cfg.ExpectNodes = 2, 3
			}})
			ctx := context.Background()
			applyPolicy(b, c, "p", 1_000_000_000, time.Hour, 1_000_000_000)
			var moving []string
			for k := 0; len(moving) < keys; k++ {
				if key := fmt.Sprintf("key-%d", k); node.SlotOf(key) < 2048 {
					moving = append(moving, key)
				}
			}
			for first := 0; first < keys; first += 500 {
				req := &quoratev1.AdmitBatchRequest{}
				for _, k := range moving[first:min(first+500, keys)] {
					req.Requests = append(req.Requests, &quoratev1.AdmitRequest{Policy: "p", Key: k, Caller: "bench", RequestId: "fill-" + k})
				}
				for {
					if _, err := c.Admission(first%3).AdmitBatch(ctx, connect.NewRequest(req)); err == nil {
						break
					} else if connect.CodeOf(err) != connect.CodeUnavailable {
						b.Fatal(err)
					}
				}
			}
			var (
				mu    sync.Mutex
				worst time.Duration
				lats  []time.Duration
			)
			stop := make(chan struct{})
			var wg sync.WaitGroup
			wg.Go(func() {
				for i := 0; ; i++ {
					select {
					case <-stop:
						return
					default:
					}
					start := time.Now()
					_, err := admit(ctx, c, i%3, "p", moving[0], 0)
					d := time.Since(start)
					mu.Lock()
					if err == nil {
						lats = append(lats, d)
					}
					worst = max(worst, d)
					mu.Unlock()
				}
			})
			var records, size, attempts uint64
			var took time.Duration
			b.ResetTimer()
			for i := range b.N {
				from, to := uint32(1+i%2), uint32(2-i%2)
				start := time.Now()
				resp, err := c.Admin(0).MoveSlots(ctx, connect.NewRequest(&quoratev1.MoveSlotsRequest{From: from, To: to, Start: 0, End: 2048}))
				if err != nil {
					b.Fatal(err)
				}
				var done *quoratev1.PlanStatus
				for done == nil {
					st, err := planNow(ctx, c, 0, resp.Msg.GetPlan().GetId())
					if err == nil && st.GetState() != "running" {
						done = st
					}
				}
				if done.GetState() != "done" {
					b.Fatalf("plan %s: %s", done.GetState(), done.GetError())
				}
				took += time.Since(start)
				records += done.GetSteps()[0].GetRecords()
				attempts += done.GetSteps()[0].GetAttempt()
				size += done.GetSteps()[0].GetBytes()
			}
			b.StopTimer()
			close(stop)
			wg.Wait()
			slices.Sort(lats)
			b.ReportMetric(float64(records)/took.Seconds(), "records/s")
			b.ReportMetric(float64(size)/took.Seconds()/1e6, "MB/s")
			b.ReportMetric(float64(took.Milliseconds())/float64(b.N), "ms/move")
			b.ReportMetric(float64(attempts)/float64(b.N), "attempts/move")
			b.ReportMetric(float64(worst.Milliseconds()), "worst-admit-ms")
			if len(lats) > 0 {
				b.ReportMetric(float64(lats[len(lats)/2].Microseconds())/1000, "p50-admit-ms")
			}
		})
	}
}
