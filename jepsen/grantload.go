package jepsen

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"net/http"
	"sync"
	"time"

	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/durationpb"

	"github.com/quorate/quorate/admission"
	"github.com/quorate/quorate/client"
	quoratev1 "github.com/quorate/quorate/proto/quorate/v1"
)

// The grant workload: budget-leasing clients next to strict ones on the
// same fixed-window keys. Each client is its own client.Client (its own
// grants, holder and HTTP client), as each gateway of a fleet is. The
// workload kills and pauses its leasing clients itself, as the nemesis
// kills and pauses servers:
//   - client-kill: the client's workers stop at once and its transport
//     fails every call from then on, so it never renews nor releases: its
//     grants expire in the cluster with what they had unspent (a kill -9 of
//     a gateway, as the cluster sees it). A fresh client (a new holder)
//     takes its place shortly after.
//   - client-pause: the client's workers and every call of its transport
//     (its grants' renewals included) block for a while, then go on.
//
// Every Admit is an op; one decided in memory from a grant (Outcome
// client.LocalGrant) is allowed, marked Local, with the log time its units
// were granted as DecidedAt (Decision.DecidedAt), which names the window the
// cluster spent them in. CheckFixedWindow over strict and local admits
// together must hold: grants are spent in the log when granted, so a
// client never admits more than the cluster counted.

// Grant workload constants: a small limit per short window so that the
// windows fill, and grants living across a window or two.
const (
	grantWindow        = time.Second
	grantTTL           = 2 * time.Second
	grantSyncInterval  = 100 * time.Millisecond // grant-sync: the bound is a tenth of the limit
	grantClients       = 3                      // leasing clients at a time
	grantStrictClients = 2
	grantPlainClients  = 2
	grantWorkers       = 3 // per client
)

// GrantPolicy is a fixed_window policy of limit units per window in local
// grant mode: grants of at most max(limit/5, 1) units living at most ttl
// (and never past their window).
func GrantPolicy(name string, limit int64, window, ttl time.Duration) *quoratev1.Policy {
	p := FixedWindowPolicy(name, limit, window)
	p.Local = &quoratev1.LocalDecisions{Mode: "grant", MaxGrant: proto.Int64(max(limit/5, 1)), Ttl: durationpb.New(ttl)}
	return p
}

// GrantBucketPolicy is a token_bucket policy of capacity units per key that
// does not refill within a run (limit = burst = capacity over 366 days),
// in local grant mode: grants of at most max(capacity/5, 1) units living
// at most ttl.
func GrantBucketPolicy(name string, capacity int64, ttl time.Duration) *quoratev1.Policy {
	p := TokenBucketPolicy(name, capacity)
	p.Local = &quoratev1.LocalDecisions{Mode: "grant", MaxGrant: proto.Int64(max(capacity/5, 1)), Ttl: durationpb.New(ttl)}
	return p
}

// GrantSyncPolicy is a fixed_window policy of limit units per window in
// local sync mode (local-plus-global): clients admit from allowances and
// report every interval; a key may be over-admitted by GrantSyncBound.
func GrantSyncPolicy(name string, limit int64, window, interval time.Duration) *quoratev1.Policy {
	p := FixedWindowPolicy(name, limit, window)
	p.Local = &quoratev1.LocalDecisions{Mode: "sync", SyncInterval: durationpb.New(interval)}
	return p
}

// GrantSyncBound is the most a key of GrantSyncPolicy may be over-admitted
// by per window: the policy's bound, as quorate policy get shows it.
func GrantSyncBound(limit int64, window, interval time.Duration) int64 {
	return admission.Policy{Algorithm: admission.AlgorithmFixedWindow, Limit: limit, Period: window,
		Local: admission.Local{Mode: admission.LocalSync, SyncInterval: interval}}.SyncBound()
}

