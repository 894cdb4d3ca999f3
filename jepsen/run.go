package jepsen

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"time"

	quoratev1 "github.com/quorate/quorate/proto/quorate/v1"
)

// Workloads Run knows. Run drives every selected workload at once, each on
// its own policy and keys, against one cluster under one nemesis.
const (
	WorkloadTokenBucket = "token-bucket" // admits on token buckets that never refill within a run: admitted ≤ capacity per key
	WorkloadFixedWindow = "fixed-window" // admits on fixed windows: admitted ≤ limit per key and window
	WorkloadLease       = "lease"        // acquire/renew/check/release of concurrency leases with fencing tokens
	WorkloadGrant       = "grant"        // budget-leasing clients (killed and paused) beside strict ones on fixed windows: admitted ≤ limit per key and window
	WorkloadGrantSync   = "grant-sync"   // the same with local-plus-global (sync) clients: admitted ≤ limit + the policy's bound per key and window
	WorkloadGrantBucket = "grant-bucket" // budget-leasing clients beside strict ones on token buckets that never refill within a run, a fresh key opening every Duration/Keys: admitted ≤ the grant limit per key
)

// Workloads lists the workloads Run knows.
var Workloads = []string{WorkloadTokenBucket, WorkloadFixedWindow, WorkloadLease, WorkloadGrant, WorkloadGrantSync, WorkloadGrantBucket}

// ParseWorkloads parses a comma-separated list of workloads ("all" = every one).
func ParseWorkloads(s string) ([]string, error) {
	return parseList(s, "workload", Workloads, "all", "")
}

// Options configures Run.
type Options struct {
	ReportDir  string        // required; created if missing
	ModuleRoot string        // Quorate's module root; found from the working directory when empty
	Binary     string        // prebuilt binary; built when empty
	BuildTags  string        // -tags when building the binary (the planted-bug self-tests)
	Nodes      int           // default 3
	Workloads  []string      // default: all
	Clients    int           // clients per workload; default 6
	Keys       int           // token-bucket and grant-bucket keys, key i opening after i×Duration/Keys; default 6 (the other workloads use 3)
	Capacity   int64         // token-bucket: tokens per key; default 100
	Limit      int64         // fixed-window: units per window; default 20
	Window     time.Duration // fixed-window: window length (whole seconds); default 2s
	Holders    int64         // lease: leases per key; default 2
	LeaseTTL   time.Duration // lease: TTL asked on acquire and renew; default 2s
	GrantLimit int64         // grant: units per key and 1 s window (grants of at most a fifth of it); default 200
	Duration   time.Duration // workload time; default 20s
	Seed       uint64        // nemesis and client seed; 0 means time-based
	Net        string        // network fault mechanism: "" (auto), "nftables" or "proxy"
	Groups     int           // data groups (quorate serve --groups); 0: every key in the meta group
	// Scale runs the scale scenario (Nemesis.Scale) beside the nemesis:
	// Nodes → Nodes+ScaleNodes → Nodes members, on data groups (Groups;
	// default 4). The workloads then run for Duration and at least until 2 s
	// after the scenario ended.
	Scale bool
	// TLS runs the cluster with TLS on both ports of every node
	// (ClusterOptions.TLS) and adds the "tls" verdict (CheckTLS).
	TLS bool
	// Upgrade runs the rolling upgrade scenario (Nemesis.Upgrade) beside
	// the nemesis: the cluster starts on Binary (the old one) and each
	// node moves to Upgrade.Binary in turn; adds the "upgrade" verdict.
	// The workloads run for Duration and at least until 2 s after it.
	Upgrade *UpgradeOptions
	// Recovery runs the recovery scenario (Nemesis.Recover), without
	// faults, on a cluster of 3: two nodes lost for good, the survivor
	// recovered with `quorate admin recover`, two new nodes joined; adds
	// the "recovery" verdict. The workloads run for Duration and at least
	// until 2 s after it.
	Recovery bool
	Nemesis  NemesisOptions
}

// scaleTail is how long the workloads go on after the scale scenario.
const scaleTail = 2 * time.Second

