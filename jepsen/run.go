package jepsen

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"time"
)

// Options configures Run.
type Options struct {
	ReportDir  string        // required; created if missing
	ModuleRoot string        // Quorate's module root; found from the working directory when empty
	Binary     string        // prebuilt binary; built when empty
	BuildTags  string        // -tags when building the binary (the planted-bug self-test)
	Nodes      int           // default 3
	Clients    int           // default 8
	Keys       int           // default 6; key i opens after i×Duration/Keys
	Capacity   int64         // tokens per key; default 100
	Duration   time.Duration // workload time; default 20s
	Seed       uint64        // nemesis and client seed; 0 means time-based
	Nemesis    NemesisOptions
}

// Report is Run's result.
type Report struct {
	Dir            string
	Seed           uint64
	Ops            []Op
	Faults         []Fault
	FinalRemaining map[string]int64
	Verdicts       []Verdict
	Counts         map[Outcome]int
}

// OK reports whether every checker passed.
func (r *Report) OK() bool {
	for _, v := range r.Verdicts {
		if !v.OK {
			return false
		}
	}
	return len(r.Verdicts) > 0
}

const policyName = "jepsen-bucket"

// Run starts a cluster, runs the token-bucket workload under the nemesis,
// heals, peeks, checks and writes the report directory.
func Run(ctx context.Context, opts Options) (*Report, error) {
	if opts.Clients == 0 {
		opts.Clients = 8
	}
	if opts.Keys == 0 {
		opts.Keys = 6
	}
	if opts.Capacity == 0 {
		opts.Capacity = 100
	}
	if opts.Duration == 0 {
		opts.Duration = 20 * time.Second
	}
	if opts.Seed == 0 {
		opts.Seed = uint64(time.Now().UnixNano())
	}
	opts.Nemesis.Seed = opts.Seed
	if err := os.MkdirAll(opts.ReportDir, 0o755); err != nil {
		return nil, err
	}
	if err := os.WriteFile(filepath.Join(opts.ReportDir, "seed"), fmt.Appendf(nil, "%d\n", opts.Seed), 0o644); err != nil {
		return nil, err
	}
	work, err := os.MkdirTemp("", "quorate-jepsen-")
	if err != nil {
		return nil, err
	}
	defer os.RemoveAll(work)
	c, err := StartCluster(ctx, ClusterOptions{Nodes: opts.Nodes, ModuleRoot: opts.ModuleRoot, Binary: opts.Binary,
		BuildTags: opts.BuildTags, WorkDir: work, LogDir: filepath.Join(opts.ReportDir, "logs")})
	if err != nil {
		return nil, err
	}
	defer c.Stop()

	actx, cancel := context.WithTimeout(ctx, 30*time.Second)
	err = ApplyTokenBucket(actx, c, policyName, opts.Capacity)
	cancel()
	if err != nil {
		return nil, err
	}
	keys := make([]string, opts.Keys)
	for i := range keys {
		keys[i] = fmt.Sprintf("key-%d", i)
	}

	h := &History{}
	nem := &Nemesis{}
	wctx, cancel := context.WithTimeout(ctx, opts.Duration)
	done := make(chan struct{})
	go func() { nem.Run(wctx, c, opts.Nemesis); close(done) }()
	RunWorkload(wctx, c, WorkloadOptions{Policy: policyName, Keys: keys, Clients: opts.Clients, Seed: opts.Seed,
		KeyEvery: opts.Duration / time.Duration(opts.Keys)}, h)
	<-done
	cancel()

	r := &Report{Dir: opts.ReportDir, Seed: opts.Seed, Ops: h.Ops(), Faults: nem.Faults(), Counts: map[Outcome]int{}}
	for _, op := range r.Ops {
		r.Counts[op.Outcome]++
	}
	if err := WriteJSONL(filepath.Join(opts.ReportDir, "history.jsonl"), r.Ops); err != nil {
		return r, err
	}
	var healErr error
	if healErr = c.Heal(); healErr == nil {
		healErr = c.WaitReady(ctx)
	}
	if healErr == nil {
		r.FinalRemaining, healErr = FinalPeek(ctx, c, policyName, keys)
	}
	r.Verdicts = []Verdict{
		CheckOverAdmission(r.Ops, opts.Capacity),
		CheckAtMostOnce(r.Ops),
		CheckDurability(r.Ops, opts.Capacity, r.FinalRemaining),
	}
	if err := os.WriteFile(filepath.Join(opts.ReportDir, "summary.txt"), []byte(r.Summary(healErr)), 0o644); err != nil {
		return r, err
	}
	return r, healErr
}

// Summary renders summary.txt.
func (r *Report) Summary(healErr error) string {
	var b strings.Builder
	fmt.Fprintf(&b, "seed: %d\n", r.Seed)
	fmt.Fprintf(&b, "attempts: %d (ok %d: allowed %d, denied %d; fail %d; unknown %d)\n", len(r.Ops),
		r.Counts[OutcomeAllowed]+r.Counts[OutcomeDenied], r.Counts[OutcomeAllowed], r.Counts[OutcomeDenied],
		r.Counts[OutcomeFail], r.Counts[OutcomeUnknown])
	fmt.Fprintf(&b, "faults: %d\n", len(r.Faults))
	for _, f := range r.Faults {
		fmt.Fprintf(&b, "  %s %-12s %s until %s %s\n", f.Node, f.Kind, f.Start.Format("15:04:05.000"), f.End.Format("15:04:05.000"), f.Error)
	}
	if healErr != nil {
		fmt.Fprintf(&b, "heal/final peek error: %v\n", healErr)
	}
	fmt.Fprintf(&b, "final remaining: %v\n", r.FinalRemaining)
	for _, v := range r.Verdicts {
		status := "PASS"
		if !v.OK {
			status = "FAIL"
		}
		fmt.Fprintf(&b, "%s %s: %s\n", status, v.Checker, v.Summary)
		for _, s := range v.Violations {
			fmt.Fprintf(&b, "  - %s\n", s)
		}
	}
	return b.String()
}
