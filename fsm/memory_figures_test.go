package fsm_test

import (
	"bytes"
	"os"
	"runtime"
	"runtime/debug"
	"runtime/metrics"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/quorate/quorate/admission"
	"github.com/quorate/quorate/fsm"
	raftcmdv1 "github.com/quorate/quorate/proto/quorate/raftcmd/v1"
)

// memFigures is the memory of this process at one moment: the live heap
// (after two collections), the memory the runtime holds from the system
// and has not handed back, and the resident set from /proc/self/statm.
type memFigures struct {
	live, held, rss int64
}

// readMemFigures collects garbage and reads the figures.
func readMemFigures(tb testing.TB) memFigures {
	tb.Helper()
	runtime.GC()
	runtime.GC()
	s := []metrics.Sample{
		{Name: "/memory/classes/heap/objects:bytes"},
		{Name: "/memory/classes/total:bytes"},
		{Name: "/memory/classes/heap/released:bytes"},
	}
	metrics.Read(s)
	return memFigures{
		live: int64(s[0].Value.Uint64()),
		held: int64(s[1].Value.Uint64() - s[2].Value.Uint64()),
		rss:  statmRSS(tb),
	}
}

// statmRSS is the resident set size of this process in bytes, or -1 where
// /proc/self/statm is not readable.
func statmRSS(tb testing.TB) int64 {
	b, err := os.ReadFile("/proc/self/statm")
	if err != nil {
		return -1
	}
	f := strings.Fields(string(bytes.TrimSpace(b)))
	if len(f) < 2 {
		tb.Fatalf("/proc/self/statm: %q", b)
	}
	pages, err := strconv.ParseInt(f[1], 10, 64)
	if err != nil {
		tb.Fatalf("/proc/self/statm: %v", err)
	}
	return pages * int64(os.Getpagesize())
}

// logPerEntry logs the growth from base to now per entry.
func logPerEntry(t *testing.T, what string, base, now memFigures, n int) {
	t.Helper()
	per := func(a, b int64) float64 { return float64(b-a) / float64(n) }
	t.Logf("%-34s live heap %7.1f B, held from the OS %7.1f B, RSS %7.1f B per entry (%d entries)",
		what, per(base.live, now.live), per(base.held, now.held), per(base.rss, now.rss), n)
}

// TestMemoryFigures measures, when QUORATE_MEMORY_FIGURES=1, what an FSM
// costs the process per live token-bucket key and per remembered request ID
// (memKeys of each, made as BenchmarkMemoryPerKey and
// BenchmarkMemoryPerRequestID make them), and what it still costs once they
// have expired and Expire entries — the path a node's leader takes — have
// reclaimed them: before and after the runtime hands free memory back
// (debug.FreeOSMemory); and per key again under a soft memory limit, as a
// node started with --memory-limit runs. It logs the figures and fails only
// when entries are not reclaimed.
func TestMemoryFigures(t *testing.T) {
	if os.Getenv("QUORATE_MEMORY_FIGURES") != "1" {
		t.Skip("set QUORATE_MEMORY_FIGURES=1 to take the memory figures (1M entries, about a minute)")
	}
	if raceEnabled {
		t.Skip("skipped under the race detector: its shadow memory skews the figures")
	}
	t.Run("key", func(t *testing.T) {
		c := memCases[0] // token bucket, 10/h: every state lives 6 minutes
		measureExpiry(t, c.policy, c.env, true, false, (*fsm.FSM).BucketCount)
	})
	t.Run("key-under-limit", func(t *testing.T) {
		// As a node with --memory-limit: a soft limit of what the process
		// holds now plus 120 bytes per key makes the runtime collect more
		// often rather than double the heap.
		debug.FreeOSMemory()
		held := readMemFigures(t).held
		defer debug.SetMemoryLimit(debug.SetMemoryLimit(held + 120*memKeys))
		c := memCases[0]
		measureExpiry(t, c.policy, c.env, true, false, (*fsm.FSM).BucketCount)
	})
	t.Run("request-id", func(t *testing.T) {
		p := withRetention(tokenBucket("api", 1_000_000_000, time.Hour, 1_000_000_000, 0), time.Hour)
		env := func(now int64) *raftcmdv1.Envelope {
			return admitIDEnv(now, "svc-checkout", memRIDTemplate, "api", "tenant-0000000", 1)
		}
		measureExpiry(t, p, env, false, true, (*fsm.FSM).DedupeLen)
	})
}

// measureExpiry fills an FSM holding policy with memKeys entries made by env,
// expires them all and logs the figures at each step.
func measureExpiry(t *testing.T, policy admission.Policy, env func(now int64) *raftcmdv1.Envelope,
	patchKey, patchRID bool, count func(*fsm.FSM) int) {
	debug.FreeOSMemory()
	f := fsm.New(fsm.Options{})
	applyData(f, 1, encode(t, putPoliciesEnv(t0, policy)))
	base := readMemFigures(t)
	memFill(t, f, env, patchKey, patchRID)
	if n := count(f); n != memKeys {
		t.Fatalf("%d entries held after %d admits, want all", n, memKeys)
	}
	logPerEntry(t, "live:", base, readMemFigures(t), memKeys)

	// Two hours on, every entry has expired: Expire entries reclaim them.
	index := uint64(memKeys + 2)
	later := t0 + int64(2*time.Hour)
	expire := encode(t, expireEnv(later))
	for i := 0; count(f) > 0; i++ {
		if i > memKeys/fsm.ExpireBatch+2 {
			t.Fatalf("%d entries left after %d Expire entries", count(f), i)
		}
		applyData(f, index, expire)
		index++
	}
	logPerEntry(t, "expired and reclaimed:", base, readMemFigures(t), memKeys)
	debug.FreeOSMemory()
	logPerEntry(t, "then FreeOSMemory:", base, readMemFigures(t), memKeys)
	runtime.KeepAlive(f)
}
