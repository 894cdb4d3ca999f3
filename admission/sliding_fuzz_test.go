package admission_test

import (
	"cmp"
	"math"
	"slices"
	"testing"
	"time"

	"github.com/quorate/quorate/admission"
)

// FuzzSlidingWindow and FuzzSlidingLog check the sliding algorithms'
// invariants on arbitrary inputs: first on the raw values (which may make an
// invalid policy, cost, time or state: no panic, an invalid policy fails
// closed, 0 ≤ Remaining ≤ Limit, a denial leaves the state unchanged), then
// with the values folded into a valid policy and a start time in [0, year
// 2200], running a sequence of requests encoded in ops (two bytes each: the
// gap and the cost).
//
// Per decision: deterministic; 0 ≤ Remaining ≤ Limit; ResetAfter ≥ 0; the
// input state is not modified; a denial returns it unchanged, with an exact,
// finite RetryAfter; an allow has RetryAfter 0, ExpiresAt = now+ResetAfter,
// and (sliding_log) a sorted log of live entries, at most limit of them, or
// (sliding_window) a count at most limit. Per sequence: no interval shorter
// than the period holds more than limit units (sliding_log), or more than
// the documented bound (sliding_window, at most 2×limit − 1).
func FuzzSlidingWindow(f *testing.F) { slidingFuzz(f, admission.AlgorithmSlidingWindow) }

// FuzzSlidingLog: see FuzzSlidingWindow.
func FuzzSlidingLog(f *testing.F) { slidingFuzz(f, admission.AlgorithmSlidingLog) }

func slidingFuzz(f *testing.F, alg admission.Algorithm) {
	fill := []byte{0, 255, 0, 255, 150, 255, 150, 1, 100, 255, 0, 255, 200, 255, 170, 255, 250, 128}
	f.Add(int64(100), int64(time.Minute), int64(0), t0, int64(5), fill)
	f.Add(int64(5), int64(15*time.Minute), int64(1), t0, int64(0), []byte{0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 170, 0, 180, 0, 190, 3})
	f.Add(int64(1), int64(time.Second), int64(1), int64(0), int64(1), []byte{150, 0, 150, 0, 151, 0, 140, 0, 145, 0})
	f.Add(int64(1e9), int64(366*day), int64(1e9), int64(7258118400e9), int64(1e9), fill)
	f.Add(int64(10_000), int64(ms), int64(10_000), int64(7258118400e9), int64(-1), fill)
	f.Add(int64(7), int64(1001*ms+1), int64(3), t0+1, int64(3), []byte{90, 240, 120, 240, 200, 240, 66, 240, 0, 240})
	f.Add(int64(0), int64(0), int64(0), int64(math.MinInt64), int64(math.MaxInt64), []byte{})
	f.Add(int64(-1), int64(-1), int64(-1), int64(math.MaxInt64), int64(math.MinInt64), []byte{255})
	// A crafted log out of order, its newest entry first: found by fuzzing.
	f.Add(int64(1), int64(time.Second), int64(1), int64(-53), int64(37), []byte("0"))

	f.Fuzz(func(t *testing.T, limit, period, maxCost, start, count int64, ops []byte) {
		kind := admission.KindSlidingWindow
		if alg == admission.AlgorithmSlidingLog {
			kind = admission.KindSlidingLog
		}
		raw := admission.Policy{Name: "fuzz", Algorithm: alg, Limit: limit, Period: time.Duration(period), MaxCost: maxCost}
		crafted := admission.State{Kind: kind, Start: start, Count: count, Prev: limit,
			Log: []admission.LogEntry{{At: count, Cost: maxCost}, {At: start, Cost: count}}}
		for _, now := range []int64{start, count, limit, period} {
			before := slidingClone(crafted)
			ns, d := admission.Decide(raw, crafted, maxCost, now)
			if raw.Validate() != nil && (d.Allowed || d.RetryAfter != admission.NeverRetry) {
				t.Fatalf("invalid policy %+v was not failed closed: %+v", raw, d)
			}
			if d.Remaining < 0 || d.Remaining > d.Limit || d.ResetAfter < 0 || d.RetryAfter < 0 ||
				!slidingEqual(crafted, before) || !d.Allowed && !slidingEqual(ns, crafted) {
				t.Fatalf("raw values: policy %+v, state %+v, now %d → %+v, %+v", raw, before, now, ns, d)
			}
			_ = admission.ExpiresAt(raw, crafted)
			_ = admission.Peek(raw, crafted, now)
		}

		p := slidingFold(alg, limit, period, maxCost)
		P, L := int64(p.Period), p.Limit
		now := int64(uint64(start) % uint64(7258118400e9+1))
		var s admission.State
		var log []admitted
		left := L
		for i := 0; i+1 < len(ops); i += 2 {
			if g := slidingFuzzGap(ops[i], P, now, log); now+g <= slidingHorizon {
				now += g
			}
			cost := slidingFuzzCost(ops[i+1], p.WithDefaults().MaxCost, left)
			ns, d := slidingDecide(t, p, s, cost, now)
			fail := func(what string) {
				t.Helper()
				t.Fatalf("%s: policy %+v, state %+v, cost %d, now %d → %+v, %+v", what, p, s, cost, now, ns, d)
			}
			if ns2, d2 := admission.Decide(p, s, cost, now); d2 != d || !slidingEqual(ns2, ns) {
				fail("not deterministic")
			}
			if d.Limit != L || d.Remaining < 0 || d.Remaining > L || d.ResetAfter < 0 {
				fail("decision out of range")
			}
			if d.Allowed {
				if d.RetryAfter != 0 || admission.ExpiresAt(p, ns) != now+int64(d.ResetAfter) || ns.Kind != kind {
					fail("allowed, but RetryAfter, ExpiresAt or Kind is wrong")
				}
				if int64(len(ns.Log)) > L || ns.Count > L ||
					!slices.IsSortedFunc(ns.Log, func(a, b admission.LogEntry) int { return cmp.Compare(a.At, b.At) }) ||
					len(ns.Log) > 0 && ns.Log[0].At <= now-P {
					fail("state not bounded, sorted and live")
				}
				log = append(log, admitted{now, cost})
			} else {
				if d.RetryAfter <= 0 || d.RetryAfter == admission.NeverRetry {
					fail("denied without a finite RetryAfter")
				}
				swRetryExact(t, p, s, cost, now, d)
			}
			s, left = ns, d.Remaining
		}
		slidingPairs(log, P, func(dt, units int64) {
			bound := L
			if alg == admission.AlgorithmSlidingWindow {
				bound = swBound(L, P, dt)
			}
			if units > bound || units > 2*L-1 {
				t.Fatalf("policy %+v: %d units within %dns, above %d", p, units, dt, bound)
			}
		})
	})
}

