package dedupe_test

import (
	"fmt"
	"runtime"
	"testing"
	"time"

	"google.golang.org/protobuf/proto"

	"github.com/quorate/quorate/dedupe"
	raftcmdv1 "github.com/quorate/quorate/proto/quorate/raftcmd/v1"
)

// realisticResult is an AdmitRecord as fsm records it under a 100k/h
// policy: mostly allowed, every fourth denied (with a retry_after).
func realisticResult(tb testing.TB, i int) []byte {
	tb.Helper()
	rec := &raftcmdv1.AdmitRecord{
		Allowed:           true,
		Limit:             100_000,
		Remaining:         int64(99_999 - i%100_000),
		ResetAfterNanos:   int64(time.Duration(1+i%100_000) * 36 * time.Millisecond),
		PolicyVersion:     3,
		DecidedAtUnixNano: t0 + int64(i)*int64(time.Microsecond),
	}
	if i%4 == 3 {
		rec.Allowed, rec.Remaining = false, 0
		rec.ResetAfterNanos = int64(time.Hour)
		rec.RetryAfterNanos = int64(36*time.Millisecond) * int64(1+i%5)
	}
	b, err := proto.MarshalOptions{Deterministic: true}.Marshal(rec)
	if err != nil {
		tb.Fatal(err)
	}
	return b
}

func heapAlloc() uint64 {
	runtime.GC()
	runtime.GC()
	var ms runtime.MemStats
	runtime.ReadMemStats(&ms)
	return ms.HeapAlloc
}

// TestMemoryPerEntry measures the heap a table of 100k realistic entries
// holds — caller 12 bytes, request ID 32 hex characters, a ~40-byte
// AdmitRecord, each in its own allocation as when decoded from a log entry
// — and compares it with the table's own estimate (Bytes).
func TestMemoryPerEntry(t *testing.T) {
	const n = 100_000
	if l, d := len(realisticResult(t, 500)), len(realisticResult(t, 503)); l < 25 || l > 50 || d < 25 || d > 50 {
		t.Fatalf("test setup: realistic results are %d and %d bytes, want 25..50", l, d)
	}
	before := heapAlloc()
	tab := dedupe.New(n)
	var resultBytes int
	for i := range n {
		e := dedupe.Entry{
			Key: dedupe.Key{
				Caller:    fmt.Sprintf("svc-%08d", i%50),
				RequestID: fmt.Sprintf("%032x", uint64(i)*0x9e3779b97f4a7c15),
			},
			Result:    realisticResult(t, i),
			ExpiresAt: t0 + int64(10*time.Minute) + int64(i),
		}
		copy(e.Fingerprint[:], e.Key.RequestID)
		resultBytes += len(e.Result)
		if err := tab.Put(e, t0); err != nil {
			t.Fatal(err)
		}
	}
	after := heapAlloc()
	runtime.KeepAlive(tab)
	if tab.Len() != n {
		t.Fatalf("Len %d, want %d", tab.Len(), n)
	}
	measured := float64(int64(after)-int64(before)) / n
	estimated := float64(tab.Bytes()) / float64(tab.Len())
	t.Logf("%d entries (caller 12 B, request ID 32 B, result %.1f B avg): measured %.1f heap bytes/entry, Bytes()/Len() %.1f (ratio %.2f)",
		n, float64(resultBytes)/n, measured, estimated, measured/estimated)
	if measured <= 0 || estimated <= 0 {
		t.Fatalf("measured %.1f, estimated %.1f bytes per entry", measured, estimated)
	}
	if measured > 2*estimated || estimated > 2*measured {
		t.Errorf("Bytes()/Len() = %.1f is not within 2× of the measured %.1f heap bytes per entry", estimated, measured)
	}

	// Sweeping everything returns the estimate to zero; the heap goes back
	// near where it started once the table's own arrays are dropped too.
	if got := tab.Sweep(t0+int64(time.Hour), n); got != n {
		t.Fatalf("Sweep removed %d, want %d", got, n)
	}
	if tab.Len() != 0 || tab.Bytes() != 0 {
		t.Fatalf("after sweeping: Len %d Bytes %d", tab.Len(), tab.Bytes())
	}
	swept := heapAlloc()
	runtime.KeepAlive(tab)
	t.Logf("after sweeping all: %.1f heap bytes/entry still held (the map, slab and order shrink with the entries)",
		float64(int64(swept)-int64(before))/n)
	if float64(int64(swept)-int64(before))/n > measured/2 {
		t.Errorf("after sweeping everything the table still holds %.1f bytes per former entry, more than half of %.1f",
			float64(int64(swept)-int64(before))/n, measured)
	}
}
