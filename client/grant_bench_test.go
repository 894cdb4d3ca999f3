package client

import (
	"context"
	"math"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// unevenShares are the traffic shares of the 10 simulated gateways.
var unevenShares = []float64{0.70, 0.20, 0.05, 0.01, 0.01, 0.01, 0.005, 0.005, 0.005, 0.005}

// BenchmarkUnevenTraffic: one key of a fixed-window policy (limit units
// per window), 10 gateways offering 2× the limit between them with uneven
// shares. "even-split" gives each gateway a static local bucket of
// limit/10 per window; "grants" makes each gateway a Client holding grants
// from the test server, which sizes each holder's top-up by its share of
// the key's demand. Each reports the fraction of the limit admitted per
// window (fraction-of-limit: the mean; min and max over the windows
// measured, after one warm-up window).
func BenchmarkUnevenTraffic(b *testing.B) {
	const limit = 2000
	b.Run("even-split", func(b *testing.B) {
		var admitted int64
		for range b.N {
			for _, share := range unevenShares {
				bucket := int64(limit / len(unevenShares))
				for range int64(math.Round(share * 2 * limit)) {
					if bucket > 0 {
						bucket--
						admitted++
					}
				}
			}
		}
		b.ReportMetric(float64(admitted)/float64(b.N)/limit, "fraction-of-limit")
	})
	b.Run("grants", func(b *testing.B) {
		const window = 500 * time.Millisecond
		s := newGrantServer("p", limit, limit/10, 100*time.Millisecond)
		s.window = window
		clients := make([]*Client, len(unevenShares))
		for i := range clients {
			clients[i] = grantClient(b, s, nil)
		}
		windows := b.N + 1
		start := time.Now().Truncate(window).Add(window)
		time.Sleep(time.Until(start)) // begin at a window's start
		first, end := s.windowOf(start), start.Add(time.Duration(windows)*window)
		counts := make([]atomic.Int64, windows)
		var offered atomic.Int64
		var wg sync.WaitGroup
		const workers = 4 // per gateway, so that strict calls keep up with the rate
		for i, c := range clients {
			for range workers {
				wg.Go(func() {
					offerUneven(b, c, s, unevenShares[i]*2*limit/window.Seconds()/workers, start, end, first, counts, &offered)
				})
			}
		}
		wg.Wait()
		var sum int64
		lo, hi := math.Inf(1), 0.0
		for i := range counts[1:] {
			n := counts[1+i].Load()
			f := float64(n) / limit
			sum += n
			lo, hi = min(lo, f), max(hi, f)
		}
		st := Stats{}
		for _, c := range clients {
			s := c.Stats()
			st.LocalGrant += s.LocalGrant
			st.UnitsWasted += s.UnitsWasted
		}
		b.ReportMetric(float64(sum)/float64(windows-1)/limit, "fraction-of-limit")
		b.ReportMetric(lo, "min-fraction")
		b.ReportMetric(hi, "max-fraction")
		b.ReportMetric(float64(offered.Load())/float64(windows)/limit, "offered-x-limit")
		b.ReportMetric(float64(st.LocalGrant)/float64(windows)/limit, "local-fraction")
		b.ReportMetric(float64(st.UnitsWasted)/float64(windows)/limit, "wasted-fraction")
	})
}

// offerUneven admits on c at rate requests per second from start to end,
// counting the allowed ones by the window they were decided in (the
// server's decided_at, or the time of the call for a local decision). A backlog
// of more than 5ms of requests (the gateway fell behind) is dropped.
func offerUneven(b *testing.B, c *Client, s *grantServer, rate float64, start, end time.Time, first int64, counts []atomic.Int64, offered *atomic.Int64) {
	ctx := context.Background()
	r := Request{Policy: "p", Key: "k"}
	var issued int64
	for now := time.Now(); now.Before(end); now = time.Now() {
		due := int64(rate * now.Sub(start).Seconds())
		issued = max(issued, due-int64(rate*0.005))
		for ; issued < due; issued++ {
			t0 := time.Now()
			d, err := c.Admit(ctx, r)
			if err != nil {
				b.Error(err)
				return
			}
			offered.Add(1)
			at := t0 // a local decision: spent from a grant of t0's window
			if d.Outcome == Verified {
				at = d.DecidedAt
			}
			if w := s.windowOf(at) - first; d.Allowed && w >= 0 && w < int64(len(counts)) {
				counts[w].Add(1)
			}
		}
		time.Sleep(time.Millisecond) // pacing the offered load
	}
}
