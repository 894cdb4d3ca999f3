package lease_test

import (
	"math/rand/v2"
	"testing"
)

// FuzzSemaphore drives the model-checking harness of
// TestSemaphoreMatchesModel from fuzz input: the bytes choose the
// operations, tokens, ttls and time steps. Every invariant is checked after
// every step: decisions and tokens equal the model's, at most limit leases
// live at any probed time (the limit is fixed unless the input changes it),
// tokens strictly increasing across reclaims, exact RetryAfter, stale tokens
// refused with ErrStale, Shift adds exactly d, determinism, and no input or
// returned state modified. With the seeds it runs as a plain test.
func FuzzSemaphore(f *testing.F) {
	f.Add(uint8(1), uint8(0), false, []byte{})
	f.Add(uint8(2), uint8(3), true, []byte("acquire renew release holds shift reclaim"))
	for seed := range 8 {
		r := rand.New(rand.NewPCG(uint64(seed), 99))
		b := make([]byte, 64+r.IntN(2000))
		for i := range b {
			b[i] = byte(r.Uint32())
		}
		f.Add(uint8(1+r.IntN(5)), uint8(r.IntN(10)), r.IntN(2) == 0, b)
	}
	f.Fuzz(func(t *testing.T, limit, scaleExp uint8, varyLimit bool, ops []byte) {
		const maxSteps = 400
		steps := min(len(ops)/6, maxSteps)
		src := &bytesSource{b: ops}
		h := newHarness(t, src, 1+int64(limit%20), pow10(int(scaleExp%10)), !varyLimit)
		for range steps {
			h.step()
		}
		h.finish()
	})
}