// GrantWorkloadOptions configures RunGrantWorkload.
type GrantWorkloadOptions struct {
	Policy        string // a GrantPolicy
	Keys          []string
	GrantClients  int // leasing clients at a time; default 3
	StrictClients int // clients with Config.DisableGrants; default 2
	// PlainClients send their admits on PlainKeys as callers without the
	// Go client do (a plain Admit call to the nodes in turn, not marked
	// strict, no request ID), so the nodes decide the hot keys' from the
	// grants they hold; default 2 (none without PlainKeys), negative: none.
	PlainClients int
	PlainKeys    []string
	// EnvoyDomain, when set, is a domain of the nodes' Envoy configuration
	// with a local block whose descriptor "key" is counted as Policy
	// counts (the same limit and window), under EnvoyPolicy: one plain
	// caller in three then calls ShouldRateLimit on PlainKeys as values
	// (the ops name EnvoyPolicy and EnvoyKey), and the default of
	// PlainClients is 3.
	EnvoyDomain, EnvoyPolicy string
	Workers                  int // per client; default 3
	Seed                     uint64
	Timeout                  time.Duration // per call, the client's retries included; default 1.5s
	// FaultEvery is the mean time between client faults (each a kill or a
	// pause of a random leasing client); default 1.5s, negative: none.
	FaultEvery time.Duration
	// ClientBase: worker numbers start here (and name the callers).
	ClientBase int
	// KeyEvery opens Keys[i] only after i×KeyEvery, the workers mostly on
	// the newest open keys, so that fresh buckets drain throughout the run
	// (grant-bucket); 0 opens every key at once.
	KeyEvery time.Duration
}

// GrantStats are the grant workload's client-side counts.
type GrantStats struct {
	ClientsMade   int // leasing clients made, replacements included
	Kills, Pauses int
	// Summed over every client's client.Stats.
	Acquired, Renewed, Released              uint64
	UnitsGranted, UnitsReturned, UnitsWasted uint64
	// Sync mode: allowances answered, and units admitted locally that the
	// cluster was told of.
	UnitsAllowed, UnitsReported uint64
}

// RunGrantWorkload runs the grant workload until ctx ends, recording every
// Admit into h and every client fault through fault. It returns an error
// only when a client cannot be made.
func RunGrantWorkload(ctx context.Context, c *Cluster, opts GrantWorkloadOptions, h *History, fault func(Fault)) (GrantStats, error) {
	setDefault(&opts.GrantClients, grantClients)
	setDefault(&opts.StrictClients, grantStrictClients)
	if opts.EnvoyDomain != "" {
		setDefault(&opts.PlainClients, grantPlainClients+1)
	}
	setDefault(&opts.PlainClients, grantPlainClients)
	setDefault(&opts.Workers, grantWorkers)
	setDefault(&opts.Timeout, 1500*time.Millisecond)
	setDefault(&opts.FaultEvery, 1500*time.Millisecond)
	g := &grantWorkload{c: c, opts: opts, h: h, ctx: ctx, began: time.Now()}
	defer g.closeAll()
	for i := range opts.StrictClients {
		if _, err := g.start(fmt.Sprintf("s%d", i+1), i, kindStrict); err != nil {
			return GrantStats{}, err
		}
	}
	kinds := g.plainKinds()
	for i := range max(opts.PlainClients, 0) * min(len(opts.PlainKeys), 1) {
		if _, err := g.start(fmt.Sprintf("p%d", i+1), opts.StrictClients+opts.GrantClients+i, kinds[i%len(kinds)]); err != nil {
			return GrantStats{}, err
		}
	}
	slots := make([]*grantClient, opts.GrantClients)
	for i := range slots {
		var err error
		if slots[i], err = g.start(fmt.Sprintf("g%d", i+1), opts.StrictClients+i, kindGrant); err != nil {
			return GrantStats{}, err
		}
	}
	if opts.FaultEvery > 0 && len(slots) > 0 {
		rng := rand.New(rand.NewPCG(opts.Seed, 0xc11e47))
		for sleepCtx(ctx, opts.FaultEvery/2+time.Duration(rng.Int64N(int64(opts.FaultEvery)))) {
			i := rng.IntN(len(slots))
			if rng.IntN(3) == 0 {
				fault(g.kill(rng, slots, i))
			} else {
				fault(g.pause(rng, slots[i]))
			}
		}
	}
	<-ctx.Done()
	return g.closeAll(), nil
}

// grantWorkload is what the clients of one RunGrantWorkload share.
type grantWorkload struct {
	c    *Cluster
	opts GrantWorkloadOptions
	h    *History
	ctx  context.Context
	wg   sync.WaitGroup // the workers
	// began is the workload's start (KeyEvery counts from it).
	began time.Time

	mu      sync.Mutex
	clients []*grantClient // every client made
	stats   GrantStats
	closed  bool
}

// clientKind is how a grant workload's client admits.
type clientKind int

