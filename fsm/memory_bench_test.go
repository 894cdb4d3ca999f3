package fsm_test

import (
	"bytes"
	"encoding/binary"
	"encoding/hex"
	"runtime"
	"testing"
	"time"

	"github.com/quorate/quorate/admission"
	"github.com/quorate/quorate/fsm"
	raftcmdv1 "github.com/quorate/quorate/proto/quorate/raftcmd/v1"
)

// memKeys is how many active keys (or request-ID entries) the memory
// benchmarks create.
const memKeys = 1_000_000

// The placeholders that memFill patches in place in an encoded entry: a key
// of 7 decimal digits and a request ID of 32 hex characters.
const (
	memKeyTemplate = "tenant-0000000"
	memRIDTemplate = "00000000000000000000000000000000"
)

// memCases are the policies of BenchmarkMemoryPerKey, one per algorithm,
// each decided once (cost 1, or one lease) per key. Every state they leave
// outlives the ~1s of logged time the benchmark spans, so no key is
// reclaimed: token buckets refill one unit per 6 minutes; windows, logs and
// the quota last an hour or until midnight UTC (t0 is 22:13:20 UTC), and
// leases an hour.
var memCases = []struct {
	policy admission.Policy
	env    func(now int64) *raftcmdv1.Envelope
}{
	{tokenBucket("tb", 10, time.Hour, 10, 0), memAdmit("tb")},
	{admission.Policy{Name: "fw", Algorithm: admission.AlgorithmFixedWindow, Limit: 10, Period: time.Hour}, memAdmit("fw")},
	{admission.Policy{Name: "sw", Algorithm: admission.AlgorithmSlidingWindow, Limit: 10, Period: time.Hour}, memAdmit("sw")},
	{admission.Policy{Name: "sl", Algorithm: admission.AlgorithmSlidingLog, Limit: 10, Period: time.Hour}, memAdmit("sl")},
	{admission.Policy{Name: "qu", Algorithm: admission.AlgorithmQuota, Limit: 10, Calendar: admission.CalendarDay}, memAdmit("qu")},
	{concurrency("cc", 4, time.Hour), func(now int64) *raftcmdv1.Envelope {
		return acquireOp("cc", memKeyTemplate).env(now)
	}},
}

func memAdmit(policy string) func(now int64) *raftcmdv1.Envelope {
	return func(now int64) *raftcmdv1.Envelope { return admitEnv(now, policy, memKeyTemplate, 1) }
}

// BenchmarkMemoryPerKey measures the FSM heap per active key with 1,000,000
// keys, for each algorithm (a sub-benchmark named after it): one decided
// Admit per key (for concurrency, one held lease per key) creates the
// key's state, and B/key is the growth of the live heap (after GC) over the
// FSM holding only its policy, divided by the keys. The key is
// "tenant-NNNNNNN" (14 bytes; the stored state key is "<policy>/<key>", 17
// bytes). ns/op is the time to apply the 1M entries, ns/key per entry. It
// fails if any key was refused or reclaimed, and is skipped under the race
// detector.
func BenchmarkMemoryPerKey(b *testing.B) {
	for _, c := range memCases {
		b.Run(string(c.policy.Algorithm), func(b *testing.B) {
			count := (*fsm.FSM).BucketCount
			if c.policy.Algorithm == admission.AlgorithmConcurrency {
				count = (*fsm.FSM).SemaphoreCount
			}
			benchMemory(b, c.policy, c.env, true, false, count, "B/key", "keys")
		})
	}
}

// BenchmarkMemoryPerRequestID measures the FSM heap per request-ID (dedupe)
// entry with 1,000,000 entries: one Admit per entry, each with caller
// "svc-checkout" (12 bytes) and its own request ID (32 hex characters), all
// on one token-bucket key that never runs out, so that the growth of the
// live heap is the table's alone (its one bucket aside). Entries are kept
// an hour. est-B/entry is the table's own estimate (DedupeBytes/DedupeLen).
// Skipped under the race detector.
func BenchmarkMemoryPerRequestID(b *testing.B) {
	p := withRetention(tokenBucket("api", 1_000_000_000, time.Hour, 1_000_000_000, 0), time.Hour)
	env := func(now int64) *raftcmdv1.Envelope {
		return admitIDEnv(now, "svc-checkout", memRIDTemplate, "api", "tenant-0000000", 1)
	}
	f := benchMemory(b, p, env, false, true, (*fsm.FSM).DedupeLen, "B/entry", "entries")
	b.ReportMetric(float64(f.DedupeBytes())/float64(f.DedupeLen()), "est-B/entry")
}

