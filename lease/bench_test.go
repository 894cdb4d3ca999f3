package lease_test

import (
	"fmt"
	"testing"

	"github.com/quorate/quorate/lease"
)

// BenchmarkAcquire acquires one slot of a key with n live leases: allowed
// (limit n+1; the state is copied into a new one) and denied (limit n).
func BenchmarkAcquire(b *testing.B) {
	for _, n := range []int64{10, 1000} {
		var s lease.Semaphore
		for i := range n {
			s, _ = lease.Acquire(s, n, 1_000_000+i, t0, claim)
		}
		now := t0 + 1000
		if lease.Live(s, now) != n {
			b.Fatalf("setup: %d live, want %d", lease.Live(s, now), n)
		}
		for _, c := range []struct {
			name  string
			limit int64
		}{{"allowed", n + 1}, {"denied", n}} {
			b.Run(fmt.Sprintf("live=%d/%s", n, c.name), func(b *testing.B) {
				b.ReportAllocs()
				for b.Loop() {
					if _, d := lease.Acquire(s, c.limit, 1000, now, claim); d.Allowed != (c.limit > n) {
						b.Fatalf("unexpected decision %+v", d)
					}
				}
			})
		}
	}
}
