package raftmux

import (
	"fmt"
	"io"
	"os"
	"runtime"
	"runtime/pprof"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/hashicorp/raft"
)

// The figures of this file compare raftmux with one raft.NetworkTransport
// per replica over plain TCP (3 pooled connections per peer, as Quorate
// configured it): idle CPU and heap for 64 and 256 groups × 3 replicas in
// one process (TestIdleFigures, run with QUORATE_RAFTMUX_FIGURES=1, without
// -race), and Apply throughput across 16 groups (BenchmarkApply16Groups).

// quorateRaftConfig is raft's configuration with Quorate's default timings.
func quorateRaftConfig(id int) *raft.Config {
	c := testRaftConfig(id)
	c.HeartbeatTimeout = time.Second
	c.ElectionTimeout = time.Second
	c.LeaderLeaseTimeout = 500 * time.Millisecond
	c.CommitTimeout = 500 * time.Millisecond
	c.MaxAppendEntries = 512
	return c
}

// benchCluster builds groups × 3 replicas over raftmux ("mux") or one
// NetworkTransport per replica ("net").
func benchCluster(tb testing.TB, groups int, kind string) [][]*replica {
	reps, _ := benchClusterHubs(tb, groups, kind)
	return reps
}

func benchClusterHubs(tb testing.TB, groups int, kind string) ([][]*replica, []*Hub) {
	reps := make([][]*replica, groups)
	trans := make([][]raft.Transport, groups)
	var hubs []*Hub
	var hubAddrs []raft.ServerAddress
	if kind == "mux" {
		n := newTestNet(tb)
		var opts Options
		if v := os.Getenv("QUORATE_RAFTMUX_LINGER"); v != "" {
			d, err := time.ParseDuration(v)
			if err != nil {
				tb.Fatal(err)
			}
			opts.Linger = d
		}
		if v := os.Getenv("QUORATE_RAFTMUX_INFLIGHT"); v != "" {
			if _, err := fmt.Sscan(v, &opts.MaxInFlight); err != nil {
				tb.Fatal(err)
			}
		}
		for range 3 {
			h, a := n.newHub(opts)
			hubs = append(hubs, h)
			hubAddrs = append(hubAddrs, a)
		}
	}
	for g := range groups {
		trans[g] = make([]raft.Transport, 3)
		for i := range 3 {
			if kind == "mux" {
				tr, err := hubs[i].Transport(uint32(g), hubAddrs[i])
				if err != nil {
					tb.Fatal(err)
				}
				trans[g][i] = tr
				continue
			}
			tr, err := raft.NewTCPTransport("127.0.0.1:0", nil, 3, 10*time.Second, io.Discard)
			if err != nil {
				tb.Fatal(err)
			}
			trans[g][i] = tr
		}
	}
	var mu sync.Mutex
	var wg sync.WaitGroup
	for g := range groups {
		var cfg raft.Configuration
		for i, tr := range trans[g] {
			cfg.Servers = append(cfg.Servers, raft.Server{ID: raft.ServerID(fmt.Sprintf("n%d", i)), Address: tr.LocalAddr()})
		}
		reps[g] = make([]*replica, 3)
		for i, tr := range trans[g] {
			wg.Add(1)
			go func() {
				defer wg.Done()
				c := quorateRaftConfig(i)
				store := raft.NewInmemStore()
				snaps := raft.NewInmemSnapshotStore()
				if err := raft.BootstrapCluster(c, store, store, snaps, tr, cfg); err != nil {
					tb.Error(err)
					return
				}
				fsm := &countFSM{}
				r, err := raft.NewRaft(c, fsm, store, store, snaps, tr)
				if err != nil {
					tb.Error(err)
					return
				}
				mu.Lock()
				reps[g][i] = &replica{r: r, fsm: fsm, trans: tr}
				mu.Unlock()
			}()
		}
	}
	wg.Wait()
	tb.Cleanup(func() {
		var wg sync.WaitGroup
		for _, g := range reps {
			for _, rep := range g {
				if rep == nil {
					continue
				}
				wg.Add(1)
				go func() {
					defer wg.Done()
					_ = rep.r.Shutdown().Error()
					if c, ok := rep.trans.(raft.WithClose); ok {
						_ = c.Close()
					}
				}()
			}
		}
		wg.Wait()
	})
	return reps, hubs
}

