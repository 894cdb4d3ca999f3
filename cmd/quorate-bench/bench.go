package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"sort"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"connectrpc.com/connect"
	"github.com/spf13/cobra"

	"github.com/quorate/quorate/cmd/internal/apiflags"
	"github.com/quorate/quorate/node"
)

// benchCallTimeout bounds one call of the load generator. Calls still in
// flight when --duration ends are waited for (up to this long), not
// cancelled, so the end of a run does not show up as errors.
const benchCallTimeout = 5 * time.Second

// Targets of `quorate-bench --target`.
const (
	targetQuorate    = "quorate"
	targetRedis      = "redis"
	targetGubernator = "gubernator"
)

// benchOptions are the flags of `quorate-bench`.
type benchOptions struct {
	target     string
	servers    string
	tls        apiflags.TLS // --tls-ca, --tls-cert, --tls-key
	policy     string
	requestIDs bool
	quorate    quorateOptions // --route, --coalesce
	redis      redisOptions
	load       loadOptions
	output     outputFormat
	floorDir   string // where to measure the floor; "": not measured
	// changed reports whether a flag was given on the command line (nil:
	// none was), so that a flag of the other target is refused.
	changed func(name string) bool
}

// loadOptions shape the load the generator sends, whatever the target.
type loadOptions struct {
	workers   int
	duration  time.Duration
	rate      int // calls started per second; 0: closed loop
	keys      int
	dist      string
	batch     int    // requests per call (AdmitBatch size, Redis pipeline depth)
	label     string // prefix of the progress lines
	keyPrefix string // of the key names; "" is "bench-"
}

func newBenchCmd() *cobra.Command {
	o := benchOptions{}
	cmd := &cobra.Command{
		Use: "quorate-bench --policy P [--workers 64] [--duration 10s] [--rate N] [--keys 10000] [--dist uniform|zipf] [--batch N]\n" +
			"  quorate-bench --target redis [--redis-addr 127.0.0.1:6379] [same load flags]",
		Short: "Load a cluster (or a Redis) with admissions and report throughput and latency",
		Long: "Bench sends Admit calls for --duration through the Go client (package client), on\n" +
			"--keys keys picked uniformly or by a zipf law (s=1.1: a few hot keys). Closed loop\n" +
			"by default: --workers each send the next call when the last one answers. With\n" +
			"--rate N it is open loop: N calls a second are started on schedule by up to\n" +
			"--workers at once, and latency counts from the scheduled start, so a stalled\n" +
			"cluster shows as latency rather than as fewer calls. With --batch N each call is\n" +
			"one AdmitBatch of N requests on independently drawn keys: throughput is reported\n" +
			"as calls/s and decisions/s (answered requests), latency per call, and requests\n" +
			"that got an error inside an answered batch are counted by code.\n" +
			"\n" +
			"The client sends each unary Admit to its key's group leader (--route leader, the\n" +
			"default) or to the --server list in turn (--route any: the node forwards it), as\n" +
			"one Admit call per decision; --coalesce lets it share AdmitBatch calls among the\n" +
			"Admits in flight to one leader. A failed attempt is retried with the same request\n" +
			"ID until the call's 5s deadline, so a failover shows as latency; a call still\n" +
			"failing then counts as an error by its code.\n" +
			"\n" +
			"--target redis drives a Redis instead, with the same generator: each request is\n" +
			"an EVALSHA of a token-bucket Lua script (loaded with SCRIPT LOAD; capacity\n" +
			"--redis-capacity, refill --redis-refill per second, Redis's own clock), and\n" +
			"--batch N pipelines N of them per call.\n" +
			"\n" +
			"It prints progress every second (to stderr), then throughput, answers, errors by\n" +
			"code, latency percentiles (from an HDR histogram: within 0.1%, the max exact) and\n" +
			"the longest gap between two answered calls (a leader failing over shows there);\n" +
			"-o json prints the summary as JSON. `quorate-bench\n" +
			"compare` runs Quorate, Redis and Gubernator side by side (see its help).",
		Example: "  quorate-bench --policy api-paid --workers 64 --duration 10s\n" +
			"  quorate-bench --policy api-paid --batch 100 --workers 16\n" +
			"  quorate-bench --policy api-paid --workers 1 --route any --server 127.0.0.1:7071\n" +
			"  quorate-bench --server 127.0.0.1:7070,127.0.0.1:7071 --policy api-paid --rate 2000 --dist zipf -o json\n" +
			"  quorate-bench --target redis --redis-addr 127.0.0.1:6379 --batch 16",
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			o.changed = cmd.Flags().Changed
			return runBench(cmd.Context(), o, cmd.OutOrStdout(), cmd.ErrOrStderr())
		},
	}
	var tokenFile string // calls take the token from the context
	apiflags.AddTokenFlag(cmd, &tokenFile)
	fs := cmd.Flags()
	fs.StringVar(&o.target, "target", targetQuorate, "what to load: quorate (a cluster, --server) or redis (--redis-addr)")
	fs.StringVar(&o.servers, "server", apiflags.DefaultServer, "API addresses of nodes, comma-separated: the client learns the cluster from them")
	apiflags.AddTLSFlags(fs, &o.tls)
	fs.StringVar(&o.policy, "policy", "", "policy to admit against (required with --target quorate)")
	fs.BoolVar(&o.requestIDs, "request-ids", false, "name every request's ID after the run and a sequence number (without it, the\n"+
		"client gives each a random one: every request carries a request ID)")
	fs.StringVar(&o.quorate.route, "route", routeLeader, "leader: send each call to its key's group leader (the client learns the shard map);\n"+
		"any: send the calls to the --server list in turn (the node forwards them);\n"+
		"plain: send unary Admits as a caller without the Go client does: to the --server list in\n"+
		"turn, not marked strict, without request IDs (unless --request-ids) and without the\n"+
		"client's grants (the node forwards them, or decides them from a grant it holds)")
	fs.BoolVar(&o.quorate.coalesce, "coalesce", false, "let the client coalesce concurrent unary Admits to one leader into AdmitBatch calls\n"+
		"(default off: one Admit call per decision)")
	addLoadFlags(cmd, &o.load)
	addRedisFlags(cmd, &o.redis)
	addOutputFlag(cmd, &o.output)
	fs.StringVar(&o.floorDir, "floor-dir", "", "a directory on the disk of the nodes' --data-dir: before the run, time 200 appends of\n"+
		"512 bytes + fdatasync there and 200 loopback round trips, and print the floor of one\n"+
		"client's latency (2 × fdatasync + round trip) beside the p50")
	cmd.AddCommand(newBenchCompareCmd())
	return cmd
}

