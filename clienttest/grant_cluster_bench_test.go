package clienttest

import (
	"context"
	"fmt"
	"math"
	"math/rand/v2"
	"runtime"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/HdrHistogram/hdrhistogram-go"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/durationpb"

	"github.com/quorate/quorate/client"
	"github.com/quorate/quorate/node/nodetest"
	quoratev1 "github.com/quorate/quorate/proto/quorate/v1"
)

// BenchmarkLocalAdmitOnCluster measures local decisions from grants that
// a real 3-node cluster in the same process grants and renews, on a token
// bucket large enough never to deny, with GOMAXPROCS goroutines: one-key
// puts every goroutine on one key (the worst case: one grant's units,
// spent from its stripes); 64-keys spreads each goroutine's calls over 64
// hot keys. AdmitInto reuses the caller's Decision; Admit returns a new
// one. decisions/s counts every decision, local or strict; p50-ns and
// p99-ns are of a sample (one call in 16 per goroutine, the two clock
// reads included: clock-p99-ns is what they add).
func BenchmarkLocalAdmitOnCluster(b *testing.B) {
	c := nodetest.NewCluster(b, 3)
	const burst = 1_000_000_000
	applyPolicies(b, c, &quoratev1.Policy{Name: "hot", Algorithm: "token_bucket", Limit: burst, Period: durationpb.New(time.Second),
		Local: &quoratev1.LocalDecisions{Mode: "grant", MaxGrant: proto.Int64(50_000_000), Ttl: durationpb.New(10 * time.Second)}})
	cl := newClient(b, c, client.Config{})
	into := func(ctx context.Context, r *client.Request, d *client.Decision) error { return cl.AdmitInto(ctx, r, d) }
	admit := func(ctx context.Context, r *client.Request, d *client.Decision) error {
		res, err := cl.Admit(ctx, *r)
		if err == nil {
			*d = *res
		}
		return err
	}
	for _, run := range []struct {
		name  string
		keys  int
		admit func(context.Context, *client.Request, *client.Decision) error
	}{{"one-key/AdmitInto", 1, into}, {"64-keys/AdmitInto", 64, into}, {"one-key/Admit", 1, admit}} {
		b.Run(run.name, func(b *testing.B) {
			// Keys of their own per GOMAXPROCS (-cpu): a grant's stripes
			// are as many as the processors when it was made.
			keys := make([]client.Request, run.keys)
			for i := range keys {
				keys[i] = client.Request{Policy: "hot", Key: fmt.Sprintf("{k%d-p%d}", i, runtime.GOMAXPROCS(0))}
			}
			benchGrantsOnCluster(b, cl, keys, run.admit)
		})
	}
}

func benchGrantsOnCluster(b *testing.B, cl *client.Client, keys []client.Request, admit func(context.Context, *client.Request, *client.Decision) error) {
	ctx := context.Background()
	var d client.Decision
	for _, r := range keys { // warm up until each key's grant is large
		for deadline := time.Now().Add(20 * time.Second); time.Now().Before(deadline); {
			if err := cl.AdmitInto(ctx, &r, &d); err != nil {
				b.Fatal(err)
			}
			if d.Outcome == client.LocalGrant && d.Remaining > 1_000_000/int64(len(keys)) {
				break
			}
		}
	}
	var mu sync.Mutex
	merged := hdrhistogram.New(1, int64(time.Second), 3)
	var strict atomic.Int64
	before := cl.Stats()
	b.ReportAllocs()
	b.ResetTimer()
	start := time.Now()
	// GOMAXPROCS goroutines share b.N, each with its own counter
	// (testing.PB's per-goroutine state is written on every call and may
	// share a cache line with another goroutine's).
	procs := runtime.GOMAXPROCS(0)
	var wg sync.WaitGroup
	for p := range procs {
		quota := b.N / procs
		if p < b.N%procs {
			quota++
		}
		wg.Go(func() { runGrantCalls(b, admit, keys, quota, uint64(p+1), merged, &mu, &strict) })
	}
	wg.Wait()
	elapsed := time.Since(start)
	b.StopTimer()
	after := cl.Stats()
	b.ReportMetric(float64(b.N)/elapsed.Seconds(), "decisions/s")
	b.ReportMetric(float64(merged.ValueAtQuantile(99)), "p99-ns")
	b.ReportMetric(float64(merged.ValueAtQuantile(50)), "p50-ns")
	b.ReportMetric(float64(after.GrantsRenewed-before.GrantsRenewed), "renewals")
	b.ReportMetric(1-float64(strict.Load())/float64(b.N), "local-share")
	b.ReportMetric(float64(clockP99()), "clock-p99-ns")
}

