package client

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/HdrHistogram/hdrhistogram-go"
)

// BenchmarkLocalAdmit measures decisions from a grant: all goroutines on
// one key (the worst case: one contended counter), the grant large and
// renewed in the background by the test server, through Admit (which
// allocates the Decision it returns) and AdmitInto (a Decision reused,
// nothing allocated). It reports decisions/s, the share decided locally
// and the p50 and p99 of a sample of per-call latencies (one call in 16 of
// each goroutine is timed, into its own HDR histogram; the two clock reads
// are in the figure).
func BenchmarkLocalAdmit(b *testing.B) {
	b.Run("Admit", func(b *testing.B) {
		benchLocal(b, func(c *Client, ctx context.Context, r *Request, _ *Decision) (*Decision, error) {
			return c.Admit(ctx, *r)
		})
	})
	b.Run("AdmitInto", func(b *testing.B) {
		benchLocal(b, func(c *Client, ctx context.Context, r *Request, d *Decision) (*Decision, error) {
			return d, c.AdmitInto(ctx, r, d)
		})
	})
}

func benchLocal(b *testing.B, admit func(*Client, context.Context, *Request, *Decision) (*Decision, error)) {
	const maxGrant = 50_000_000
	s := newGrantServer("p", 1<<62, maxGrant, 10*time.Second)
	c := grantClient(b, s, nil)
	ctx := context.Background()
	r := Request{Policy: "p", Key: "tenant:acme"}
	// Warm up until the grant is large: the demand estimate follows the
	// traffic.
	deadline := time.Now().Add(10 * time.Second)
	for time.Now().Before(deadline) {
		d, err := c.Admit(ctx, r)
		if err != nil {
			b.Fatal(err)
		}
		if d.Outcome == LocalGrant && d.Remaining > 1_000_000 {
			break
		}
	}
	var (
		mu     sync.Mutex
		merged = hdrhistogram.New(1, int64(time.Second), 3)
		remote int64
	)
	before := c.Stats()
	b.ReportAllocs()
	b.ResetTimer()
	start := time.Now()
	b.RunParallel(func(pb *testing.PB) {
		h := hdrhistogram.New(1, int64(time.Second), 3)
		var n, strict int64
		r := r
		var buf Decision
		for pb.Next() {
			var d *Decision
			var err error
			if n&15 == 0 {
				t0 := time.Now()
				d, err = admit(c, ctx, &r, &buf)
				_ = h.RecordValue(int64(time.Since(t0)))
			} else {
				d, err = admit(c, ctx, &r, &buf)
			}
			if err != nil || !d.Allowed {
				b.Errorf("%+v, %v", d, err)
				return
			}
			if d.Outcome != LocalGrant {
				strict++
			}
			n++
		}
		mu.Lock()
		merged.Merge(h)
		remote += strict
		mu.Unlock()
	})
	elapsed := time.Since(start)
	b.StopTimer()
	after := c.Stats()
	b.ReportMetric(float64(b.N)/elapsed.Seconds(), "decisions/s")
	b.ReportMetric(float64(merged.ValueAtQuantile(99)), "p99-ns")
	b.ReportMetric(float64(merged.ValueAtQuantile(50)), "p50-ns")
	b.ReportMetric(float64(after.GrantsRenewed-before.GrantsRenewed), "renewals")
	b.ReportMetric(1-float64(remote)/float64(b.N), "local-share")
	b.ReportMetric(float64(clockOverhead()), "clock-p99-ns")
}

// clockOverhead is the p99 of an empty timed region: what the two clock
// reads add to each sampled latency.
func clockOverhead() int64 {
	h := hdrhistogram.New(1, int64(time.Second), 3)
	for range 100_000 {
		t0 := time.Now()
		_ = h.RecordValue(int64(time.Since(t0)))
	}
	return h.ValueAtQuantile(99)
}
