package main

// What a run of the load generator measures beyond counts: the latency
// histogram of its calls and the longest gap between answers.

import (
	"sync"
	"time"

	"github.com/HdrHistogram/hdrhistogram-go"
)

// The latency histogram's range and precision: microseconds from 1 µs to an
// hour (open-loop latency counts from the scheduled start, so a stalled
// target can exceed benchCallTimeout by far), three significant digits (a
// value is reported within 0.1%). Longer latencies are recorded as an hour;
// the exact maximum is kept beside the histogram.
const (
	latencyLowestUs  = 1
	latencyHighestUs = int64(time.Hour / time.Microsecond)
	latencyDigits    = 3
	// maxLatencyShards bounds the histograms of a run (about 190 KB each):
	// workers share them round-robin, each behind its own lock.
	maxLatencyShards = 16
)

// latencyRecorder keeps a run's call latencies in HDR histograms, one per
// shard of workers, merged at the end: memory stays constant however long
// the run, and workers of different shards never contend. Safe for
// concurrent use.
type latencyRecorder struct {
	shards []latencyShard
}

type latencyShard struct {
	mu  sync.Mutex
	h   *hdrhistogram.Histogram
	max time.Duration
	_   [64]byte // keeps neighbouring shards' locks off one cache line
}

// newLatencyRecorder returns a recorder for workers workers.
func newLatencyRecorder(workers int) *latencyRecorder {
	r := &latencyRecorder{shards: make([]latencyShard, max(1, min(workers, maxLatencyShards)))}
	for i := range r.shards {
		r.shards[i].h = hdrhistogram.New(latencyLowestUs, latencyHighestUs, latencyDigits)
	}
	return r
}

// record adds one latency seen by worker.
func (r *latencyRecorder) record(worker int, d time.Duration) {
	us := min(max(d.Microseconds(), 0), latencyHighestUs)
	s := &r.shards[worker%len(r.shards)]
	s.mu.Lock()
	_ = s.h.RecordValue(us) // within range: cannot fail
	s.max = max(s.max, d)
	s.mu.Unlock()
}

// count returns how many latencies were recorded.
func (r *latencyRecorder) count() int64 {
	var n int64
	for i := range r.shards {
		s := &r.shards[i]
		s.mu.Lock()
		n += s.h.TotalCount()
		s.mu.Unlock()
	}
	return n
}

// percentilesMs merges the shards and returns p50, p90, p99, p99.9 and max
// in milliseconds (the max exact, the others within the histogram's
// precision); an empty map when nothing was recorded.
func (r *latencyRecorder) percentilesMs() map[string]float64 {
	all := hdrhistogram.New(latencyLowestUs, latencyHighestUs, latencyDigits)
	var longest time.Duration
	for i := range r.shards {
		s := &r.shards[i]
		s.mu.Lock()
		all.Merge(s.h)
		longest = max(longest, s.max)
		s.mu.Unlock()
	}
	out := map[string]float64{}
	if all.TotalCount() == 0 {
		return out
	}
	out["max"] = float64(longest.Microseconds()) / 1000
	for name, p := range map[string]float64{"p50": 50, "p90": 90, "p99": 99, "p99.9": 99.9} {
		// The histogram answers the top of a value's bucket, which may
		// lie above the exact max: no percentile exceeds it.
		out[name] = min(float64(all.ValueAtPercentile(p))/1000, out["max"])
	}
	return out
}

// gapTracker finds the longest time between two consecutive successful
// answers of a run (a leader failing over shows as such a gap). Answers are
// stamped under its lock, so they are ordered as they are stamped. Safe for
// concurrent use.
type gapTracker struct {
	mu        sync.Mutex
	now       func() time.Time
	began     time.Time
	answers   int64
	last      time.Time // of the latest answer
	longest   time.Duration
	longestAt time.Duration // when the longest gap began, since began
}

// newGapTracker returns a tracker for a run that began now, reading the time
// from now (time.Now outside tests).
func newGapTracker(now func() time.Time) *gapTracker {
	return &gapTracker{now: now, began: now()}
}

// answered records a successful answer at the current time.
func (g *gapTracker) answered() {
	g.mu.Lock()
	defer g.mu.Unlock()
	t := g.now()
	g.answers++
	if g.answers > 1 {
		if gap := t.Sub(g.last); gap > g.longest {
			g.longest, g.longestAt = gap, g.last.Sub(g.began)
		}
	}
	g.last = t
}

// result returns the longest gap and when it began (since the run began);
// ok is false with fewer than two answers (no gap to measure).
func (g *gapTracker) result() (longest, at time.Duration, ok bool) {
	g.mu.Lock()
	defer g.mu.Unlock()
	return g.longest, g.longestAt, g.answers > 1
}
