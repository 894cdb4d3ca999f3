package client

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"connectrpc.com/connect"
	"golang.org/x/time/rate"

	quoratev1 "github.com/quorate/quorate/proto/quorate/v1"
)

// Policy is what the client needs of a policy to apply its on_unavailable
// mode while the cluster cannot decide.
type Policy struct {
	Name string
	// Limit units per Period; Burst is the most at once (0 means Limit).
	Limit  int64
	Period time.Duration
	Burst  int64
	// OnUnavailable is "deny" (or empty), "allow" or "local".
	OnUnavailable string
	Version       uint64
	// Local is the policy's local decisions (budget leases); a zero Mode
	// means every request is decided by the cluster.
	Local LocalDecisions
}

// LocalDecisions is a policy's local decisions (admin.proto
// LocalDecisions): with Mode "grant" the client decides the policy's
// requests in memory from units granted to it, with Mode "sync" from an
// allowance it reports against every SyncInterval (see Client.Admit).
type LocalDecisions struct {
	// Mode is "grant", "sync" or empty (no local decisions).
	Mode string
	// MaxGrant is the most units one holder may hold unspent; 0 means a
	// tenth of the burst (at least 1). Grant mode only.
	MaxGrant int64
	// TTL is how long a grant lives unless renewed; 0 means 10s. Grant
	// mode only.
	TTL time.Duration
	// SyncInterval is how often a holder reports what it admitted and gets
	// its next allowance; 0 means 1s. Sync only.
	SyncInterval time.Duration
}

func (p Policy) validate() error {
	switch {
	case p.Name == "":
		return errors.New("Name is empty")
	case p.Limit < 0:
		return fmt.Errorf("Limit must not be negative (got %d)", p.Limit)
	case p.Burst < 0:
		return fmt.Errorf("Burst must not be negative (got %d)", p.Burst)
	case p.Period < 0:
		return fmt.Errorf("Period must not be negative (got %v)", p.Period)
	}
	switch p.OnUnavailable {
	case "", "deny", "allow", "local":
	default:
		return fmt.Errorf("OnUnavailable must be deny, allow or local (got %q)", p.OnUnavailable)
	}
	switch {
	case p.Local.Mode != "" && p.Local.Mode != "grant" && p.Local.Mode != "sync":
		return fmt.Errorf("Local.Mode must be grant, sync or empty (got %q)", p.Local.Mode)
	case p.Local.MaxGrant < 0:
		return fmt.Errorf("Local.MaxGrant must not be negative (got %d)", p.Local.MaxGrant)
	case p.Local.TTL < 0:
		return fmt.Errorf("Local.TTL must not be negative (got %v)", p.Local.TTL)
	case p.Local.SyncInterval < 0:
		return fmt.Errorf("Local.SyncInterval must not be negative (got %v)", p.Local.SyncInterval)
	}
	return nil
}

// calendarPeriods are the lengths a quota's calendar period is taken to have
// by the local bucket.
var calendarPeriods = map[string]time.Duration{"day": 24 * time.Hour, "week": 7 * 24 * time.Hour,
	"month": 30 * 24 * time.Hour, "year": 365 * 24 * time.Hour}

func policyOf(p *quoratev1.Policy) Policy {
	period := p.GetPeriod().AsDuration()
	if period == 0 {
		period = calendarPeriods[p.GetCalendar()]
	}
	return Policy{Name: p.GetName(), Limit: p.GetLimit(), Period: period, Burst: p.GetBurst(),
		OnUnavailable: p.GetOnUnavailable(), Version: p.GetVersion(),
		Local: LocalDecisions{Mode: p.GetLocal().GetMode(), MaxGrant: p.GetLocal().GetMaxGrant(), TTL: p.GetLocal().GetTtl().AsDuration(),
			SyncInterval: p.GetLocal().GetSyncInterval().AsDuration()}}
}