// slidingFold maps arbitrary integers into a valid policy of alg.
func slidingFold(alg admission.Algorithm, limit, period, maxCost int64) admission.Policy {
	var lim, per int64
	if alg == admission.AlgorithmSlidingWindow {
		const minMs, maxMs = int64(1000), int64(366 * day / ms)
		per = (minMs + int64(uint64(period)%uint64(maxMs-minMs+1))) * int64(ms)
		lim = 1 + int64(uint64(limit)%1e9)
	} else {
		const minP, maxP = int64(ms), int64(366 * day)
		per = minP + int64(uint64(period)%uint64(maxP-minP+1))
		lim = 1 + int64(uint64(limit)%10_000)
	}
	return admission.Policy{Name: "fuzz", Algorithm: alg, Limit: lim, Period: time.Duration(per),
		MaxCost: int64(uint64(maxCost) % uint64(lim+1))} // 0 = default
}

// slidingFuzzGap decodes a gap: the same instant, a fraction of the period,
// around the next window boundary, around when an admitted request leaves,
// or a long idle.
func slidingFuzzGap(b byte, P, now int64, log []admitted) int64 {
	switch {
	case b < 64:
		return 0
	case b < 128:
		return int64(b-64) * (P / 64)
	case b < 160:
		return max(0, now-now%P+P+int64(b)-144-now)
	case b < 192 && len(log) > 0:
		return max(0, log[int(b)%len(log)].at+P+int64(b%3)-1-now)
	default:
		return 2*P + int64(b-192)*(P/16)
	}
}

// slidingFuzzCost decodes a cost: 1, any, max_cost, or what is left.
func slidingFuzzCost(b byte, maxCost, left int64) int64 {
	switch {
	case b < 128:
		return 1
	case b < 200:
		return 1 + int64(b)%maxCost
	case b < 230:
		return maxCost
	default:
		return min(maxCost, max(1, left))
	}
}