// addLoadFlags registers the flags of the load generator on cmd.
func addLoadFlags(cmd *cobra.Command, o *loadOptions) {
	fs := cmd.Flags()
	fs.IntVar(&o.workers, "workers", 64, "concurrent calls at most (closed loop: always)")
	fs.DurationVar(&o.duration, "duration", 10*time.Second, "how long to send calls")
	fs.IntVar(&o.rate, "rate", 0, "calls started per second (open loop); 0: closed loop")
	fs.IntVar(&o.keys, "keys", 10000, "distinct keys")
	fs.StringVar(&o.dist, "dist", "uniform", "key distribution: uniform or zipf")
	fs.IntVar(&o.batch, "batch", 1, fmt.Sprintf("requests per call: 1 is a unary Admit, more is one AdmitBatch (at most %d);\n"+
		"with --target redis, the pipeline depth", node.MaxAdmitBatch))
}

// validate checks the load flags; errors name the flag.
func (o loadOptions) validate() error {
	switch {
	case o.workers < 1 || o.workers > 10000:
		return fmt.Errorf("--workers: must be between 1 and 10000 (got %d)", o.workers)
	case o.duration <= 0:
		return fmt.Errorf("--duration: must be positive (got %v)", o.duration)
	case o.rate < 0:
		return fmt.Errorf("--rate: must be 0 (closed loop) or positive (got %d)", o.rate)
	case o.rate > int(time.Second):
		return fmt.Errorf("--rate: must be at most %d calls a second (got %d)", int(time.Second), o.rate)
	case o.keys < 1:
		return fmt.Errorf("--keys: must be at least 1 (got %d)", o.keys)
	case o.dist != "uniform" && o.dist != "zipf":
		return fmt.Errorf("--dist: must be uniform or zipf (got %q)", o.dist)
	case o.batch < 1 || o.batch > node.MaxAdmitBatch:
		return fmt.Errorf("--batch: must be between 1 and %d (got %d)", node.MaxAdmitBatch, o.batch)
	}
	return nil
}

