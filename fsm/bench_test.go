package fsm_test

import (
	"fmt"
	"testing"
	"time"

	"github.com/quorate/quorate/fsm"
)

// benchPolicy refills slowly enough that 10k keys hit round-robin stay live
// and are nearly always allowed. Its request IDs are kept for 1s, so that at
// one entry per 100µs the request-ID table holds a steady 10k entries, one
// reclaimed per Apply, instead of growing for the whole benchmark.
var benchPolicy = withRetention(tokenBucket("api", 1000, time.Hour, 1000, 0), time.Second)

// BenchmarkApplyAdmit applies one Admit entry per op, round-robin over 10k
// keys, with the leader clock advancing 100µs per entry. Entries are encoded
// in chunks outside the timer.
func BenchmarkApplyAdmit(b *testing.B) { benchApplyAdmit(b, false) }

// BenchmarkApplyAdmitWithRequestID is BenchmarkApplyAdmit with a unique
// request ID (32 hex characters) and a caller on every Admit: each op looks
// the request up, records its result and reclaims an expired entry.
func BenchmarkApplyAdmitWithRequestID(b *testing.B) { benchApplyAdmit(b, true) }

func benchApplyAdmit(b *testing.B, withID bool) {
	const keys, chunk = 10_000, 4096
	a := newApplier(b, fsm.Options{})
	a.putPolicies(t0, benchPolicy)
	names := make([]string, keys)
	for i := range names {
		names[i] = fmt.Sprintf("tenant-%05d", i)
	}
	entries := make([][]byte, 0, chunk)
	next := 0
	refill := func() {
		entries = entries[:0]
		for range chunk {
			now := t0 + int64(next)*int64(100*time.Microsecond)
			env := admitEnv(now, "api", names[next%keys], 1)
			if withID {
				env = admitIDEnv(now, "svc-checkout", fmt.Sprintf("%032x", uint64(next)*0x9e3779b97f4a7c15), "api", names[next%keys], 1)
			}
			entries = append(entries, encode(b, env))
			next++
		}
	}
	refill()
	for i := range keys { // warm: every key has a bucket (and 1s of request IDs)
		if i%chunk == 0 && i > 0 {
			refill()
		}
		applyData(a.f, uint64(i+2), entries[i%chunk])
	}
	refill()
	b.ReportAllocs()
	b.ResetTimer()
	j := 0
	for i := range b.N {
		if j == len(entries) {
			b.StopTimer()
			refill()
			j = 0
			b.StartTimer()
		}
		r, ok := applyData(a.f, uint64(keys+i+2), entries[j]).(*fsm.AdmitResult)
		if !ok || r.Duplicate {
			b.Fatal("admit was not decided afresh")
		}
		j++
	}
	b.StopTimer()
	b.ReportMetric(float64(a.f.BucketCount()), "buckets")
	if withID {
		b.ReportMetric(float64(a.f.DedupeLen()), "entries")
		if a.f.DedupeLen() > 2*keys {
			b.Fatalf("%d request-ID entries, want a steady state near %d", a.f.DedupeLen(), keys)
		}
	}
}

// BenchmarkSnapshotPersist snapshots and persists a group of 100k buckets
// into memory.
func BenchmarkSnapshotPersist(b *testing.B) {
	const keys = 100_000
	a := newApplier(b, fsm.Options{})
	a.apply(initialPolicies(t0))
	for i := range keys {
		applyData(a.f, uint64(i+2), encode(b, admitEnv(t0, policyNames[i%len(policyNames)], fmt.Sprintf("tenant-%06d", i), 1)))
	}
	if got := a.f.BucketCount(); got != keys {
		b.Fatalf("BucketCount %d, want %d", got, keys)
	}
	var sink memSink
	b.ReportAllocs()
	b.ResetTimer()
	for range b.N {
		sink.Reset()
		snap, err := a.f.Snapshot()
		if err != nil {
			b.Fatal(err)
		}
		if err := snap.Persist(&sink); err != nil {
			b.Fatal(err)
		}
		snap.Release()
	}
	b.StopTimer()
	b.SetBytes(int64(sink.Len()))
}

// BenchmarkSnapshotCapture times what a snapshot holds the FSM for (its
// applies wait meanwhile): Snapshot alone, on a group of 10k buckets and
// 100k request-ID entries (a minute of 1,700 Admits a second, each with
// its ID).
func BenchmarkSnapshotCapture(b *testing.B) {
	const keys, ids = 10_000, 100_000
	a := newApplier(b, fsm.Options{})
	a.putPolicies(t0, withRetention(benchPolicy, 10*time.Minute))
	for i := range ids {
		now := t0 + int64(i)*int64(100*time.Microsecond)
		env := admitIDEnv(now, "svc-checkout", fmt.Sprintf("%032x", uint64(i)*0x9e3779b97f4a7c15), "api", fmt.Sprintf("tenant-%05d", i%keys), 1)
		applyData(a.f, uint64(i+2), encode(b, env))
	}
	if got := a.f.DedupeLen(); got != ids {
		b.Fatalf("%d request-ID entries, want %d", got, ids)
	}
	b.ReportAllocs()
	b.ResetTimer()
	for range b.N {
		snap, err := a.f.Snapshot()
		if err != nil {
			b.Fatal(err)
		}
		snap.Release()
	}
}
