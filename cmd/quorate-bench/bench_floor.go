package main

// The floor of one client's latency, measured in the same run as the load:
// a decision is answered once the leader's log entry and a follower's are
// on disk (raft writes the leader's own log before it replicates, so the
// two fdatasyncs come one after the other) and the answer has come back
// over the network. The floor is 2 × the median fdatasync of a 512-byte
// append on the data directory's disk + the median loopback round trip to
// another process; a one-client p50 is reported as a ratio to it. Each
// timed fdatasync and round trip follows floorGap of quiet, as one
// client's next decision follows its last: the disk, the CPUs and the
// other process have gone idle meanwhile, and waking them is part of what
// the decision pays (on the machine of docs/BENCHMARKS.md an fdatasync
// after 1 ms of quiet takes ~0.29 ms against ~0.15 ms back to back, and a
// round trip to another process ~145 µs against ~10 µs).
//
// The same appends and round trips bound what a log entry costs in CPU:
// each of three replicas appends it and fdatasyncs, the leader sends it to
// each follower and reads its answer, and the kernel's work for those is
// CPU of the nodes' processes. The CPU of one append + fdatasync (user and
// system time of the thread that makes it) and of one round trip (both
// processes') are measured where the system can say (Linux), back to back
// as under load (waking from quiet costs CPU too: ~190 µs a round trip),
// and compare reports an entry's CPU beside three of the one and two of
// the other.

import (
	"context"
	"fmt"
	"io"
	"net"
	"os"
	"runtime"
	"slices"
	"time"
)

const (
	// floorSamples is how many fdatasyncs and round trips are timed.
	floorSamples = 200
	// floorAppendBytes is the size of each timed append: about one log
	// entry of a single decision.
	floorAppendBytes = 512
	// floorGap is the quiet before each timed fdatasync and round trip:
	// about one decision of one client.
	floorGap = time.Millisecond
)

// Floor is the measured floor of one client's decision latency.
type Floor struct {
	Dir         string  `json:"dir"`         // where the fdatasyncs ran: the nodes' data disk
	Samples     int     `json:"samples"`     // of each measurement
	FdatasyncMs float64 `json:"fdatasyncMs"` // median of a 512-byte append + fdatasync
	// FdatasyncCPUUs is the mean CPU (user + system) of one such append +
	// fdatasync, back to back, 0 where it cannot be read.
	FdatasyncCPUUs float64 `json:"fdatasyncCpuUs,omitempty"`
	RoundTripMs    float64 `json:"roundTripMs"` // median loopback TCP round trip of 64 bytes to another process
	// RoundTripCPUUs is the mean CPU of one such round trip, both ends,
	// back to back, 0 where it cannot be read.
	RoundTripCPUUs float64 `json:"roundTripCpuUs,omitempty"`
	FloorMs        float64 `json:"floorMs"` // 2 × FdatasyncMs + RoundTripMs
}

// String is the floor for people, with how it is made.
func (f Floor) String() string {
	s := fmt.Sprintf("%.3f ms = 2 × fdatasync %.3f ms + round trip to another process %.3f ms (medians of %d, each after %v of quiet, in %s)",
		f.FloorMs, f.FdatasyncMs, f.RoundTripMs, f.Samples, floorGap, f.Dir)
	if f.FdatasyncCPUUs > 0 {
		s += fmt.Sprintf("; back to back, an append + fdatasync takes %.0f µs of CPU", f.FdatasyncCPUUs)
	}
	if f.RoundTripCPUUs > 0 {
		s += fmt.Sprintf(", a round trip %.0f µs (both ends)", f.RoundTripCPUUs)
	}
	return s
}

// ratio is p50 over the floor, 0 when either is unknown.
func (f *Floor) ratio(p50Ms float64) float64 {
	if f == nil || f.FloorMs <= 0 {
		return 0
	}
	return p50Ms / f.FloorMs
}