func (o *Options) defaults() error {
	if len(o.Workloads) == 0 {
		o.Workloads = Workloads
	}
	for _, w := range o.Workloads {
		if !slices.Contains(Workloads, w) {
			return fmt.Errorf("jepsen: unknown workload %q (want one of %s)", w, strings.Join(Workloads, ", "))
		}
	}
	setDefault(&o.Clients, 6)
	setDefault(&o.Keys, 6)
	setDefault(&o.Capacity, 100)
	setDefault(&o.Limit, 20)
	setDefault(&o.Window, 2*time.Second)
	setDefault(&o.Holders, 2)
	setDefault(&o.LeaseTTL, 2*time.Second)
	setDefault(&o.GrantLimit, 200)
	setDefault(&o.Duration, 20*time.Second)
	setDefault(&o.Seed, uint64(time.Now().UnixNano()))
	scenarios := 0
	for _, on := range []bool{o.Scale, o.Upgrade != nil, o.Recovery} {
		if on {
			scenarios++
		}
	}
	if scenarios > 1 {
		return errors.New("jepsen: Scale, Upgrade and Recovery are scenarios of their own: choose one")
	}
	if o.Recovery && o.Nodes != 0 && o.Nodes != 3 {
		return fmt.Errorf("jepsen: the recovery scenario runs on 3 nodes, not %d", o.Nodes)
	}
	if o.Recovery && len(o.Nemesis.Families) > 0 {
		// A fault beside it could hit the survivor while it alone holds the data.
		return errors.New("jepsen: the recovery scenario runs without faults (--faults none)")
	}
	if o.Upgrade != nil && (o.Binary == "" || o.Upgrade.Binary == "") {
		return errors.New("jepsen: the upgrade scenario needs the old binary (Binary) and the new one (Upgrade.Binary)")
	}
	if o.Scale {
		setDefault(&o.Groups, 4)
	}
	o.Nemesis.Seed = o.Seed
	return nil
}

func setDefault[T comparable](p *T, v T) {
	var zero T
	if *p == zero {
		*p = v
	}
}

