package lease_test

import (
	"math/rand/v2"
	"testing"
)

// TestSemaphoreMatchesModel runs random sequences of Acquire, Renew, Release,
// Holds, Shift (leader changes) and reclaims on three keys, with random ttls
// and non-decreasing log times (equal times, one-nanosecond steps, jumps to
// an expiry and big jumps), and checks every answer against the brute-force
// model: decisions, tokens, exact RetryAfter, ErrStale for stale tokens,
// never more than limit live, inputs and returned states never modified. A
// failure names the iteration: its seed reproduces it.
func TestSemaphoreMatchesModel(t *testing.T) {
	iterations, steps := 300, 300
	if testing.Short() {
		iterations = 50
	}
	var total stats
	for iter := range iterations {
		r := rand.New(rand.NewPCG(uint64(iter), 0x6c65617365))
		limit := 1 + r.Int64N(4)
		if r.IntN(5) == 0 {
			limit = 1 + r.Int64N(20)
		}
		scale := pow10(r.IntN(10))
		h := newHarness(t, r, limit, scale, r.IntN(3) != 0)
		run(t, h, steps, iter)
		s := h.st
		total.allowed += s.allowed
		total.denied += s.denied
		total.renewed += s.renewed
		total.released += s.released
		total.stale += s.stale
		total.reclaimed += s.reclaimed
		total.shifted += s.shifted
	}
	// Guard against a generator that never exercises a path.
	all := total.allowed + total.denied
	if total.allowed < all/10 || total.denied < all/10 || total.renewed < all/20 ||
		total.released < all/20 || total.stale < all/20 || total.reclaimed < all/50 || total.shifted < all/50 {
		t.Errorf("unbalanced workload: %+v", total)
	}
	t.Logf("%d iterations: %+v", iterations, total)
}

func run(t *testing.T, h *harness, steps, iter int) {
	t.Helper()
	defer func() {
		if t.Failed() {
			t.Logf("iteration %d failed (limit %d, scale %d)", iter, h.limit, h.scale)
		}
	}()
	for range steps {
		h.step()
	}
	h.finish()
}

func pow10(n int) int64 {
	v := int64(1)
	for range n {
		v *= 10
	}
	return v
}