// measureFloor times samples appends + fdatasyncs in a file of its own in
// dir (removed after) and samples loopback round trips to an echo process,
// each after floorGap of quiet, and the CPU of as many back to back.
func measureFloor(ctx context.Context, dir string, samples int) (Floor, error) {
	fsync, _, err := medianFdatasync(ctx, dir, samples, floorGap)
	if err != nil {
		return Floor{}, fmt.Errorf("floor: fdatasync in %s: %w", dir, err)
	}
	_, fsyncCPU, err := medianFdatasync(ctx, dir, samples, 0)
	if err != nil {
		return Floor{}, fmt.Errorf("floor: fdatasync in %s: %w", dir, err)
	}
	rtt, _, err := medianRoundTrip(ctx, samples, floorGap)
	if err != nil {
		return Floor{}, fmt.Errorf("floor: loopback round trip: %w", err)
	}
	_, rttCPU, err := medianRoundTrip(ctx, samples, 0)
	if err != nil {
		return Floor{}, fmt.Errorf("floor: loopback round trip: %w", err)
	}
	ms := func(d time.Duration) float64 { return float64(d.Nanoseconds()) / 1e6 }
	us := func(d time.Duration) float64 { return float64(d.Nanoseconds()) / 1e3 }
	return Floor{Dir: dir, Samples: samples, FdatasyncMs: ms(fsync), FdatasyncCPUUs: us(fsyncCPU),
		RoundTripMs: ms(rtt), RoundTripCPUUs: us(rttCPU), FloorMs: 2*ms(fsync) + ms(rtt)}, nil
}

// medianFdatasync appends floorAppendBytes to a new file in dir and
// fdatasyncs it, samples times gap apart, and returns the median time of
// one and the mean CPU of one (0 where threadCPU cannot read it).
func medianFdatasync(ctx context.Context, dir string, samples int, gap time.Duration) (med, cpu time.Duration, err error) {
	f, err := os.CreateTemp(dir, "quorate-bench-floor-*")
	if err != nil {
		return 0, 0, err
	}
	defer os.Remove(f.Name())
	defer f.Close()
	// One thread makes every append, so that its CPU time is theirs.
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	buf := make([]byte, floorAppendBytes)
	times := make([]time.Duration, 0, samples)
	cpu0, cpuOK := threadCPU()
	for range samples {
		if err := ctx.Err(); err != nil {
			return 0, 0, err
		}
		time.Sleep(gap)
		start := time.Now()
		if _, err := f.Write(buf); err != nil {
			return 0, 0, err
		}
		if err := fdatasync(f); err != nil {
			return 0, 0, err
		}
		times = append(times, time.Since(start))
	}
	if cpu1, ok := threadCPU(); ok && cpuOK && samples > 0 {
		cpu = (cpu1 - cpu0) / time.Duration(samples)
	}
	return median(times), cpu, nil
}

// medianRoundTrip sends 64 bytes to an echo process on loopback and waits
// for them back, samples times gap apart, and returns the median time of
// one and the mean CPU of one, both processes' (0 where selfCPU cannot read
// it).
func medianRoundTrip(ctx context.Context, samples int, gap time.Duration) (med, cpu time.Duration, err error) {
	echo, err := startEcho(ctx)
	if err != nil {
		return 0, 0, err
	}
	var d net.Dialer
	c, err := d.DialContext(ctx, "tcp", echo.addr)
	if err != nil {
		echo.kill()
		return 0, 0, err
	}
	if dl, ok := ctx.Deadline(); ok {
		_ = c.SetDeadline(dl)
	}
	buf := make([]byte, 64)
	times := make([]time.Duration, 0, samples)
	cpu0, cpuOK := selfCPU()
	for range samples {
		time.Sleep(gap)
		start := time.Now()
		if _, err = c.Write(buf); err != nil {
			break
		}
		if _, err = io.ReadFull(c, buf); err != nil {
			break
		}
		times = append(times, time.Since(start))
	}
	cpu1, cpuOK1 := selfCPU()
	_ = c.Close()
	echoCPU, echoErr := echo.finish()
	if err != nil {
		return 0, 0, err
	}
	if echoErr != nil {
		return 0, 0, echoErr
	}
	if cpuOK && cpuOK1 && echoCPU > 0 {
		cpu = (cpu1 - cpu0 + echoCPU) / time.Duration(samples)
	}
	return median(times), cpu, nil
}

// median of ds (sorted in place); 0 for none.
func median(ds []time.Duration) time.Duration {
	if len(ds) == 0 {
		return 0
	}
	slices.Sort(ds)
	return ds[len(ds)/2]
}
