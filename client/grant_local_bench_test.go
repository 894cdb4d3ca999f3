package client

import (
	"context"
	"testing"
	"time"
)

// BenchmarkLocalGrant measures the hot path of a decision from a grant
// (grants.spend and fill, through AdmitInto) on one key whose grant holds
// more units than the run spends, from GOMAXPROCS goroutines (RunParallel):
// AdmitInto reuses the caller's Decision, Admit returns a new one;
// HolderDecide is a Holder's Decide (a new Decision), as a node decides.
// The test server grants the units; no call is made while timed unless the
// grant runs short (strict counts those).
func BenchmarkLocalGrant(b *testing.B) {
	const units = 1 << 40
	s := newGrantServer("p", units, 1<<30, 10*time.Second)
	c := grantClient(b, s, nil)
	b.Run("AdmitInto", func(b *testing.B) {
		benchLocal(b, c, "into", func(ctx context.Context, r *Request, d *Decision) error { return c.AdmitInto(ctx, r, d) })
	})
	b.Run("Admit", func(b *testing.B) {
		benchLocal(b, c, "admit", func(ctx context.Context, r *Request, d *Decision) error {
			res, err := c.Admit(ctx, *r)
			if err == nil {
				*d = *res
			}
			return err
		})
	})
	b.Run("HolderDecide", func(b *testing.B) {
		h := newTestHolder(b, s, nil)
		r := Request{Policy: "p", Key: "holder"}
		eventually(b, 20*time.Second, "a large grant", func() bool {
			for range 10_000 {
				h.decide(b, &r)
			}
			g := (*h.g.states.Load())[bucketKey{r.Policy, r.Key}]
			return g != nil && g.avail.sum() >= int64(b.N)+1_000_000
		})
		before := h.Stats().LocalGrant
		b.ReportAllocs()
		b.ResetTimer()
		b.RunParallel(func(pb *testing.PB) {
			r := r
			for pb.Next() {
				h.Decide(&r)
			}
		})
		b.StopTimer()
		if local := h.Stats().LocalGrant - before; local < uint64(b.N)/2 {
			b.Fatalf("%d of %d decisions local", local, b.N)
		}
	})
}

// benchLocal times b.N decisions of key on c's grants by admit, after
// warming the key's grant up to hold them all.
func benchLocal(b *testing.B, c *Client, key string, admit func(context.Context, *Request, *Decision) error) {
	r := Request{Policy: "p", Key: key}
	warmGrant(b, c, &r, int64(b.N)+1_000_000)
	before := c.Stats().LocalGrant
	b.ReportAllocs()
	b.ResetTimer()
	b.RunParallel(func(pb *testing.PB) {
		ctx, r := context.Background(), r
		var d Decision
		for pb.Next() {
			if err := admit(ctx, &r, &d); err != nil {
				b.Error(err)
				return
			}
		}
	})
	b.StopTimer()
	if local := c.Stats().LocalGrant - before; local < uint64(b.N)/2 {
		b.Fatalf("%d of %d decisions local", local, b.N)
	}
}

// warmGrant decides r on c until r's grant holds at least n units unspent.
func warmGrant(b *testing.B, c *Client, r *Request, n int64) {
	b.Helper()
	var d Decision
	eventually(b, 20*time.Second, "a large grant", func() bool {
		for range 10_000 {
			if err := c.AdmitInto(context.Background(), r, &d); err != nil {
				b.Fatal(err)
			}
		}
		return grantHeld(c, r.Policy, r.Key) >= n
	})
}
