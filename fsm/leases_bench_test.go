package fsm_test

import (
	"fmt"
	"testing"
	"time"

	"github.com/quorate/quorate/fsm"
)

// BenchmarkApplyLeaseAcquireRelease applies, per op, an Acquire and the
// Release of the lease it got (two entries), round-robin over 10k keys that
// each also hold one long lease, the leader clock advancing 100µs per entry.
func BenchmarkApplyLeaseAcquireRelease(b *testing.B) { benchLeaseAcquireRelease(b, false) }

// BenchmarkApplyLeaseAcquireReleaseWithRequestID is the same with a unique
// request ID on every Acquire and Release (kept 1s).
func BenchmarkApplyLeaseAcquireReleaseWithRequestID(b *testing.B) {
	benchLeaseAcquireRelease(b, true)
}

// benchLeaseAcquireRelease encodes entries in chunks outside the timer. A
// Release needs the token its Acquire got: each chunk is first applied to a
// twin FSM, which issues the same tokens as the measured one (Apply is
// deterministic).
func benchLeaseAcquireRelease(b *testing.B, withID bool) {
	const keys, chunk = 10_000, 2048
	step := int64(100 * time.Microsecond)
	put := encode(b, putPoliciesEnv(t0, withRetention(concurrency("db", 4, time.Minute), time.Second)))
	measured, twin := fsm.New(fsm.Options{}), fsm.New(fsm.Options{})
	var index uint64
	both := func(data []byte) *fsm.LeaseResult {
		index++
		applyTermLog(measured, index, 1, data)
		return lrOf(b, applyTermLog(twin, index, 1, data))
	}
	index++
	applyTermLog(measured, index, 1, put)
	applyTermLog(twin, index, 1, put)
	names := make([]string, keys)
	for i := range names {
		names[i] = fmt.Sprintf("tenant-%05d", i)
		both(encode(b, acquireOp("db", names[i]).withTTL(time.Hour).env(t0))) // one long lease per key
	}
	var entries [][]byte
	next, twinIndex := 0, index
	refill := func() {
		entries = entries[:0]
		for range chunk {
			now := t0 + int64(next+1)*step
			acq, rel := acquireOp("db", names[next%keys]), releaseOp("db", names[next%keys], 0)
			if withID {
				acq = acq.withID("svc-worker", fmt.Sprintf("%016x-a", uint64(next)*0x9e3779b97f4a7c15))
				rel = rel.withID("svc-worker", fmt.Sprintf("%016x-r", uint64(next)*0x9e3779b97f4a7c15))
			}
			data := encode(b, acq.env(now))
			twinIndex++
			r := lrOf(b, applyTermLog(twin, twinIndex, 1, data))
			if !r.Allowed {
				b.Fatalf("twin: acquire denied: %+v", r)
			}
			rel.token = r.Lease.Token
			entries = append(entries, data)
			data = encode(b, rel.env(now))
			twinIndex++
			lrOf(b, applyTermLog(twin, twinIndex, 1, data))
			entries = append(entries, data)
			next++
		}
	}
	refill()
	b.ReportAllocs()
	b.ResetTimer()
	j := 0
	for range b.N {
		if j == len(entries) {
			b.StopTimer()
			refill()
			j = 0
			b.StartTimer()
		}
		for k := range 2 {
			index++
			r, ok := applyTermLog(measured, index, 1, entries[j+k]).(*fsm.LeaseResult)
			if !ok || !r.Allowed || r.Duplicate {
				b.Fatalf("entry %d: %+v, want allowed afresh", index, r)
			}
		}
		j += 2
	}
	b.StopTimer()
	b.ReportMetric(float64(measured.SemaphoreCount()), "semaphores")
	if withID {
		b.ReportMetric(float64(measured.DedupeLen()), "entries")
	}
}

func lrOf(tb testing.TB, res any) *fsm.LeaseResult {
	tb.Helper()
	r, ok := res.(*fsm.LeaseResult)
	if !ok {
		tb.Fatalf("result %v, want *fsm.LeaseResult", res)
	}
	return r
}