// Stats counts Admit decisions by who made them.
type Stats struct {
	// Verified decisions were made by the cluster (allowed or denied).
	Verified uint64
	// Unavailable were denied without the cluster (on_unavailable deny).
	Unavailable uint64
	// Bypassed were allowed without being counted (on_unavailable allow).
	Bypassed uint64
	// Local were decided by this process's bucket (on_unavailable local).
	Local uint64
	// LocalGrant were allowed from a budget lease held by this client,
	// without a call (Outcome LocalGrant).
	LocalGrant uint64
	// GrantsAcquired counts the grants begun (a first answer, or an answer
	// with a new started_at), GrantsRenewed the renewals of a grant held,
	// GrantsReleased the grants given back (idle for a ttl, or Close).
	GrantsAcquired, GrantsRenewed, GrantsReleased uint64
	// GrantsHeld are the grants (or sync-mode allowances) held now: those
	// answered and not yet released, replaced or past their local
	// deadline.
	GrantsHeld uint64
	// UnitsGranted are the units the cluster added to this client's grants;
	// UnitsReturned those given back by releases; UnitsWasted those lost
	// unspent: a grant whose local deadline passed, or that was replaced by
	// a new one, or whose release failed (under-admission, never over).
	// Units a local deadline voided that a later answer showed still
	// granted count as granted again, so that UnitsGranted = LocalGrant's
	// units + UnitsReturned + UnitsWasted once every grant has ended.
	// These three count grant-mode grants only: a sync-mode allowance is
	// not spent ahead, so nothing of it is granted, returned or wasted on
	// the client's side (the cluster counts what it charges for expired
	// allowances).
	UnitsGranted, UnitsReturned, UnitsWasted uint64
	// Sync mode (local-plus-global): GrantsAcquired counts the allowance
	// records begun, GrantsRenewed the reports answered, GrantsReleased the
	// final reports (idle for two sync intervals, or Close). UnitsAllowed
	// are the allowances the cluster answered, added up (each replaces the
	// last: an upper bound on what could be admitted, not units spent);
	// UnitsReported are the units admitted locally that answered reports
	// told the cluster of (charged to their keys). Once every allowance
	// ended with an answered report, UnitsReported is the units of the
	// sync-mode LocalGrant decisions. (Not exported by Collector yet.)
	UnitsAllowed, UnitsReported uint64
	// PoliciesUnknown counts the policies the client decided under (the
	// cluster answered for them) but could not read (AdmissionService.
	// Policies refused or failed, or did not list them): their requests
	// get no budget leases and no on_unavailable. Each is counted once,
	// with a warning logged (Config.Logger).
	PoliciesUnknown uint64
}

// Stats returns how many Admit decisions of each Outcome this client made.
func (c *Client) Stats() Stats {
	s := Stats{Verified: c.fb.counts[Verified].Load(), Unavailable: c.fb.counts[Unavailable].Load(),
		Bypassed: c.fb.counts[Bypassed].Load(), Local: c.fb.counts[LocalDecision].Load(), PoliciesUnknown: c.fb.unknownCount.Load()}
	if c.grants != nil {
		c.grants.stats(&s)
	}
	return s
}

// Policies returns the policies the client keeps for on_unavailable, by
// name: those of Config.Policies and those the cluster answered.
func (c *Client) Policies() []Policy {
	c.fb.mu.Lock()
	defer c.fb.mu.Unlock()
	out := make([]Policy, 0, len(c.fb.policies))
	for _, p := range c.fb.policies {
		out = append(out, p)
	}
	slices.SortFunc(out, func(a, b Policy) int { return strings.Compare(a.Name, b.Name) })
	return out
}

// maxLocalBuckets bounds the keys the local fallback remembers; beyond it
// the buckets start again full.
const maxLocalBuckets = 100_000

// fallback keeps the policies and the local buckets.
type fallback struct {
	c      *Client
	counts [LocalDecision + 1]atomic.Uint64

	mu       sync.Mutex
	policies map[string]Policy
	fetching map[string]bool
	// unknown are the policies reported as unknown (unknownLocked): they
	// are read again for a later version, or after retry (unknownRetry).
	unknown      map[string]unknownPolicy
	retry        time.Duration
	unknownCount atomic.Uint64
	buckets      map[bucketKey]*localBucket
}