// runGrantCalls makes n calls of admit on keys, in an order of its own
// (seed), timing one in 16 into merged, and adds the strict decisions to
// strict.
func runGrantCalls(b *testing.B, admit func(context.Context, *client.Request, *client.Decision) error, keys []client.Request, n int, seed uint64, merged *hdrhistogram.Histogram, mu *sync.Mutex, strict *atomic.Int64) {
	ctx := context.Background()
	{
		h := hdrhistogram.New(1, int64(time.Second), 3)
		// Each goroutine visits the keys in an order of its own, as
		// independent requests would.
		reqs := slices.Clone(keys)
		rng := rand.New(rand.NewPCG(seed, 7))
		rng.Shuffle(len(reqs), func(i, j int) { reqs[i], reqs[j] = reqs[j], reqs[i] })
		k := 0
		// Each goroutine's Decision on cache lines of its own: two
		// written side by side would slow both down (false sharing).
		var buf struct {
			_ [128]byte
			d client.Decision
			_ [128]byte
		}
		d := &buf.d
		var remote int64
		for i := range n {
			r := &reqs[k%len(reqs)]
			k++
			var err error
			if i&15 == 0 {
				t0 := time.Now()
				err = admit(ctx, r, d)
				_ = h.RecordValue(int64(time.Since(t0)))
			} else {
				err = admit(ctx, r, d)
			}
			if err != nil || !d.Allowed {
				b.Errorf("%+v, %v", d, err)
				return
			}
			if d.Outcome != client.LocalGrant {
				remote++
			}
		}
		strict.Add(remote)
		mu.Lock()
		merged.Merge(h)
		mu.Unlock()
	}
}

// clockP99 is the p99 of an empty timed region: what the two clock reads
// add to each sampled latency.
func clockP99() int64 {
	h := hdrhistogram.New(1, int64(time.Second), 3)
	for range 100_000 {
		t0 := time.Now()
		_ = h.RecordValue(int64(time.Since(t0)))
	}
	return h.ValueAtQuantile(99)
}

// clusterShares are the traffic shares of the 10 simulated gateways.
var clusterShares = []float64{0.70, 0.20, 0.05, 0.01, 0.01, 0.01, 0.005, 0.005, 0.005, 0.005}

// BenchmarkUnevenTrafficOnCluster: one key of a fixed window (2,000 units
// a second) on a real 3-node cluster; 10 gateways, each its own Client,
// offer about twice the limit between them in the shares above.
// fraction-of-limit is what was admitted per window over the limit (mean,
// min, max over the windows after the first); even-split-fraction is what
// static local buckets of limit/10 per gateway would admit of the same
// offered traffic (each gateway admits at most its tenth).
func BenchmarkUnevenTrafficOnCluster(b *testing.B) {
	const limit, window = 2000, time.Second
	c := nodetest.NewCluster(b, 3)
	applyPolicies(b, c, &quoratev1.Policy{Name: "uneven", Algorithm: "fixed_window", Limit: limit, Period: durationpb.New(window),
		Local: &quoratev1.LocalDecisions{Mode: "grant", MaxGrant: proto.Int64(limit / 2), Ttl: durationpb.New(window)}})
	clients := make([]*client.Client, len(clusterShares))
	for i := range clients {
		clients[i] = newClient(b, c, client.Config{})
	}
	windows := max(b.N, 3) + 1
	start := time.Now().Truncate(window).Add(window)
	end := start.Add(time.Duration(windows) * window)
	counts := make([]atomic.Int64, windows)
	offered := make([]atomic.Int64, len(clients))
	b.ResetTimer()
	time.Sleep(time.Until(start)) // load generation begins at a window's start
	var wg sync.WaitGroup
	const workers = 4 // per gateway, so that its strict calls keep up
	for i, cl := range clients {
		for range workers {
			wg.Go(func() {
				offer(b, cl, clusterShares[i]*2*limit/window.Seconds()/workers, start, end, window, counts, &offered[i])
			})
		}
	}
	wg.Wait()
	b.StopTimer()
	var sum int64
	lo, hi := math.Inf(1), 0.0
	for i := 1; i < windows; i++ {
		n := counts[i].Load()
		sum += n
		lo, hi = min(lo, float64(n)/limit), max(hi, float64(n)/limit)
	}
	var even, total, local, wasted float64
	for i := range clients {
		per := float64(offered[i].Load()) / float64(windows)
		even += min(per, limit/float64(len(clients)))
		total += per
		s := clients[i].Stats()
		local += float64(s.LocalGrant)
		wasted += float64(s.UnitsWasted)
	}
	b.ReportMetric(float64(sum)/float64(windows-1)/limit, "fraction-of-limit")
	b.ReportMetric(lo, "min-fraction")
	b.ReportMetric(hi, "max-fraction")
	b.ReportMetric(even/limit, "even-split-fraction")
	b.ReportMetric(total/limit, "offered-x-limit")
	b.ReportMetric(local/float64(windows)/limit, "local-fraction")
	b.ReportMetric(wasted/float64(windows)/limit, "wasted-fraction")
}

