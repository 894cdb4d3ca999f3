package fsm_test

import (
	"fmt"
	"testing"
	"time"

	"github.com/quorate/quorate/fsm"
)

// benchPolicy refills slowly enough that 10k keys hit round-robin stay live
// and are nearly always allowed.
var benchPolicy = tokenBucket("api", 1000, time.Hour, 1000, 0)

// BenchmarkApplyAdmit applies one Admit entry per op, round-robin over 10k
// keys, with the leader clock advancing 100µs per entry. Entries are encoded
// in chunks outside the timer.
func BenchmarkApplyAdmit(b *testing.B) {
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
			entries = append(entries, encode(b, admitEnv(now, "api", names[next%keys], 1)))
			next++
		}
	}
	refill()
	for i := range keys { // warm: every key has a bucket
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
		if _, ok := applyData(a.f, uint64(keys+i+2), entries[j]).(*fsm.AdmitResult); !ok {
			b.Fatal("admit was not decided")
		}
		j++
	}
	b.StopTimer()
	b.ReportMetric(float64(a.f.BucketCount()), "buckets")
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