const (
	kindGrant  clientKind = iota // the Go client, deciding from its grants
	kindStrict                   // the Go client with Config.DisableGrants
	kindPlain                    // Admit as a caller without the Go client sends it (grantplain.go)
	kindJSON                     // the same in Connect's JSON
	kindEnvoy                    // Envoy's ShouldRateLimit over gRPC
)

// plain reports whether k is a caller without the Go client's grants
// and routing.
func (k clientKind) plain() bool { return k >= kindPlain }

// grantClient is one client.Client and its workers.
type grantClient struct {
	name, caller string
	num          int // its workers are ClientBase + 10·num + w
	kind         clientKind
	cc           *client.Client
	tr           *cutTransport      // kindGrant: what kill and pause cut
	cancel       context.CancelFunc // stops the workers
}

// start makes a client of kind named name (gen-th of its slot) and its
// workers.
func (g *grantWorkload) start(name string, num int, kind clientKind) (*grantClient, error) {
	g.mu.Lock()
	gen := 0
	for _, o := range g.clients {
		if o.name == name {
			gen++
		}
	}
	g.mu.Unlock()
	gc := &grantClient{name: name, num: num, kind: kind,
		caller: fmt.Sprintf("jepsen-grant-%d-%s.%d", g.opts.ClientBase, name, gen)}
	cfg := g.c.clientConfig(gc.caller)
	cfg.DisableGrants = kind != kindGrant
	cfg.DisableRouting = kind.plain()
	gc.tr = &cutTransport{base: cfg.HTTPClient.Transport}
	cfg.HTTPClient = &http.Client{Transport: gc.tr}
	cc, err := client.New(cfg)
	if err != nil {
		return nil, fmt.Errorf("jepsen: grant workload %s: %w", g.opts.Policy, err)
	}
	gc.cc = cc
	wctx, cancel := context.WithCancel(g.ctx)
	gc.cancel = cancel
	g.mu.Lock()
	g.clients = append(g.clients, gc)
	if kind == kindGrant {
		g.stats.ClientsMade++
	}
	g.mu.Unlock()
	for w := range g.opts.Workers {
		cl := g.opts.ClientBase + 10*num + w
		rng := rand.New(rand.NewPCG(g.opts.Seed, uint64(cl)<<8|uint64(gen)))
		if kind.plain() {
			g.wg.Go(func() { g.workPlain(wctx, gc, cl, rng) })
		} else {
			g.wg.Go(func() { g.work(wctx, gc, cl, rng) })
		}
	}
	return gc, nil
}

// kill kills slots[i] and, after a while, puts a fresh client in its place.
func (g *grantWorkload) kill(rng *rand.Rand, slots []*grantClient, i int) Fault {
	old := slots[i]
	f := Fault{Kind: "client-kill", Node: old.name, Start: time.Now()}
	old.cancel()
	old.tr.kill()
	sleepCtx(g.ctx, time.Duration(200+rng.IntN(600))*time.Millisecond)
	g.mu.Lock()
	g.stats.Kills++
	g.mu.Unlock()
	if g.ctx.Err() == nil {
		gc, err := g.start(old.name, old.num, kindGrant)
		if err != nil {
			f.Error = err.Error()
		} else {
			slots[i] = gc
		}
	}
	f.End = time.Now()
	return f
}

// pause blocks gc's workers and calls for 0.3–1.5 s.
func (g *grantWorkload) pause(rng *rand.Rand, gc *grantClient) Fault {
	f := Fault{Kind: "client-pause", Node: gc.name, Start: time.Now()}
	gc.tr.pause()
	sleepCtx(g.ctx, time.Duration(300+rng.IntN(1200))*time.Millisecond)
	gc.tr.resume()
	f.End = time.Now()
	g.mu.Lock()
	g.stats.Pauses++
	g.mu.Unlock()
	return f
}

// closeAll closes every client (a killed one releases nothing: its
// transport fails) and returns the stats; only the first call closes.
func (g *grantWorkload) closeAll() GrantStats {
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.closed {
		return g.stats
	}
	g.closed = true
	for _, gc := range g.clients {
		gc.cancel()
		gc.tr.resume()
	}
	g.wg.Wait()
	var wg sync.WaitGroup
	for _, gc := range g.clients {
		wg.Go(func() { _ = gc.cc.Close() })
	}
	wg.Wait()
	for _, gc := range g.clients {
		s := gc.cc.Stats()
		g.stats.Acquired += s.GrantsAcquired
		g.stats.Renewed += s.GrantsRenewed
		g.stats.Released += s.GrantsReleased
		g.stats.UnitsGranted += s.UnitsGranted
		g.stats.UnitsReturned += s.UnitsReturned
		g.stats.UnitsWasted += s.UnitsWasted
		g.stats.UnitsAllowed += s.UnitsAllowed
		g.stats.UnitsReported += s.UnitsReported
	}
	return g.stats
}