// leaders waits until every group has a leader and returns them.
func leaders(tb testing.TB, reps [][]*replica) []*replica {
	out := make([]*replica, len(reps))
	waitFor(tb, 5*time.Minute, "a leader in every group", func() bool {
		for g, rs := range reps {
			out[g] = nil
			for _, rep := range rs {
				if rep.r.State() == raft.Leader {
					out[g] = rep
				}
			}
			if out[g] == nil {
				return false
			}
		}
		return true
	})
	return out
}

func cpuTime() time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

func TestIdleFigures(t *testing.T) {
	only := os.Getenv("QUORATE_RAFTMUX_FIGURES")
	if only == "" {
		t.Skip("set QUORATE_RAFTMUX_FIGURES to all, or to one of net/64, mux/64, net/256, mux/256, to measure (without -race; one per process gives clean heap figures)")
	}
	window := 10 * time.Second
	for _, groups := range []int{64, 256} {
		for _, kind := range []string{"net", "mux"} {
			name := fmt.Sprintf("%s/%d", kind, groups)
			if only != "all" && only != name {
				continue
			}
			t.Run(name, func(t *testing.T) {
				reps, hubs := benchClusterHubs(t, groups, kind)
				leaders(t, reps)
				settle := time.NewTimer(3 * time.Second) // elections' aftermath
				<-settle.C
				leaders(t, reps)
				runtime.GC()
				var ms runtime.MemStats
				runtime.ReadMemStats(&ms)
				if p := os.Getenv("QUORATE_RAFTMUX_PROFILE"); p != "" {
					f, err := os.Create(p)
					if err != nil {
						t.Fatal(err)
					}
					defer f.Close()
					if err := pprof.StartCPUProfile(f); err != nil {
						t.Fatal(err)
					}
					defer pprof.StopCPUProfile()
				}
				start, c0 := time.Now(), cpuTime()
				var s0 []Stats
				for _, h := range hubs {
					s0 = append(s0, h.Stats())
				}
				tick := time.NewTimer(window)
				<-tick.C
				cpu, wall := cpuTime()-c0, time.Since(start)
				var frames, writes uint64
				for i, h := range hubs {
					s := h.Stats()
					frames += s.FramesSent - s0[i].FramesSent
					writes += s.Writes - s0[i].Writes
				}
				if len(hubs) > 0 {
					t.Logf("%d frames in %d writes (%.1f per write)", frames, writes, float64(frames)/float64(max(writes, 1)))
				}
				var ms2 runtime.MemStats
				runtime.ReadMemStats(&ms2)
				t.Logf("%s transport, %d groups × 3 replicas: idle CPU %.1f%% of a core (%v in %v), HeapInuse %d MiB after settling, %d MiB at the end, %d goroutines",
					kind, groups, 100*cpu.Seconds()/wall.Seconds(), cpu.Round(time.Millisecond), wall.Round(time.Millisecond),
					ms.HeapInuse>>20, ms2.HeapInuse>>20, runtime.NumGoroutine())
			})
		}
	}
}

// BenchmarkApply16Groups applies entries across 16 groups' leaders from
// 64 goroutines.
func BenchmarkApply16Groups(b *testing.B) {
	for _, kind := range []string{"net", "mux"} {
		b.Run(kind, func(b *testing.B) {
			reps, hubs := benchClusterHubs(b, 16, kind)
			ls := leaders(b, reps)
			var next atomic.Uint64
			b.SetParallelism(32) // 64 appliers on 2 CPUs
			b.ResetTimer()
			c0 := cpuTime()
			b.RunParallel(func(pb *testing.PB) {
				for pb.Next() {
					g := int(next.Add(1) % uint64(len(ls)))
					if err := ls[g].r.Apply([]byte("entry"), 10*time.Second).Error(); err != nil {
						b.Error(err)
						return
					}
				}
			})
			b.StopTimer()
			// CPU per Apply is steadier than wall time on a shared machine.
			b.ReportMetric(float64((cpuTime()-c0).Microseconds())/float64(b.N), "cpu-µs/op")
			if len(hubs) > 0 {
				// The share of inbound requests raft took from the reader
				// itself, with no lane goroutine in between. The hubs
				// received a response for every request they received.
				var direct, recv uint64
				for _, h := range hubs {
					s := h.Stats()
					direct += s.Direct
					recv += s.FramesReceived
				}
				b.ReportMetric(100*float64(direct)/float64(max(recv/2, 1)), "direct-%")
			}
		})
	}
}