type bucketKey struct{ policy, key string }

type localBucket struct {
	version uint64
	lim     *rate.Limiter
}

func newFallback(c *Client, given []Policy) *fallback {
	f := &fallback{c: c, policies: map[string]Policy{}, fetching: map[string]bool{}, unknown: map[string]unknownPolicy{},
		retry: unknownRetry, buckets: map[bucketKey]*localBucket{}}
	for _, p := range given {
		f.policies[p.Name] = p
	}
	return f
}

func (f *fallback) count(o Outcome) { f.counts[o].Add(1) }

// policy is the policy named as the client knows it.
func (f *fallback) policy(name string) (Policy, bool) {
	f.mu.Lock()
	defer f.mu.Unlock()
	p, ok := f.policies[name]
	return p, ok
}

// store keeps p unless a newer version is kept already.
func (f *fallback) store(p Policy) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if old, ok := f.policies[p.Name]; !ok || old.Version <= p.Version {
		f.policies[p.Name] = p
	}
}

// refreshAll lists, in the background, every policy the caller may use
// (AdmissionService.Policies: a data call, which the client role allows).
func (f *fallback) refreshAll() {
	f.c.wg.Add(1)
	go func() {
		defer f.c.wg.Done()
		f.fetch(nil)
	}()
}

// fetch asks the members in turn for the policies named (none: every one
// the caller may use) and keeps those answered; it returns the last error
// when no member answered, nil when one did. A member whose answer lacks a
// name (its replica may not have applied the policy yet), or that does not
// serve the call (Unimplemented: a member of another build), is not the
// last asked; a refusal of the caller is.
func (f *fallback) fetch(names []string) error {
	var err error
	for _, m := range f.c.routes.members() {
		ctx, cancel := context.WithTimeout(f.c.ctx, f.c.cfg.Timeout)
		var resp *connect.Response[quoratev1.PoliciesResponse]
		resp, err = f.c.conn(m).admission.Policies(ctx, connect.NewRequest(&quoratev1.PoliciesRequest{Names: names}))
		cancel()
		if err == nil {
			for _, p := range resp.Msg.GetPolicies() {
				f.store(policyOf(p))
			}
			if len(resp.Msg.GetPolicies()) >= len(names) {
				return nil
			}
			continue
		}
		f.c.cfg.Logger.Debug("policies", "server", m, "names", names, "error", err)
		if c := connect.CodeOf(err); c == connect.CodeUnauthenticated || c == connect.CodePermissionDenied {
			return err // every member answers this caller the same
		}
	}
	return err
}

// seen notes that the cluster decided under version of policy name: the
// policy is fetched in the background when the client keeps an older one,
// and reported (unknown) when it cannot be.
func (f *fallback) seen(name string, version uint64) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if p, ok := f.policies[name]; ok && p.Version >= version || f.fetching[name] || f.c.cfg.NoPolicyFetch {
		return
	}
	if u, ok := f.unknown[name]; ok && version <= u.version && time.Since(u.at) < f.retry {
		return
	}
	f.fetching[name] = true
	f.c.wg.Add(1)
	go func() {
		defer f.c.wg.Done()
		err := f.fetch([]string{name})
		f.mu.Lock()
		defer f.mu.Unlock()
		delete(f.fetching, name)
		if _, ok := f.policies[name]; ok || f.c.ctx.Err() != nil {
			return
		}
		if err == nil {
			err = fmt.Errorf("%w: the cluster decided under it but does not list it to this caller", ErrPolicyUnknown)
		}
		f.unknownLocked(name, version, err)
	}()
}

// unknownRetry is how long the client waits before it reads again a policy
// it could not (a replica that had not applied it yet, an access file
// changed since, members of a build without the call being replaced).
const unknownRetry = 10 * time.Second

