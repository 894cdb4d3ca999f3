package main

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"math/rand/v2"
	"net/http"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"connectrpc.com/connect"
	"github.com/spf13/cobra"

	quoratev1 "github.com/quorate/quorate/proto/quorate/v1"
	"github.com/quorate/quorate/proto/quorate/v1/quoratev1connect"
)

// benchOptions are the flags of `quorate bench`.
type benchOptions struct {
	servers    string
	policy     string
	workers    int
	duration   time.Duration
	rate       int
	keys       int
	dist       string
	requestIDs bool
	output     outputFormat
}

func newBenchCmd() *cobra.Command {
	o := benchOptions{}
	cmd := &cobra.Command{
		Use:   "bench --policy P [--workers 64] [--duration 10s] [--rate N] [--keys 10000] [--dist uniform|zipf]",
		Short: "Load a cluster with Admit calls and report throughput and latency",
		Long: "Bench sends unary Admit calls for --duration, spread over the --server list, on\n" +
			"--keys keys picked uniformly or by a zipf law (s=1.1: a few hot keys). Closed loop\n" +
			"by default: --workers each send the next call when the last one answers. With\n" +
			"--rate N it is open loop: N calls a second are started on schedule by up to\n" +
			"--workers at once, and latency counts from the scheduled start, so a stalled\n" +
			"cluster shows as latency rather than as fewer calls. It prints progress every\n" +
			"second (to stderr), then throughput, answers, errors by code and latency\n" +
			"percentiles; -o json prints the summary as JSON.",
		Example: "  quorate bench --policy api-paid --workers 64 --duration 10s\n" +
			"  quorate bench --server 127.0.0.1:7070,127.0.0.1:7071 --policy api-paid --rate 2000 --dist zipf -o json",
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if err := requireFlags(cmd, "policy"); err != nil {
				return err
			}
			return runBench(cmd.Context(), o, cmd.OutOrStdout(), cmd.ErrOrStderr())
		},
	}
	fs := cmd.Flags()
	fs.StringVar(&o.servers, "server", defaultServer, "API addresses of nodes, comma-separated; calls rotate through them")
	fs.StringVar(&o.policy, "policy", "", "policy to admit against (required)")
	fs.IntVar(&o.workers, "workers", 64, "concurrent calls at most (closed loop: always)")
	fs.DurationVar(&o.duration, "duration", 10*time.Second, "how long to send calls")
	fs.IntVar(&o.rate, "rate", 0, "calls started per second (open loop); 0: closed loop")
	fs.IntVar(&o.keys, "keys", 10000, "distinct keys")
	fs.StringVar(&o.dist, "dist", "uniform", "key distribution: uniform or zipf")
	fs.BoolVar(&o.requestIDs, "request-ids", false, "give every call a fresh request ID (exactly-once bookkeeping on)")
	addOutputFlag(cmd, &o.output)
	return cmd
}

func (o benchOptions) validate() error {
	switch {
	case o.workers < 1 || o.workers > 10000:
		return fmt.Errorf("--workers: must be between 1 and 10000 (got %d)", o.workers)
	case o.duration <= 0:
		return fmt.Errorf("--duration: must be positive (got %v)", o.duration)
	case o.rate < 0:
		return fmt.Errorf("--rate: must be 0 (closed loop) or positive (got %d)", o.rate)
	case o.keys < 1:
		return fmt.Errorf("--keys: must be at least 1 (got %d)", o.keys)
	case o.dist != "uniform" && o.dist != "zipf":
		return fmt.Errorf("--dist: must be uniform or zipf (got %q)", o.dist)
	}
	return nil
}

// BenchSummary is what bench prints at the end.
type BenchSummary struct {
	Mode      string             `json:"mode"` // "closed" or "open"
	Workers   int                `json:"workers"`
	Rate      int                `json:"rate,omitempty"`
	Seconds   float64            `json:"seconds"`
	Calls     int64              `json:"calls"`
	PerSecond float64            `json:"per_second"`
	Allowed   int64              `json:"allowed"`
	Denied    int64              `json:"denied"`
	Errors    map[string]int64   `json:"errors,omitempty"` // by Connect code
	LatencyMs map[string]float64 `json:"latency_ms"`       // p50, p90, p99, p99.9, max
}

type benchCall struct {
	lat     time.Duration
	allowed bool
	code    string // "" when answered
}