// validate checks every flag of bench, including that the flags of one
// target are not given with the other; errors name the flag.
func (o benchOptions) validate() error {
	if err := o.load.validate(); err != nil {
		return err
	}
	changed := o.changed
	if changed == nil {
		changed = func(string) bool { return false }
	}
	only := func(target string, flags ...string) error {
		for _, f := range flags {
			if changed(f) {
				return fmt.Errorf("--%s: only used with --target %s (got --target %s)", f, target, o.target)
			}
		}
		return nil
	}
	switch o.target {
	case targetQuorate:
		if o.policy == "" {
			return errors.New("bench: --policy is required (with --target quorate)")
		}
		if o.quorate.route != routeLeader && o.quorate.route != routeAny && o.quorate.route != routePlain {
			return fmt.Errorf("--route: must be %s, %s or %s (got %q)", routeLeader, routeAny, routePlain, o.quorate.route)
		}
		return only(targetRedis, "redis-addr", "redis-capacity", "redis-refill")
	case targetRedis:
		if err := only(targetQuorate, "server", "policy", "request-ids", "route", "coalesce"); err != nil {
			return err
		}
		return o.redis.validate()
	}
	return fmt.Errorf("--target: must be %s or %s (got %q)", targetQuorate, targetRedis, o.target)
}

// runBench checks the flags, connects to the target, runs the load and
// prints the summary.
func runBench(ctx context.Context, o benchOptions, stdout, stderr io.Writer) error {
	if err := o.validate(); err != nil {
		return err
	}
	var target benchTarget
	switch o.target {
	case targetQuorate:
		urls, err := apiflags.ServerURLs(o.tls.DefaultScheme(o.servers))
		if err != nil {
			return fmt.Errorf("--server: %w", err)
		}
		tr, err := o.tls.Transport(o.load.workers)
		if err != nil {
			return err
		}
		q := o.quorate
		q.token = apiflags.Token(ctx)
		t, err := newQuorateTarget(urls, tr, o.policy, o.requestIDs, q, o.load)
		if err != nil {
			return err
		}
		target = t
	case targetRedis:
		t, err := newRedisTarget(ctx, o.redis, o.load)
		if err != nil {
			return err
		}
		target = t
	}
	defer target.close()
	var floor *Floor
	if o.floorDir != "" {
		f, err := measureFloor(ctx, o.floorDir, floorSamples)
		if err != nil {
			return fmt.Errorf("--floor-dir: %w", err)
		}
		floor = &f
	}
	o.load.label = "quorate-bench"
	s := runLoad(ctx, target, o.load, stderr)
	if o.target == targetQuorate {
		s.Route = o.quorate.route
	}
	s.setFloor(floor)
	if o.output == outputJSON {
		enc := json.NewEncoder(stdout)
		enc.SetIndent("", "  ")
		return enc.Encode(s)
	}
	writeBenchSummary(stdout, s)
	return nil
}

// benchTarget is what the load generator drives. call decides one request
// per key in keys (indexes into the key space, len(keys) == the batch size)
// in one round trip: a unary call, a batch call or a pipeline. It returns
// what was decided, with the codes of requests that failed on their own; an
// error means the whole call failed. call is safe for concurrent use; worker
// (0 ≤ worker < workers) is never used by two calls at once, so a target may
// keep per-worker scratch space.
type benchTarget interface {
	name() string // "quorate" or "redis"
	call(ctx context.Context, worker int, keys []int) (benchResult, error)
	close() error
}

// benchResult is what one call decided.
type benchResult struct {
	allowed, denied int
	itemErrors      []string // codes of the requests that got an error
}

// benchErrorCoder is an error that knows its bench error code.
type benchErrorCoder interface{ benchCode() string }