// offer admits on cl at rate requests a second from start to end, counting
// the allowed ones by window: a strict decision by its decided_at, a local
// one by the time of the call (its units were granted in that window).
func offer(b *testing.B, cl *client.Client, rate float64, start, end time.Time, window time.Duration, counts []atomic.Int64, offered *atomic.Int64) {
	ctx := context.Background()
	r := client.Request{Policy: "uneven", Key: "{k}"}
	var d client.Decision
	var issued int64
	for now := time.Now(); now.Before(end); now = time.Now() {
		due := int64(rate * now.Sub(start).Seconds())
		issued = max(issued, due-int64(rate*0.005)) // a gateway more than 5 ms behind drops its backlog
		for ; issued < due; issued++ {
			t0 := time.Now()
			if err := cl.AdmitInto(ctx, &r, &d); err != nil {
				b.Error(err)
				return
			}
			offered.Add(1)
			at := t0
			if d.Outcome == client.Verified {
				at = d.DecidedAt
			}
			if w := int(at.Sub(start) / window); d.Allowed && w >= 0 && w < len(counts) {
				counts[w].Add(1)
			}
		}
		time.Sleep(time.Millisecond) // pacing the offered load
	}
}

// BenchmarkSyncAdmitOnCluster is BenchmarkLocalAdmitOnCluster in sync mode
// (local-plus-global): a fixed window of 5,000,000 units a second with
// sync_interval 100ms (bound 500,000). Every goroutine admits on one key;
// decisions/s counts every decision, local-share the local ones, and
// max-overshoot is the most a window (by DecidedAt) admitted beyond the
// limit (negative when no window reached it), next to bound.
func BenchmarkSyncAdmitOnCluster(b *testing.B) {
	c := nodetest.NewCluster(b, 3)
	const limit, bound, period = 5_000_000, 500_000, time.Second
	applyPolicies(b, c, &quoratev1.Policy{Name: "hot", Algorithm: "fixed_window", Limit: limit, Period: durationpb.New(period),
		Local: &quoratev1.LocalDecisions{Mode: "sync", SyncInterval: durationpb.New(100 * time.Millisecond)}})
	cl := newClient(b, c, client.Config{})
	ctx := context.Background()
	var mu sync.Mutex
	perWindow := map[int64]int64{}
	var strict atomic.Int64
	b.ReportAllocs()
	b.ResetTimer()
	start := time.Now()
	b.RunParallel(func(pb *testing.PB) {
		r := client.Request{Policy: "hot", Key: "{k}"}
		// The Decision on cache lines of its own (no false sharing with
		// another goroutine's).
		var buf struct {
			_ [128]byte
			d client.Decision
			_ [128]byte
		}
		d := &buf.d
		var remote, win, n int64
		flush := func() {
			mu.Lock()
			perWindow[win] += n
			mu.Unlock()
		}
		for pb.Next() {
			if err := cl.AdmitInto(ctx, &r, d); err != nil {
				b.Error(err)
				return
			}
			if d.Outcome != client.LocalGrant {
				remote++
			}
			if !d.Allowed {
				continue
			}
			if w := d.DecidedAt.UnixNano() / int64(period); w != win {
				flush()
				win, n = w, 0
			}
			n++
		}
		flush()
		strict.Add(remote)
	})
	elapsed := time.Since(start)
	b.StopTimer()
	overshoot := int64(math.MinInt64)
	for w, n := range perWindow {
		if w != 0 {
			overshoot = max(overshoot, n-limit)
		}
	}
	b.ReportMetric(float64(b.N)/elapsed.Seconds(), "decisions/s")
	b.ReportMetric(1-float64(strict.Load())/float64(b.N), "local-share")
	b.ReportMetric(float64(overshoot), "max-overshoot")
	b.ReportMetric(bound, "bound")
}