func runBench(ctx context.Context, o benchOptions, stdout, stderr io.Writer) error {
	if err := o.validate(); err != nil {
		return err
	}
	urls, err := serverURLs(o.servers)
	if err != nil {
		return fmt.Errorf("--server: %w", err)
	}
	hc := &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: o.workers, MaxConnsPerHost: o.workers}}
	defer hc.CloseIdleConnections()
	clients := make([]quoratev1connect.AdmissionServiceClient, len(urls))
	for i, u := range urls {
		clients[i] = quoratev1connect.NewAdmissionServiceClient(hc, u)
	}
	ctx, cancel := context.WithTimeout(ctx, o.duration)
	defer cancel()

	began := time.Now()
	var (
		mu    sync.Mutex
		calls []benchCall
		done  atomic.Int64
		seq   atomic.Int64
	)
	record := func(c benchCall) {
		mu.Lock()
		calls = append(calls, c)
		mu.Unlock()
		done.Add(1)
	}
	call := func(key int, scheduled time.Time) {
		n := seq.Add(1)
		req := &quoratev1.AdmitRequest{Policy: o.policy, Key: fmt.Sprintf("bench-%d", key)}
		if o.requestIDs {
			req.Caller, req.RequestId = "quorate-bench", fmt.Sprintf("%d-%d", began.UnixNano(), n)
		}
		cctx, ccancel := context.WithTimeout(context.Background(), 5*time.Second)
		resp, err := clients[int(n)%len(clients)].Admit(cctx, connect.NewRequest(req))
		ccancel()
		c := benchCall{lat: time.Since(scheduled)}
		if err != nil {
			c.code = connect.CodeOf(err).String()
		} else {
			c.allowed = resp.Msg.GetAllowed()
		}
		record(c)
	}
	// keyPicker returns a function drawing keys by --dist (not safe for
	// concurrent use: one per goroutine).
	keyPicker := func(i int) func() int {
		rng := rand.New(rand.NewPCG(uint64(time.Now().UnixNano()), uint64(i)))
		if o.dist == "zipf" {
			z := rand.NewZipf(rng, 1.1, 1, uint64(o.keys-1))
			return func() int { return int(z.Uint64()) }
		}
		return func() int { return rng.IntN(o.keys) }
	}

	progressDone := make(chan struct{})
	go func() {
		defer close(progressDone)
		t := time.NewTicker(time.Second)
		defer t.Stop()
		last := int64(0)
		for {
			select {
			case <-ctx.Done():
				return
			case <-t.C:
				now := done.Load()
				fmt.Fprintf(stderr, "quorate bench: %5.0fs  %d calls/s  (%d in all)\n", time.Since(began).Seconds(), now-last, now)
				last = now
			}
		}
	}()
	var wg sync.WaitGroup
	mode := "closed"
	if o.rate == 0 {
		for i := range o.workers {
			wg.Go(func() {
				pick := keyPicker(i)
				for ctx.Err() == nil {
					call(pick(), time.Now())
				}
			})
		}
	} else {
		mode = "open"
		slots := make(chan struct{}, o.workers)
		pick := keyPicker(0)
		interval := time.Second / time.Duration(o.rate)
		for next := began; ctx.Err() == nil; next = next.Add(interval) {
			if d := time.Until(next); d > 0 && !sleepCtx(ctx, d) {
				break
			}
			select {
			case slots <- struct{}{}:
			case <-ctx.Done():
			}
			if ctx.Err() != nil {
				break
			}
			key, scheduled := pick(), next
			wg.Go(func() {
				defer func() { <-slots }()
				call(key, scheduled)
			})
		}
	}
	wg.Wait()
	<-progressDone
	s := summarize(calls, time.Since(began), mode, o)
	if o.output == outputJSON {
		enc := json.NewEncoder(stdout)
		enc.SetIndent("", "  ")
		return enc.Encode(s)
	}
	fmt.Fprintf(stdout, "%s loop, %d workers", s.Mode, s.Workers)
	if s.Rate > 0 {
		fmt.Fprintf(stdout, ", %d calls/s scheduled", s.Rate)
	}
	fmt.Fprintf(stdout, ": %d calls in %.1fs = %.0f calls/s\n", s.Calls, s.Seconds, s.PerSecond)
	fmt.Fprintf(stdout, "answers: %d allowed, %d denied; errors: %v\n", s.Allowed, s.Denied, s.Errors)
	fmt.Fprintf(stdout, "latency ms: p50 %.2f  p90 %.2f  p99 %.2f  p99.9 %.2f  max %.2f\n",
		s.LatencyMs["p50"], s.LatencyMs["p90"], s.LatencyMs["p99"], s.LatencyMs["p99.9"], s.LatencyMs["max"])
	return nil
}

func summarize(calls []benchCall, took time.Duration, mode string, o benchOptions) BenchSummary {
	s := BenchSummary{Mode: mode, Workers: o.workers, Rate: o.rate, Seconds: took.Seconds(), Calls: int64(len(calls)),
		Errors: map[string]int64{}, LatencyMs: map[string]float64{}}
	lats := make([]time.Duration, 0, len(calls))
	for _, c := range calls {
		switch {
		case c.code != "":
			s.Errors[c.code]++
		case c.allowed:
			s.Allowed++
		default:
			s.Denied++
		}
		lats = append(lats, c.lat)
	}
	if took > 0 {
		s.PerSecond = float64(len(calls)) / took.Seconds()
	}
	slices.Sort(lats)
	for name, q := range map[string]float64{"p50": 0.50, "p90": 0.90, "p99": 0.99, "p99.9": 0.999, "max": 1} {
		if len(lats) > 0 {
			i := min(len(lats)-1, int(q*float64(len(lats))))
			s.LatencyMs[name] = float64(lats[i].Microseconds()) / 1000
		}
	}
	return s
}

func sleepCtx(ctx context.Context, d time.Duration) bool {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return false
	case <-t.C:
		return true
	}
}