// benchErrorCode names the kind of a failed call: a Connect code, or what a
// target's error says it is.
func benchErrorCode(err error) string {
	var ce *connect.Error
	if errors.As(err, &ce) {
		return ce.Code().String()
	}
	var bc benchErrorCoder
	if errors.As(err, &bc) {
		return bc.benchCode()
	}
	switch {
	case errors.Is(err, context.DeadlineExceeded):
		return connect.CodeDeadlineExceeded.String()
	case errors.Is(err, context.Canceled):
		return connect.CodeCanceled.String()
	}
	return connect.CodeUnknown.String()
}

// BenchSummary is what bench prints at the end. Calls count every call made,
// failed or not; decisions count the requests that were answered (allowed +
// denied), so with --batch N decisions = calls × N − requests of failed calls
// − item errors.
type BenchSummary struct {
	Target             string             `json:"target"`          // "quorate" or "redis"
	Route              string             `json:"route,omitempty"` // quorate: leader or any (--route)
	Mode               string             `json:"mode"`            // "closed" or "open"
	Workers            int                `json:"workers"`
	Rate               int                `json:"rate,omitempty"`
	Batch              int                `json:"batch"` // requests per call
	Keys               int                `json:"keys"`
	Dist               string             `json:"dist"`
	Seconds            float64            `json:"seconds"`
	Calls              int64              `json:"calls"`
	PerSecond          float64            `json:"perSecond"` // calls per second
	Decisions          int64              `json:"decisions"`
	DecisionsPerSecond float64            `json:"decisionsPerSecond"`
	Allowed            int64              `json:"allowed"`
	Denied             int64              `json:"denied"`
	Errors             map[string]int64   `json:"errors,omitempty"` // failed calls, by code
	ItemErrors         map[string]int64   `json:"itemErrors"`       // failed requests inside answered calls, by code
	LatencyMs          map[string]float64 `json:"latencyMs"`        // per call: p50, p90, p99, p99.9, max
	// LongestGapMs is the longest time between two consecutive answered
	// calls (answered: no error and at least one decision), and
	// LongestGapAtS when it began, in seconds since the run began; absent
	// with fewer than two answered calls.
	LongestGapMs  *float64 `json:"longestGapMs,omitempty"`
	LongestGapAtS *float64 `json:"longestGapAtS,omitempty"`
	// Floor is the floor of one call's latency measured in the same run
	// (--floor-dir), and P50OverFloor the p50 as a multiple of it.
	Floor        *Floor  `json:"floor,omitempty"`
	P50OverFloor float64 `json:"p50OverFloor,omitempty"`
	// NodeCPUSeconds is the CPU time each node's process spent during the
	// run (bench compare's clusters), and the decisions per CPU-second of
	// the busiest node and of all of them together.
	NodeCPUSeconds               []float64 `json:"nodeCpuSeconds,omitempty"`
	LogEntries                   int64     `json:"logEntries,omitempty"` // entries the groups' leaders proposed during the run
	DecisionsPerBusiestCPUSecond float64   `json:"decisionsPerBusiestCpuSecond,omitempty"`
	DecisionsPerCPUSecond        float64   `json:"decisionsPerCpuSecond,omitempty"`
}

// setCPU records the nodes' CPU over the run from their CPU times before
// and after it (nothing when either is unknown).
func (s *BenchSummary) setCPU(before, after []time.Duration) {
	if len(before) == 0 || len(before) != len(after) {
		return
	}
	var busiest, all float64
	s.NodeCPUSeconds = make([]float64, len(before))
	for i := range before {
		secs := (after[i] - before[i]).Seconds()
		s.NodeCPUSeconds[i] = secs
		busiest, all = max(busiest, secs), all+secs
	}
	if busiest > 0 {
		s.DecisionsPerBusiestCPUSecond = float64(s.Decisions) / busiest
		s.DecisionsPerCPUSecond = float64(s.Decisions) / all
	}
}

// setFloor records the floor measured beside the run, if any.
func (s *BenchSummary) setFloor(f *Floor) {
	s.Floor, s.P50OverFloor = f, f.ratio(s.LatencyMs["p50"])
}

// benchStats is what one worker saw; merged at the end. Latencies go to the
// run's latencyRecorder.
type benchStats struct {
	calls           int64
	allowed, denied int64
	errors          map[string]int64
	itemErrors      map[string]int64
}