// work admits on random keys through gc until ctx ends: a short random
// pause after each admit (longer after a denial) keeps the offered load
// well above the limit without spinning.
func (g *grantWorkload) work(ctx context.Context, gc *grantClient, cl int, rng *rand.Rand) {
	var d client.Decision
	for seq := 0; gc.tr.gate(ctx); seq++ {
		key := g.pickKey(rng, g.opts.Keys)
		// The request carries no request ID: one that does is never
		// decided from a grant (a grant records none, so a retry would
		// spend again). The client names each strict attempt itself and
		// retries it under that name, which the op records; a local
		// decision, or a call that failed, keeps the workload's own name
		// for it, so the checkers count every op apart.
		op := Op{Kind: KindAdmit, Policy: g.opts.Policy, Client: cl, RequestID: fmt.Sprintf("c%d-g%d", cl, seq),
			Caller: gc.caller, Key: key}
		tr := &trail{}
		cctx, cancel := context.WithTimeout(withTrail(ctx, tr), g.opts.Timeout)
		op.Start = time.Now()
		err := gc.cc.AdmitInto(cctx, &client.Request{Policy: op.Policy, Key: key, NoFallback: true}, &d)
		op.End = time.Now()
		cancel()
		tr.record(&op)
		if err == nil && d.Outcome == client.LocalGrant {
			op.Outcome, op.Local, op.Remaining, op.DecidedAt = OutcomeAllowed, true, d.Remaining, nanos(d.DecidedAt)
		} else {
			recordDecision(&op, &d, err)
		}
		if d.RequestID != "" && err == nil {
			op.RequestID = d.RequestID
		}
		g.h.Add(op)
		pause := time.Duration(rng.IntN(3000)) * time.Microsecond
		if op.Outcome != OutcomeAllowed {
			pause = time.Duration(10+rng.IntN(30)) * time.Millisecond
		}
		sleepCtx(ctx, pause)
	}
}

// pickKey is a random key of keys: any, or with KeyEvery mostly the newest
// open ones.
func (g *grantWorkload) pickKey(rng *rand.Rand, keys []string) string {
	if g.opts.KeyEvery > 0 {
		open := min(len(keys), 1+int(time.Since(g.began)/g.opts.KeyEvery))
		return keys[open-1-rng.IntN(open)/2]
	}
	return keys[rng.IntN(len(keys))]
}

// errClientKilled is every call of a killed client's transport.
var errClientKilled = errors.New("jepsen: client killed")

// cutTransport is a client's transport that the workload can pause (every
// call waits until resumed) and kill (every call fails, for ever).
type cutTransport struct {
	base http.RoundTripper

	mu     sync.Mutex
	killed bool
	paused chan struct{} // closed on resume; nil when not paused
}

func (t *cutTransport) kill() {
	t.mu.Lock()
	t.killed = true
	t.mu.Unlock()
}

func (t *cutTransport) pause() {
	t.mu.Lock()
	if t.paused == nil {
		t.paused = make(chan struct{})
	}
	t.mu.Unlock()
}

func (t *cutTransport) resume() {
	t.mu.Lock()
	if t.paused != nil {
		close(t.paused)
		t.paused = nil
	}
	t.mu.Unlock()
}

// gate waits while t is paused: false when ctx ended or t was killed.
func (t *cutTransport) gate(ctx context.Context) bool {
	t.mu.Lock()
	killed, paused := t.killed, t.paused
	t.mu.Unlock()
	if paused != nil {
		select {
		case <-paused:
		case <-ctx.Done():
		}
	}
	return ctx.Err() == nil && !killed
}

func (t *cutTransport) RoundTrip(r *http.Request) (*http.Response, error) {
	if !t.gate(r.Context()) {
		if r.Body != nil {
			r.Body.Close()
		}
		if err := r.Context().Err(); err != nil {
			return nil, err
		}
		return nil, errClientKilled
	}
	return t.base.RoundTrip(r)
}