// unknownPolicy is a policy the client could not read: the latest version
// the cluster decided under, and when it last tried.
type unknownPolicy struct {
	version uint64
	at      time.Time
}

// ErrPolicyUnknown is the error logged, once per policy, when the client
// cannot learn a policy it decides under (Stats.PoliciesUnknown).
var ErrPolicyUnknown = errors.New("client: policy unknown")

// unknownLocked notes that the client cannot learn policy name, which the
// cluster decided under at version (err says why), and reports it the
// first time only: its requests get no budget leases and no
// on_unavailable; f.mu is held.
func (f *fallback) unknownLocked(name string, version uint64, err error) {
	u, reported := f.unknown[name]
	f.unknown[name] = unknownPolicy{version: max(u.version, version), at: time.Now()}
	if reported {
		return
	}
	f.unknownCount.Add(1)
	f.c.cfg.Logger.Warn("quorate client: cannot read a policy it uses: its requests are decided by the cluster only, without budget leases (local) or on_unavailable; the caller needs the client role for it, or give it in Config.Policies",
		"policy", name, "error", err)
}

// decide applies on_unavailable to r after cause left it undecided; false
// when a policy of r is not known (the caller then returns cause).
func (f *fallback) decide(r *Request, cause error) (*Decision, bool) {
	f.mu.Lock()
	defer f.mu.Unlock()
	checks := append([]Check{{Policy: r.Policy, Key: r.Key, Cost: r.Cost}}, r.Also...)
	mode := "allow"
	pols := make([]Policy, len(checks))
	for i, ch := range checks {
		p, ok := f.policies[ch.Policy]
		if !ok {
			return nil, false
		}
		pols[i] = p
		switch p.OnUnavailable {
		case "", "deny":
			mode = "deny"
		case "local":
			if mode == "allow" {
				mode = "local"
			}
		}
	}
	d := &Decision{RequestID: r.RequestID, Cause: cause, DeniedCheck: -1, PolicyVersion: pols[0].Version}
	switch mode {
	case "deny":
		d.Outcome = Unavailable
	case "allow":
		d.Outcome, d.Allowed = Bypassed, true
	default:
		d.Outcome, d.Allowed = LocalDecision, f.takeLocal(checks, pols)
	}
	f.counts[d.Outcome].Add(1)
	return d, true
}

// takeLocal spends each local-mode check's cost from its bucket, all or
// none; f.mu is held.
func (f *fallback) takeLocal(checks []Check, pols []Policy) bool {
	now := time.Now()
	var taken []*rate.Reservation
	for i, ch := range checks {
		if pols[i].OnUnavailable != "local" {
			continue
		}
		res := f.bucket(ch, pols[i]).ReserveN(now, int(max(1, ch.Cost)))
		if !res.OK() || res.DelayFrom(now) > 0 {
			res.CancelAt(now)
			for _, t := range taken {
				t.CancelAt(now)
			}
			return false
		}
		taken = append(taken, res)
	}
	return true
}

// bucket is the local bucket of ch's key under p, sized to the client's
// share of p; f.mu is held.
func (f *fallback) bucket(ch Check, p Policy) *rate.Limiter {
	k := bucketKey{ch.Policy, ch.Key}
	if b, ok := f.buckets[k]; ok && b.version == p.Version {
		return b.lim
	}
	if len(f.buckets) >= maxLocalBuckets {
		clear(f.buckets)
	}
	share := f.c.cfg.LocalShare
	if share == 0 {
		share = 1 / float64(f.c.routes.memberCount())
	}
	burst := p.Burst
	if burst == 0 {
		burst = p.Limit
	}
	every := rate.Limit(0)
	if p.Period > 0 {
		every = rate.Limit(share * float64(p.Limit) / p.Period.Seconds())
	}
	lim := rate.NewLimiter(every, max(1, int(share*float64(burst))))
	f.buckets[k] = &localBucket{version: p.Version, lim: lim}
	return lim
}