// benchMemory measures, b.N times on a fresh FSM holding policy, the live
// heap that memKeys entries made by env add (patched with a distinct key
// or request ID each), and reports it per count(f), which must be memKeys.
// It returns the last FSM filled.
func benchMemory(b *testing.B, policy admission.Policy, env func(now int64) *raftcmdv1.Envelope,
	patchKey, patchRID bool, count func(*fsm.FSM) int, unit, countUnit string) *fsm.FSM {
	if raceEnabled {
		b.Skip("skipped under the race detector: 1M entries take minutes, and its shadow memory skews the heap figures")
	}
	var perKey float64
	var f *fsm.FSM
	for range b.N {
		b.StopTimer()
		f = fsm.New(fsm.Options{})
		applyData(f, 1, encode(b, putPoliciesEnv(t0, policy)))
		before := liveHeap()
		b.StartTimer()
		memFill(b, f, env, patchKey, patchRID)
		b.StopTimer()
		after := liveHeap()
		if n := count(f); n != memKeys {
			b.Fatalf("%d %s held after %d entries, want all of them (reclaimed or refused?)", n, countUnit, memKeys)
		}
		runtime.KeepAlive(f)
		perKey = float64(int64(after)-int64(before)) / memKeys
	}
	b.ReportMetric(perKey, unit)
	b.ReportMetric(memKeys, countUnit)
	b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N)/memKeys, "ns/key")
	return f
}

// memFill applies memKeys entries made by env to f at log indexes 2.., the
// leader clock advancing 1ms every 1024 entries (about 1s in all). It
// encodes one entry per 1024 and patches the key (patchKey) or the request
// ID (patchRID) in place for each of the others: Apply copies what it keeps
// out of the entry, so one buffer serves them all. Every entry must be
// allowed.
func memFill(b testing.TB, f *fsm.FSM, env func(now int64) *raftcmdv1.Envelope, patchKey, patchRID bool) {
	const chunk = 1024
	var data []byte
	var key, rid []byte
	var raw [16]byte
	for i := range memKeys {
		if i%chunk == 0 {
			data = encode(b, env(t0+int64(i/chunk+1)*int64(time.Millisecond)))
			key, rid = placeholder(b, data, memKeyTemplate), placeholder(b, data, memRIDTemplate)
			if patchKey && key == nil || patchRID && rid == nil {
				b.Fatal("the entry lacks the key or request ID to patch")
			}
		}
		if patchKey {
			for j, v := len(key)-1, i; key[j] != '-'; j, v = j-1, v/10 {
				key[j] = byte('0' + v%10)
			}
		}
		if patchRID {
			binary.BigEndian.PutUint64(raw[8:], uint64(i)*0x9e3779b97f4a7c15)
			hex.Encode(rid, raw[:])
		}
		switch r := applyData(f, uint64(i+2), data).(type) {
		case *fsm.AdmitResult:
			if !r.Decision.Allowed || r.Duplicate {
				b.Fatalf("entry %d: %+v, want allowed afresh", i, r)
			}
		case *fsm.LeaseResult:
			if !r.Allowed || r.Duplicate {
				b.Fatalf("entry %d: %+v, want allowed afresh", i, r)
			}
		default:
			b.Fatalf("entry %d: %v, want an admit or lease result", i, r)
		}
	}
}

// placeholder returns the bytes of data that hold s, or nil when s is not
// in data; it fails if s occurs twice.
func placeholder(b testing.TB, data []byte, s string) []byte {
	i := bytes.Index(data, []byte(s))
	if i < 0 {
		return nil
	}
	if bytes.Count(data, []byte(s)) > 1 {
		b.Fatalf("%q occurs more than once in the encoded entry", s)
	}
	return data[i : i+len(s) : i+len(s)]
}

// liveHeap is the heap in use once garbage is collected.
func liveHeap() uint64 {
	runtime.GC()
	runtime.GC()
	var ms runtime.MemStats
	runtime.ReadMemStats(&ms)
	return ms.HeapAlloc
}
