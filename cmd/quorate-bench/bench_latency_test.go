package main

import (
	"bytes"
	"context"
	"math"
	"math/rand/v2"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// within reports whether got is within rel (relative) of want.
func within(got, want, rel float64) bool { return math.Abs(got-want) <= rel*want }

func TestLatencyRecorderPercentiles(t *testing.T) {
	// 1 µs .. 10 ms, spread over workers of different shards.
	r := newLatencyRecorder(3)
	for us := 1; us <= 10000; us++ {
		r.record(us%3, time.Duration(us)*time.Microsecond)
	}
	got := r.percentilesMs()
	for name, want := range map[string]float64{"p50": 5, "p90": 9, "p99": 9.9, "p99.9": 9.99} {
		if !within(got[name], want, 0.001) {
			t.Errorf("1..10000 µs: %s = %v ms, want %v ms within 0.1%%", name, got[name], want)
		}
	}
	if got["max"] != 10 || r.count() != 10000 {
		t.Errorf("1..10000 µs: max %v ms (want exactly 10), %d recorded", got["max"], r.count())
	}

	// 990 calls of 1 ms and 10 of 100 ms: p99 is still 1 ms, p99.9 100 ms.
	r = newLatencyRecorder(64)
	for i := range 1000 {
		d := time.Millisecond
		if i%100 == 7 {
			d = 100 * time.Millisecond
		}
		r.record(i%64, d)
	}
	got = r.percentilesMs()
	for name, want := range map[string]float64{"p50": 1, "p90": 1, "p99": 1, "p99.9": 100, "max": 100} {
		if !within(got[name], want, 0.001) {
			t.Errorf("990×1 ms + 10×100 ms: %s = %v ms, want %v", name, got[name], want)
		}
	}

	// Past the histogram's range: counted at its top, the max exact.
	r = newLatencyRecorder(1)
	r.record(0, time.Millisecond)
	r.record(0, 2*time.Hour)
	got = r.percentilesMs()
	if got["max"] != float64(2*time.Hour/time.Millisecond) || !within(got["p99.9"], float64(time.Hour/time.Millisecond), 0.001) {
		t.Errorf("1 ms and 2 h: %v", got)
	}
	// A max inside a histogram bucket: no percentile above it (the bucket's
	// top, 12.399 ms here, lies above the exact 12.397 ms).
	r = newLatencyRecorder(1)
	r.record(0, 6099*time.Microsecond)
	r.record(0, 12397*time.Microsecond)
	got = r.percentilesMs()
	if got["max"] != 12.397 || got["p99"] != 12.397 || got["p99.9"] != 12.397 {
		t.Errorf("6.099 and 12.397 ms: %v, want p99 = p99.9 = max = 12.397", got)
	}
	if got := newLatencyRecorder(4).percentilesMs(); len(got) != 0 {
		t.Errorf("nothing recorded: %v, want no percentiles", got)
	}
}

// TestLatencyRecorderMatchesSort checks the histogram against sorting every
// sample (what bench did before) on a long-tailed random sample.
func TestLatencyRecorderMatchesSort(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	r := newLatencyRecorder(8)
	lats := make([]time.Duration, 50000)
	for i := range lats {
		lats[i] = time.Duration(math.Exp(rng.NormFloat64()*1.5+7)) * time.Microsecond // median ~1.1 ms, tail to seconds
		r.record(i%8, lats[i])
	}
	slices.Sort(lats)
	got := r.percentilesMs()
	for name, q := range map[string]float64{"p50": 0.5, "p90": 0.9, "p99": 0.99, "p99.9": 0.999} {
		// The sample at the rank, or its neighbour: the two rank
		// conventions differ by one sample.
		i := int(math.Ceil(q*float64(len(lats)))) - 1
		lo, hi := float64(lats[i].Microseconds())/1000, float64(lats[min(i+1, len(lats)-1)].Microseconds())/1000
		if got[name] < lo*0.999 || got[name] > hi*1.001 {
			t.Errorf("%s = %v ms, sorted samples give %v..%v ms", name, got[name], lo, hi)
		}
	}
	if want := float64(lats[len(lats)-1].Microseconds()) / 1000; got["max"] != want {
		t.Errorf("max = %v ms, want %v", got["max"], want)
	}
}

// BenchmarkLatencyRecorder measures a record from many workers at once: it
// must cost far less than the fastest call (tens of µs on loopback).
func BenchmarkLatencyRecorder(b *testing.B) {
	r := newLatencyRecorder(64)
	var next atomic.Int64
	b.RunParallel(func(pb *testing.PB) {
		w := int(next.Add(1))
		d := time.Duration(w) * 37 * time.Microsecond
		for pb.Next() {
			r.record(w, d)
		}
	})
}

// BenchmarkGapTracker measures an answer stamped by many workers at once
// (one lock for the run): like the recorder, far below a call's cost.
func BenchmarkGapTracker(b *testing.B) {
	g := newGapTracker(time.Now)
	b.RunParallel(func(pb *testing.PB) {
		for pb.Next() {
			g.answered()
		}
	})
}

// fakeClock hands out the given times, one per call.
func fakeClock(t *testing.T, times ...time.Duration) func() time.Time {
	base := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	i := 0
	return func() time.Time {
		if i >= len(times) {
			t.Fatalf("clock read %d times, only %d given", i+1, len(times))
		}
		i++
		return base.Add(times[i-1])
	}
}

func TestGapTracker(t *testing.T) {
	ms := time.Millisecond
	// Began at 0; answers at 10, 20, 1520, 1530 and 2000 ms.
	g := newGapTracker(fakeClock(t, 0, 10*ms, 20*ms, 1520*ms, 1530*ms, 2000*ms))
	for range 5 {
		g.answered()
	}
	if gap, at, ok := g.result(); !ok || gap != 1500*ms || at != 20*ms {
		t.Errorf("longest gap %v at %v (ok %v), want 1.5s at 20ms", gap, at, ok)
	}

	// The wait before the first answer is no gap between answers.
	g = newGapTracker(fakeClock(t, 0, 5*time.Second, 5*time.Second+ms))
	g.answered()
	if _, _, ok := g.result(); ok {
		t.Error("one answer: a gap was reported")
	}
	g.answered()
	if gap, at, ok := g.result(); !ok || gap != ms || at != 5*time.Second {
		t.Errorf("two answers 1ms apart: %v at %v (ok %v)", gap, at, ok)
	}
}

// stallTarget answers at once, except that the calls started after the
// first stallAfter calls wait until stall has passed since the last of the
// first stallAfter returned: no call returns for at least stall.
type stallTarget struct {
	stallAfter  int64
	stall       time.Duration
	calls, done atomic.Int64
	once        sync.Once
	resumed     chan struct{}
}

func (f *stallTarget) name() string { return "fake" }
func (f *stallTarget) close() error { return nil }
func (f *stallTarget) call(ctx context.Context, _ int, keys []int) (benchResult, error) {
	if f.calls.Add(1) <= f.stallAfter {
		if f.done.Add(1) == f.stallAfter {
			f.once.Do(func() { time.AfterFunc(f.stall, func() { close(f.resumed) }) })
		}
	} else {
		select {
		case <-f.resumed:
		case <-ctx.Done():
			return benchResult{}, ctx.Err()
		}
	}
	return benchResult{allowed: len(keys)}, nil
}

// TestRunLoadLongestGap runs the generator against a target that answers
// nothing for 300ms mid-run: the summary's longest gap covers the stall,
// but for the time the generator takes to note the answer before it
// (a goroutine of a loaded machine may wait tens of ms to run again).
func TestRunLoadLongestGap(t *testing.T) {
	f := &stallTarget{stallAfter: 200, stall: 300 * time.Millisecond, resumed: make(chan struct{})}
	o := loadOptions{workers: 4, duration: time.Second, keys: 10, dist: "uniform", batch: 2, label: "test"}
	s := runLoad(context.Background(), f, o, &bytes.Buffer{})
	if s.LongestGapMs == nil || s.LongestGapAtS == nil {
		t.Fatalf("no longest gap in %+v", s)
	}
	if *s.LongestGapMs < 250 || *s.LongestGapMs > s.Seconds*1000 || *s.LongestGapAtS < 0 || *s.LongestGapAtS > s.Seconds {
		t.Errorf("longest gap %v ms at %vs, want at least the 300ms stall within the %vs run", *s.LongestGapMs, *s.LongestGapAtS, s.Seconds)
	}
	if s.LatencyMs["max"] < 300 || s.Calls <= 200 || s.Decisions != 2*s.Calls {
		t.Errorf("summary %+v", s)
	}
	var out bytes.Buffer
	writeBenchSummary(&out, s)
	if !strings.Contains(out.String(), "longest gap between answers: ") || !strings.Contains(out.String(), "s into the run") {
		t.Errorf("text summary lacks the longest gap:\n%s", out.String())
	}

	// A run without two answers says so.
	out.Reset()
	writeBenchSummary(&out, BenchSummary{Target: "fake", Mode: "closed"})
	if !strings.Contains(out.String(), "fewer than two answered calls") {
		t.Errorf("text summary without answers:\n%s", out.String())
	}
}