func (s *benchStats) record(r benchResult, err error) {
	s.calls++
	if err != nil {
		s.errors[benchErrorCode(err)]++
		return
	}
	s.allowed += int64(r.allowed)
	s.denied += int64(r.denied)
	for _, code := range r.itemErrors {
		s.itemErrors[code]++
	}
}

// runLoad drives t with o's load until o.duration has passed and every call
// in flight has answered, printing progress to stderr every second, and
// returns the summary. It does not validate o.
func runLoad(ctx context.Context, t benchTarget, o loadOptions, stderr io.Writer) BenchSummary {
	runCtx, cancel := context.WithTimeout(ctx, o.duration)
	defer cancel()
	gaps := newGapTracker(time.Now)
	began := gaps.began
	lats := newLatencyRecorder(o.workers)
	var calls, decisions atomic.Int64
	stats := make([]*benchStats, o.workers)
	for i := range stats {
		stats[i] = &benchStats{errors: map[string]int64{}, itemErrors: map[string]int64{}}
	}
	// one makes one call for worker w on fresh keys, its latency counted
	// from scheduled.
	one := func(w int, pick func() int, keys []int, scheduled time.Time) {
		for i := range keys {
			keys[i] = pick()
		}
		cctx, ccancel := context.WithTimeout(context.WithoutCancel(ctx), benchCallTimeout)
		r, err := t.call(cctx, w, keys)
		ccancel()
		lats.record(w, time.Since(scheduled))
		stats[w].record(r, err)
		calls.Add(1)
		if n := r.allowed + r.denied; err == nil && n > 0 {
			gaps.answered()
			decisions.Add(int64(n))
		}
	}

	progressDone := make(chan struct{})
	go func() {
		defer close(progressDone)
		tick := time.NewTicker(time.Second)
		defer tick.Stop()
		var lastCalls, lastDecisions int64
		for {
			select {
			case <-runCtx.Done():
				return
			case <-tick.C:
				c, d := calls.Load(), decisions.Load()
				fmt.Fprintf(stderr, "%s: %5.0fs  %d calls/s", o.label, time.Since(began).Seconds(), c-lastCalls)
				if o.batch > 1 {
					fmt.Fprintf(stderr, "  %d decisions/s", d-lastDecisions)
				}
				fmt.Fprintf(stderr, "  (%d calls in all)\n", c)
				lastCalls, lastDecisions = c, d
			}
		}
	}()

	var wg sync.WaitGroup
	mode := "closed"
	if o.rate == 0 {
		for w := range o.workers {
			wg.Go(func() {
				pick, keys := keyPicker(o, w), make([]int, o.batch)
				for runCtx.Err() == nil {
					one(w, pick, keys, time.Now())
				}
			})
		}
	} else {
		// Open loop: the scheduler hands each call's start time to the
		// first idle worker; when all are busy it waits, and the calls it
		// then hands out late carry their scheduled time.
		mode = "open"
		starts := make(chan time.Time)
		for w := range o.workers {
			wg.Go(func() {
				pick, keys := keyPicker(o, w), make([]int, o.batch)
				for scheduled := range starts {
					one(w, pick, keys, scheduled)
				}
			})
		}
		interval := time.Second / time.Duration(o.rate)
	schedule:
		for next := began; runCtx.Err() == nil; next = next.Add(interval) {
			if d := time.Until(next); d > 0 && !sleepCtx(runCtx, d) {
				break
			}
			select {
			case starts <- next:
			case <-runCtx.Done():
				break schedule
			}
		}
		close(starts)
	}
	wg.Wait()
	cancel()
	<-progressDone
	return summarize(stats, lats, gaps, time.Since(began), mode, o, t.name())
}

// keyPicker returns a function drawing keys in [0, o.keys) by o.dist, seeded
// for worker w (not safe for concurrent use: one per worker).
func keyPicker(o loadOptions, w int) func() int {
	rng := rand.New(rand.NewPCG(uint64(time.Now().UnixNano()), uint64(w)))
	if o.dist == "zipf" && o.keys > 1 {
		z := rand.NewZipf(rng, 1.1, 1, uint64(o.keys-1))
		return func() int { return int(z.Uint64()) }
	}
	return func() int { return rng.IntN(o.keys) }
}