// Report is Run's result.
type Report struct {
	Options        Options // as run, defaults filled in
	Dir            string
	Seed           uint64
	Workloads      []string
	Families       []string
	NetMode        string
	Ops            []Op
	Faults         []Fault
	FinalRemaining map[string]int64 // token-bucket keys after healing
	Verdicts       []Verdict
	Counts         map[Outcome]int
	Timelines      []string    // porcupine HTML files, relative to Dir
	Members        []string    // the members at the end
	Grant          *GrantStats // the grant workload's client counts; nil without it
	GrantSync      *GrantStats // the grant-sync workload's; nil without it
	GrantBucket    *GrantStats // the grant-bucket workload's; nil without it
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

// Policy names, one per workload.
const (
	policyTokenBucket = "jepsen-bucket"
	policyFixedWindow = "jepsen-window"
	policyLease       = "jepsen-lease"
	policyGrant       = "jepsen-grant"
	policyGrantSync   = "jepsen-grant-sync"
	policyGrantBucket = "jepsen-grant-bucket"
	// The grant workload's Envoy domain (grantEnvoyConfig) and the policy
	// its descriptor makes.
	grantEnvoyDomain = "jepsen-grant"
	policyGrantEnvoy = "envoy.jepsen-grant.key"
)

// grantEnvoyConfig is the nodes' Envoy configuration for the grant
// workload's Envoy callers: one domain whose descriptor "key" counts as
// GrantPolicy does (limit per grantWindow, fixed and aligned to the
// epoch), with the same local block.
func grantEnvoyConfig(limit int64) string {
	return fmt.Sprintf(`domain: %s
local: {mode: grant, max_grant: %d, ttl: %s}
descriptors:
  - key: %s
    rate_limit: {unit: second, requests_per_unit: %d}
`, grantEnvoyDomain, max(limit/5, 1), grantTTL, envoyDescriptorKey, limit)
}

// Run starts a cluster, runs the workloads under the nemesis, heals, reads
// the final state, checks the history and writes the report directory:
// summary.txt, index.html, timelines/ (porcupine), history.jsonl, seed, logs/.
func Run(ctx context.Context, opts Options) (*Report, error) {
	if err := opts.defaults(); err != nil {
		return nil, err
	}
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
	spare := 0
	switch {
	case opts.Scale:
		spare = ScaleNodes
	case opts.Recovery:
		spare = RecoverySpare
	}
	has := func(w string) bool { return slices.Contains(opts.Workloads, w) }
	extra := groupArgs(opts.Groups, opts.Nodes)
	if has(WorkloadGrant) {
		// The grant workload's Envoy callers' domain.
		file := filepath.Join(work, "envoy.yaml")
		if err := os.WriteFile(file, []byte(grantEnvoyConfig(opts.GrantLimit)), 0o600); err != nil {
			return nil, err
		}
		extra = append(extra, "--envoy-config", file)
	}
	c, err := StartCluster(ctx, ClusterOptions{Nodes: opts.Nodes, ModuleRoot: opts.ModuleRoot, Binary: opts.Binary,
		BuildTags: opts.BuildTags, WorkDir: work, LogDir: filepath.Join(opts.ReportDir, "logs"), Net: opts.Net,
		ExtraArgs: extra, Spare: spare, TLS: opts.TLS})
	if err != nil {
		return nil, err
	}
	defer c.Stop()

	actx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	for _, p := range []struct {
		w string
		p *quoratev1.Policy
	}{
		{WorkloadTokenBucket, TokenBucketPolicy(policyTokenBucket, opts.Capacity)},
		{WorkloadFixedWindow, FixedWindowPolicy(policyFixedWindow, opts.Limit, opts.Window)},
		{WorkloadLease, ConcurrencyPolicy(policyLease, opts.Holders, opts.LeaseTTL)},
		{WorkloadGrant, GrantPolicy(policyGrant, opts.GrantLimit, grantWindow, grantTTL)},
		{WorkloadGrantSync, GrantSyncPolicy(policyGrantSync, opts.GrantLimit, grantWindow, grantSyncInterval)},
		{WorkloadGrantBucket, GrantBucketPolicy(policyGrantBucket, opts.GrantLimit, grantTTL)},
	} {
		if has(p.w) {
			if err := ApplyPolicy(actx, c, p.p); err != nil {
				return nil, err
			}
		}
	}
	bucketKeys := keyNames("bucket", opts.Keys)
	windowKeys, leaseKeys, grantKeys := keyNames("window", 3), keyNames("lease", 3), keyNames("grant", 3)
	syncKeys, gbucketKeys := keyNames("gsync", 3), keyNames("gbucket", opts.Keys)
	// The grant workloads' plain callers admit on keys of their own (the
	// nodes' grants beside the clients' would keep the clients' windows
	// from filling).
	grantPlain, syncPlain, gbucketPlain := keyNames("grant-plain", 3), keyNames("gsync-plain", 3), keyNames("gbucket-plain", 3)
	grantEnvoy := make([]string, len(grantPlain))
	for i, v := range grantPlain {
		grantEnvoy[i] = EnvoyKey(grantEnvoyDomain, envoyDescriptorKey, v)
	}
	nemOpts := opts.Nemesis
	for _, w := range []struct {
		w    string
		keys []string
	}{{WorkloadTokenBucket, bucketKeys}, {WorkloadFixedWindow, windowKeys}, {WorkloadLease, leaseKeys},
		{WorkloadGrant, slices.Concat(grantKeys, grantPlain, grantEnvoy)}, {WorkloadGrantSync, append(syncKeys, syncPlain...)},
		{WorkloadGrantBucket, append(gbucketKeys, gbucketPlain...)}} {
		if has(w.w) {
			nemOpts.Keys = append(nemOpts.Keys, w.keys...)
		}
	}

	h := &History{}
	nem := &Nemesis{}
	wctx, cancel := context.WithCancel(ctx)
	defer cancel()
	var wg sync.WaitGroup
	var scenarioErr error
	scaled := make(chan struct{})
	scenario := opts.scenario(nem, c)
	if scenario != nil {
		wg.Go(func() {
			defer close(scaled)
			scenarioErr = scenario(ctx)
		})
	} else {
		close(scaled)
	}
	began := time.Now()
	go func() { // the workloads' end: Duration, and scaleTail after a scenario
		defer cancel()
		select {
		case <-scaled:
		case <-wctx.Done():
			return
		}
		end := began.Add(opts.Duration)
		if scenario != nil {
			end = later(end, time.Now().Add(scaleTail))
		}
		sleepCtx(wctx, time.Until(end))
	}()
	wg.Go(func() { nem.Run(wctx, c, nemOpts) })
	var bucketErr, windowErr, leaseErr, grantErr error
	var grantStats, syncStats, gbucketStats GrantStats
	var syncErr, gbucketErr error
	if has(WorkloadTokenBucket) {
		wg.Go(func() {
			bucketErr = RunWorkload(wctx, c, WorkloadOptions{Policy: policyTokenBucket, Keys: bucketKeys, Clients: opts.Clients,
				Seed: opts.Seed, KeyEvery: opts.Duration / time.Duration(opts.Keys)}, h)
		})
	}
	if has(WorkloadFixedWindow) {
		wg.Go(func() {
			windowErr = RunWorkload(wctx, c, WorkloadOptions{Policy: policyFixedWindow, Keys: windowKeys, Clients: opts.Clients,
				Seed: opts.Seed ^ 0xf1, ClientBase: 100}, h)
		})
	}
	if has(WorkloadLease) {
		wg.Go(func() {
			leaseErr = RunLeaseWorkload(wctx, c, LeaseWorkloadOptions{Policy: policyLease, Keys: leaseKeys, Clients: opts.Clients,
				Seed: opts.Seed, TTL: opts.LeaseTTL, ClientBase: 200}, h)
		})
	}
	if has(WorkloadGrant) {
		wg.Go(func() {
			grantStats, grantErr = RunGrantWorkload(wctx, c, GrantWorkloadOptions{Policy: policyGrant, Keys: grantKeys, PlainKeys: grantPlain,
				EnvoyDomain: grantEnvoyDomain, EnvoyPolicy: policyGrantEnvoy, Seed: opts.Seed ^ 0x9a, ClientBase: 300}, h, nem.record)
		})
	}
	if has(WorkloadGrantSync) {
		wg.Go(func() {
			syncStats, syncErr = RunGrantWorkload(wctx, c, GrantWorkloadOptions{Policy: policyGrantSync, Keys: syncKeys, PlainKeys: syncPlain,
				Seed: opts.Seed ^ 0x5c, ClientBase: 400}, h, nem.record)
		})
	}
	if has(WorkloadGrantBucket) {
		wg.Go(func() {
			gbucketStats, gbucketErr = RunGrantWorkload(wctx, c, GrantWorkloadOptions{Policy: policyGrantBucket, Keys: gbucketKeys, PlainKeys: gbucketPlain,
				Seed: opts.Seed ^ 0xb7, ClientBase: 500, KeyEvery: opts.Duration / time.Duration(opts.Keys)}, h, nem.record)
		})
	}
	wg.Wait()
	if err := errors.Join(bucketErr, windowErr, leaseErr, grantErr, syncErr, gbucketErr); err != nil {
		return nil, err
	}

	r := &Report{Options: opts, Dir: opts.ReportDir, Seed: opts.Seed, Workloads: opts.Workloads, Families: opts.Nemesis.Families,
		NetMode: c.NetMode(), Ops: h.Ops(), Faults: nem.Faults(), Counts: map[Outcome]int{}}
	// In start order (the scale scenario records beside the nemesis).
	slices.SortStableFunc(r.Faults, func(a, b Fault) int { return a.Start.Compare(b.Start) })
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
	r.Verdicts = []Verdict{CheckAtMostOnce(r.Ops)}
	var lins []*LinearResult
	if has(WorkloadTokenBucket) {
		if healErr == nil {
			r.FinalRemaining, healErr = FinalPeek(ctx, c, policyTokenBucket, bucketKeys)
		}
		ops := opsOf(r.Ops, policyTokenBucket)
		v, lin := CheckLinearizable(ops, LinearSpec{Algorithm: "token_bucket", Capacity: opts.Capacity})
		lins = append(lins, lin)
		r.Verdicts = append(r.Verdicts, CheckOverAdmission(ops, opts.Capacity), named(v, WorkloadTokenBucket),
			CheckDurability(ops, opts.Capacity, r.FinalRemaining))
	}
	if has(WorkloadFixedWindow) {
		ops := opsOf(r.Ops, policyFixedWindow)
		v, lin := CheckLinearizable(ops, LinearSpec{Algorithm: "fixed_window", Limit: opts.Limit, Window: opts.Window})
		lins = append(lins, lin)
		r.Verdicts = append(r.Verdicts, CheckFixedWindow(ops, opts.Limit, opts.Window), named(v, WorkloadFixedWindow))
	}
	if has(WorkloadLease) {
		r.Verdicts = append(r.Verdicts, CheckLeases(opsOf(r.Ops, policyLease), opts.Holders))
	}
	if has(WorkloadGrant) {
		r.Grant = &grantStats
		r.Verdicts = append(r.Verdicts, CheckGrants(opsOf(r.Ops, policyGrant, policyGrantEnvoy), opts.GrantLimit, grantWindow, grantStats)...)
	}
	if has(WorkloadGrantSync) {
		r.GrantSync = &syncStats
		bound := GrantSyncBound(opts.GrantLimit, grantWindow, grantSyncInterval)
		r.Verdicts = append(r.Verdicts, CheckGrantSync(opsOf(r.Ops, policyGrantSync), opts.GrantLimit, bound, grantWindow, syncStats)...)
	}
	if has(WorkloadGrantBucket) {
		r.GrantBucket = &gbucketStats
		r.Verdicts = append(r.Verdicts, CheckGrantBucket(opsOf(r.Ops, policyGrantBucket), opts.GrantLimit, gbucketStats)...)
	}
	if has(WorkloadGrant) || has(WorkloadGrantSync) || has(WorkloadGrantBucket) {
		r.Verdicts = append(r.Verdicts, CheckNodeGrants(ctx, c))
	}
	if opts.Groups > 0 {
		r.Verdicts = append(r.Verdicts, CheckGroupReplicas(ctx, c, 30*time.Second))
	}
	switch {
	case opts.Scale:
		r.Verdicts = append(r.Verdicts, checkScale(ctx, c, opts.Nodes, scenarioErr))
	case opts.Upgrade != nil:
		r.Verdicts = append(r.Verdicts, checkUpgrade(ctx, c, *opts.Upgrade, scenarioErr))
	case opts.Recovery:
		r.Verdicts = append(r.Verdicts, checkRecovery(ctx, c, scenarioErr))
	}
	if opts.TLS {
		r.Verdicts = append(r.Verdicts, CheckTLS(ctx, c))
	}
	r.Members = c.LiveIDs()
	var errs []error
	for _, lin := range lins {
		if lin == nil {
			continue
		}
		files, err := WriteLinearHTML(filepath.Join(opts.ReportDir, "timelines"), lin, r.Faults, !r.OK())
		errs = append(errs, err)
		for _, f := range files {
			if rel, err := filepath.Rel(opts.ReportDir, f); err == nil {
				f = rel
			}
			r.Timelines = append(r.Timelines, f)
		}
	}
	summary := r.Summary(healErr)
	errs = append(errs,
		os.WriteFile(filepath.Join(opts.ReportDir, "summary.txt"), []byte(summary), 0o644),
		r.WriteHTML(filepath.Join(opts.ReportDir, "index.html"), summary, healErr))
	if err := errors.Join(errs...); err != nil {
		return r, err
	}
	return r, healErr
}

// scenario is the scenario the options run beside the nemesis (at most
// one: Scale, Upgrade or Recovery), nil for none.
func (o *Options) scenario(nem *Nemesis, c *Cluster) func(context.Context) error {
	switch {
	case o.Scale:
		return func(ctx context.Context) error { return nem.Scale(ctx, c, o.Seed) }
	case o.Upgrade != nil:
		return func(ctx context.Context) error { return nem.Upgrade(ctx, c, *o.Upgrade) }
	case o.Recovery:
		return func(ctx context.Context) error { return nem.Recover(ctx, c, o.Seed) }
	}
	return nil
}

// groupArgs are the serve flags for groups data groups over nodes nodes.
func groupArgs(groups, nodes int) []string {
	if groups == 0 {
		return nil
	}
	return []string{"--groups", fmt.Sprint(groups), "--expect-nodes", fmt.Sprint(max(nodes, 3))}
}

func keyNames(prefix string, n int) []string {
	keys := make([]string, n)
	for i := range keys {
		keys[i] = fmt.Sprintf("%s-%d", prefix, i)
	}
	return keys
}

// opsOf returns the ops on one policy.
func opsOf(ops []Op, policies ...string) []Op {
	var out []Op
	for _, op := range ops {
		if slices.Contains(policies, op.Policy) {
			out = append(out, op)
		}
	}
	return out
}

// named prefixes a verdict's checker name with its workload.
func named(v Verdict, workload string) Verdict {
	v.Checker = workload + "/" + v.Checker
	return v
}

// Summary renders summary.txt: a first line PASS or FAIL with its reason
// (Outcome), the command that reproduces the run, the run's facts, the
// fault families that ran with their counts, every fault, and each
// checker's verdict.
func (r *Report) Summary(healErr error) string {
	var b strings.Builder
	ok, reason := r.Outcome(healErr)
	status := "PASS"
	if !ok {
		status = "FAIL"
	}
	fmt.Fprintf(&b, "%s: %s\nreproduce: %s\n", status, reason, ReproduceCommand(r.Options))
	fmt.Fprintf(&b, "seed: %d\nworkloads: %s\nfault families: %s (network faults via %s)\ndata groups: %d\n", r.Seed,
		strings.Join(r.Workloads, ", "), familiesArg(r.Families), r.NetMode, max(r.Options.Groups, 1))
	if r.Options.TLS {
		fmt.Fprintf(&b, "TLS: both ports of every node, a throwaway CA\n")
	}
	fmt.Fprintf(&b, "ops: %d (ok %d: allowed %d, denied %d; fail %d; unknown %d)\n", len(r.Ops),
		r.Counts[OutcomeAllowed]+r.Counts[OutcomeDenied], r.Counts[OutcomeAllowed], r.Counts[OutcomeDenied],
		r.Counts[OutcomeFail], r.Counts[OutcomeUnknown])
	perKind := map[OpKind]int{}
	for _, op := range r.Ops {
		perKind[op.Kind]++
	}
	fmt.Fprintf(&b, "by call: admit %d, acquire %d, renew %d, check %d, release %d\n",
		perKind[KindAdmit], perKind[KindAcquire], perKind[KindRenew], perKind[KindCheck], perKind[KindRelease])
	fmt.Fprintf(&b, "faults: %d (%s)\n", len(r.Faults), faultCounts(r.Faults))
	if fams := FaultFamilies(r.Faults); len(fams) > 0 {
		fmt.Fprintf(&b, "fault families that ran:\n  %-10s %5s %6s %9s  %s\n", "family", "count", "errors", "time", "kinds")
		for _, c := range fams {
			fmt.Fprintf(&b, "  %-12s %5d %6d %9s  %s\n", c.Family, c.Count, c.Errors, c.Total.Round(10*time.Millisecond), c.KindsString())
		}
		fmt.Fprintf(&b, "faults in order:\n")
	}
	for _, f := range r.Faults {
		fmt.Fprintf(&b, "  %-30s %-16s %s until %s %s\n", f.Kind, f.Node, f.Start.Format("15:04:05.000"), f.End.Format("15:04:05.000"), f.Error)
		if f.Plan != nil {
			fmt.Fprintf(&b, "  %-30s %s\n", "", f.Plan)
		}
	}
	if s := PlanTotals(r.Faults); s.Plans > 0 {
		fmt.Fprintf(&b, "plans: %s\n", s)
	}
	if r.Options.Scale || r.Options.Recovery || len(r.Members) != max(r.Options.Nodes, 3) {
		fmt.Fprintf(&b, "members at the end: %s\n", strings.Join(r.Members, " "))
	}
	if healErr != nil {
		fmt.Fprintf(&b, "heal/final peek error: %v\n", healErr)
	}
	if r.FinalRemaining != nil {
		fmt.Fprintf(&b, "final remaining: %v\n", r.FinalRemaining)
	}
	for _, v := range r.Verdicts {
		status := "PASS"
		if !v.OK {
			status = "FAIL"
		}
		fmt.Fprintf(&b, "%s %s: %s\n", status, v.Checker, v.Summary)
		for i, s := range v.Violations {
			if i == 20 {
				fmt.Fprintf(&b, "  … %d more\n", len(v.Violations)-i)
				break
			}
			fmt.Fprintf(&b, "  - %s\n", s)
		}
	}
	for _, t := range r.Timelines {
		fmt.Fprintf(&b, "timeline: %s\n", t)
	}
	return b.String()
}
