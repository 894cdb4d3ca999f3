package main

import (
	"bytes"
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// testGubernatorBin returns the gubernator that `make bench-compare`
// installs in the repository's .cache/bin, or skips the test.
func testGubernatorBin(tb testing.TB) string {
	tb.Helper()
	bin, err := filepath.Abs(filepath.Join("..", "..", gubernatorDefaultBin))
	if err != nil {
		tb.Fatal(err)
	}
	if _, err := os.Stat(bin); err != nil {
		tb.Skipf("no gubernator at %s (make bench-compare installs it); skipping the Gubernator test", bin)
	}
	return bin
}

// TestBenchGubernator starts a real 3-node Gubernator and drives it through
// the generated client: a small bucket admits exactly its capacity, whatever
// node each call reaches; the benchmark's bucket admits everything, unary
// and batched, and the load generator reports it like any target.
func TestBenchGubernator(t *testing.T) {
	bin := testGubernatorBin(t)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	c, err := startGubernatorCluster(ctx, bin, gubernatorNodes)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := c.stop(); err != nil {
			t.Error(err)
		}
	})
	if v := gubernatorVersion(bin); !strings.Contains(v, "github.com/gubernator-io/gubernator/v2 v2.13.0") {
		t.Errorf("version of %s: %q", bin, v)
	}

	// Capacity 5 that never refills, one key: 5 of 300 unary calls allowed.
	small := newGubernatorTarget(c.addrs, redisOptions{capacity: 5, refill: 0}, loadOptions{workers: 2, keys: 1, batch: 1, keyPrefix: "small-"})
	defer small.close()
	allowed, denied := 0, 0
	for i := range 300 {
		r, err := small.call(ctx, i%2, []int{0})
		if err != nil || len(r.itemErrors) != 0 || r.allowed+r.denied != 1 {
			t.Fatalf("call %d: %+v, %v", i, r, err)
		}
		allowed, denied = allowed+r.allowed, denied+r.denied
	}
	if allowed != 5 || denied != 295 {
		t.Errorf("bucket of 5 on one key, 300 calls over %d nodes: %d allowed, %d denied; want 5 allowed", len(c.addrs), allowed, denied)
	}

	// The benchmark's bucket, 100 requests a call: all allowed.
	cfg := redisOptions{capacity: defaultBenchCapacity, refill: defaultBenchRefill}
	big := newGubernatorTarget(c.addrs, cfg, loadOptions{workers: 1, keys: 1000, batch: 100, keyPrefix: "big-"})
	defer big.close()
	keys := make([]int, 100)
	for i := range 10 {
		for j := range keys {
			keys[j] = (i*100 + j*7) % 1000
		}
		r, err := big.call(ctx, 0, keys)
		if err != nil || len(r.itemErrors) != 0 || r.allowed != 100 {
			t.Fatalf("batch call %d: %+v, %v", i, r, err)
		}
	}

	// Through the load generator, as bench compare runs it.
	load := loadOptions{workers: 4, duration: time.Second, keys: 100, dist: "zipf", batch: 3, label: "test", keyPrefix: "load-"}
	target := newGubernatorTarget(c.addrs, cfg, load)
	defer target.close()
	s := runLoad(ctx, target, load, &bytes.Buffer{})
	if s.Target != targetGubernator || s.Calls == 0 || len(s.Errors) != 0 || len(s.ItemErrors) != 0 || s.Denied != 0 ||
		s.Decisions != 3*s.Calls || s.LatencyMs["p50"] <= 0 {
		t.Errorf("load against Gubernator: %+v", s)
	}
}

// TestGubernatorMissing: a binary that is not there is reported, not run.
func TestGubernatorMissing(t *testing.T) {
	_, err := startGubernatorCluster(context.Background(), filepath.Join(t.TempDir(), "gubernator"), gubernatorNodes)
	if err == nil {
		t.Fatal("a missing gubernator started")
	}
}