// summarize merges the workers' stats, latencies and answer gaps into the
// summary of a run against target.
func summarize(stats []*benchStats, lats *latencyRecorder, gaps *gapTracker, took time.Duration, mode string, o loadOptions, target string) BenchSummary {
	s := BenchSummary{Target: target, Mode: mode, Workers: o.workers, Rate: o.rate, Batch: o.batch, Keys: o.keys, Dist: o.dist,
		Seconds: took.Seconds(), Errors: map[string]int64{}, ItemErrors: map[string]int64{}, LatencyMs: lats.percentilesMs()}
	for _, st := range stats {
		s.Calls += st.calls
		s.Allowed += st.allowed
		s.Denied += st.denied
		for code, c := range st.errors {
			s.Errors[code] += c
		}
		for code, c := range st.itemErrors {
			s.ItemErrors[code] += c
		}
	}
	s.Decisions = s.Allowed + s.Denied
	if took > 0 {
		s.PerSecond = float64(s.Calls) / took.Seconds()
		s.DecisionsPerSecond = float64(s.Decisions) / took.Seconds()
	}
	if gap, at, ok := gaps.result(); ok {
		ms, secs := float64(gap.Microseconds())/1000, at.Seconds()
		s.LongestGapMs, s.LongestGapAtS = &ms, &secs
	}
	return s
}

// writeBenchSummary prints s for people.
func writeBenchSummary(w io.Writer, s BenchSummary) {
	fmt.Fprintf(w, "%s: %s loop, %d workers", s.Target, s.Mode, s.Workers)
	if s.Rate > 0 {
		fmt.Fprintf(w, ", %d calls/s scheduled", s.Rate)
	}
	fmt.Fprintf(w, ", %d %s keys", s.Keys, s.Dist)
	if s.Batch > 1 {
		fmt.Fprintf(w, ", %d requests per call", s.Batch)
	}
	fmt.Fprintf(w, ": %d calls in %.1fs = %.0f calls/s", s.Calls, s.Seconds, s.PerSecond)
	if s.Batch > 1 {
		fmt.Fprintf(w, ", %d decisions = %.0f decisions/s", s.Decisions, s.DecisionsPerSecond)
	}
	fmt.Fprintln(w)
	fmt.Fprintf(w, "answers: %d allowed, %d denied; failed calls: %s", s.Allowed, s.Denied, fmtCounts(s.Errors))
	if s.Batch > 1 {
		fmt.Fprintf(w, "; failed requests in answered calls: %s", fmtCounts(s.ItemErrors))
	}
	fmt.Fprintln(w)
	fmt.Fprintf(w, "latency ms per call: p50 %.2f  p90 %.2f  p99 %.2f  p99.9 %.2f  max %.2f\n",
		s.LatencyMs["p50"], s.LatencyMs["p90"], s.LatencyMs["p99"], s.LatencyMs["p99.9"], s.LatencyMs["max"])
	if s.Floor != nil {
		fmt.Fprintf(w, "floor of one call: %s; p50 is %.2f× the floor\n", *s.Floor, s.P50OverFloor)
	}
	if s.LongestGapMs != nil && s.LongestGapAtS != nil {
		fmt.Fprintf(w, "longest gap between answers: %.2f ms, from %.2fs into the run\n", *s.LongestGapMs, *s.LongestGapAtS)
	} else {
		fmt.Fprintln(w, "longest gap between answers: none measured (fewer than two answered calls)")
	}
}

// fmtCounts prints counts by code, sorted by code: "none" when empty.
func fmtCounts(m map[string]int64) string {
	if len(m) == 0 {
		return "none"
	}
	codes := make([]string, 0, len(m))
	for c := range m {
		codes = append(codes, c)
	}
	sort.Strings(codes)
	parts := make([]string, len(codes))
	for i, c := range codes {
		parts[i] = fmt.Sprintf("%s=%d", c, m[c])
	}
	return strings.Join(parts, " ")
}

// benchKeyNames returns the names of keys 0..n-1: prefix (default
// "bench-") and the number; the same for every target.
func benchKeyNames(prefix string, n int) []string {
	if prefix == "" {
		prefix = "bench-"
	}
	names := make([]string, n)
	for i := range names {
		names[i] = prefix + strconv.Itoa(i)
	}
	return names
}

// sleepCtx sleeps for d or until ctx ends; it reports whether it slept.
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
