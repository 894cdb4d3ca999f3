package client

import (
	"context"
	"log/slog"
	"net/http"
	"runtime"
	"sync"
	"sync/atomic"
	"time"

	quoratev1 "github.com/quorate/quorate/proto/quorate/v1"
)

// Budget leases (AdmissionService.Grant), the client's side. For a policy
// whose local.mode is grant the client holds, per key it admits, a grant:
// units already spent in the key's log, which it spends in memory. In sync
// mode (grant_sync.go) the same state holds an allowance instead: units it
// may admit until its next report, charged when reported. The hot
// path (grants.admit) is one load of a copy-on-write map and a CAS on the
// stripe of the grant's unspent units that belongs to the processor it runs
// on (grant_units.go): no lock, no clock, no shared cache line written, no
// allocation beyond the Decision. Everything else — acquiring, renewing, expiring, releasing — is
// done in the background by one goroutine per grant held (grant_loop.go),
// through the source's Grant call: the client's one retry loop (call) for a
// Client, the node's own call for a Holder (holder.go).

const (
	// maxGrantStates bounds the keys the client keeps grant state for;
	// beyond it keys without state are decided strictly.
	maxGrantStates = 10_000
	// grantRefusedBackoff is how long a policy whose Grant was refused
	// (Unimplemented, InvalidArgument, FailedPrecondition, NotFound) is
	// decided strictly before the client asks for grants again.
	grantRefusedBackoff = 30 * time.Second
	// defaultGrantTTL is a grant's ttl when the policy leaves it unset.
	defaultGrantTTL = 10 * time.Second
)

// grantSpec is what the client needs of a policy with local decisions.
type grantSpec struct {
	maxGrant int64
	ttl      time.Duration
	// sync: local-plus-global mode (grant_sync.go), reporting every
	// interval; maxGrant and ttl are unused then.
	sync     bool
	interval time.Duration
}

// grantSpecOf is p's grant spec with the server's defaults; false when p
// has no local decisions.
func grantSpecOf(p Policy) (grantSpec, bool) {
	switch p.Local.Mode {
	case "sync":
		s := grantSpec{sync: true, interval: p.Local.SyncInterval}
		if s.interval <= 0 {
			s.interval = defaultSyncInterval
		}
		return s, true
	case "grant":
	default:
		return grantSpec{}, false
	}
	burst := p.Burst
	if burst == 0 {
		burst = p.Limit
	}
	s := grantSpec{maxGrant: p.Local.MaxGrant, ttl: p.Local.TTL}
	if s.maxGrant <= 0 {
		s.maxGrant = max(1, burst/10)
	}
	if s.ttl <= 0 {
		s.ttl = defaultGrantTTL
	}
	return s, true
}

// grantSource is what grants need of the process holding them: one way to
// send a Grant call, the policies it knows, which keys deserve a grant, and
// who holds them.
type grantSource struct {
	// send makes one Grant call; its errors are Connect errors (a refusal's
	// code makes the policy strict for a while).
	send func(ctx context.Context, req *quoratev1.GrantRequest) (*quoratev1.GrantResponse, error)
	// policy is the policy named as the process knows it: false when it
	// does not.
	policy func(name string) (Policy, bool)
	// want, if set, is asked on a miss, before a key gets grant state:
	// false keeps the key strict (asked again at its next request).
	want func(policy, key string) bool
	// caller is GrantRequest.caller; timeout bounds each call (and, with a
	// second, Close's releases); logger gets the calls' failures at Debug.
	caller  string
	timeout time.Duration
	logger  *slog.Logger
}

// grantSource is the client's: its routing and retries, the policies of
// its fallback (Config.Policies and those the cluster answered), its
// Config.
func (c *Client) grantSource() grantSource {
	return grantSource{
		send: func(ctx context.Context, req *quoratev1.GrantRequest) (*quoratev1.GrantResponse, error) {
			resp, err := call(ctx, c, callSpec{procedure: "Grant", key: req.Key},
				func(ctx context.Context, server string) (*quoratev1.GrantResponse, http.Header, error) {
					return unary(ctx, req, c.admission(server).Grant)
				})
			if err != nil {
				return nil, publicError(err, "")
			}
			return resp, nil
		},
		policy: c.fb.policy, caller: c.cfg.Caller, timeout: c.cfg.Timeout, logger: c.cfg.Logger,
	}
}

// grants are a process's budget leases, by (policy, key).
type grants struct {
	// The hot path's fields, read on every decision and written never or
	// rarely, on cache lines of their own (not shared with a neighbour
	// object's writes nor with the counters below).
	_ [64]byte
	// states is copied on write (under mu): the hot path reads it with one
	// atomic load and a map lookup.
	states atomic.Pointer[map[bucketKey]*grantState]
	// hints pick the stripe of a grant's units a decision spends from.
	hints *stripeHints
	_     [64]byte

	src grantSource
	// holder names this process's grants: 128 random bits.
	holder string

	// ctx ends when Close gives up on the releases (and the calls in
	// flight); renewCtx when Close begins (the loops release their grants).
	ctx, renewCtx       context.Context
	cancel, cancelRenew context.CancelFunc
	wg                  sync.WaitGroup

	acquired, renewed, released            atomic.Uint64
	unitsGranted, unitsReturned, unitsLost atomic.Uint64
	// Sync mode: allowances answered and units reported (Stats).
	unitsAllowed, unitsReported atomic.Uint64
	// retired counts the local decisions of states dropped from the map.
	retired atomic.Uint64

	mu      sync.Mutex
	closed  bool
	refused map[string]time.Time // policy -> strict until
}

func newGrants(src grantSource) *grants {
	m := &grants{src: src, holder: NewRequestID(), refused: map[string]time.Time{}, hints: newStripeHints()}
	m.ctx, m.cancel = context.WithCancel(context.Background())
	m.renewCtx, m.cancelRenew = context.WithCancel(m.ctx)
	empty := map[bucketKey]*grantState{}
	m.states.Store(&empty)
	return m
}

// grantState is one (policy, key)'s grant. The fields up to the padding are
// the hot path's; the rest belong to the grant's loop (under mu).
type grantState struct {
	_ [64]byte // the hot path's fields share no line with a neighbour object
	// avail are the grant's units this client may still spend, in stripes
	// (grant_units.go); none when no live grant is held. Local decisions
	// take from them; the loop adds what each answer grants; the local
	// deadline and a release drain them.
	avail units
	// lowWater: a local decision leaving its stripe below it wakes the
	// loop to renew (a quarter of the last grant, over the stripes).
	lowWater atomic.Int64
	// What a LocalGrant Decision reports, from the last answer: the key's
	// units are keyBase plus the grant's units unspent (keyUnits), its
	// reset, the policy's quota.
	limit, window, quota atomic.Int64
	keyBase, resetAfter  atomic.Int64
	version              atomic.Uint64
	// decidedAt is the log time (unix nanoseconds) of the last answer of
	// the grant held, stored before its units are added to avail: a spend
	// reads it after its CAS, so it names the window its units were
	// granted in (every top-up of a window grant lies in one window). A
	// spend held up between its CAS and the load across a new grant of
	// the key reads the newer time: a later window, never an earlier one.
	decidedAt atomic.Int64
	_         [64]byte
	// kicked says a wake-up is pending in kick: on a line of its own, as
	// every decision under the low water reads it.
	kicked atomic.Bool
	_      [63]byte
	// extra are the units above 1 that local decisions spent (cost > 1):
	// the decisions made are the units spent minus extra. A decision of
	// cost 1, the common case, so costs one atomic operation.
	extra atomic.Int64
	_     [56]byte

	m    *grants
	key  bucketKey
	spec grantSpec
	kick chan struct{}
	// strict counts the requests for this key decided by the cluster while
	// the grant was short: demand too.
	strict atomic.Int64
	// overdrawn counts the units spent past the grant since the last
	// answer: always 0 but in a build with the planted overspend bug.
	overdrawn atomic.Int64

	mu      sync.Mutex
	running bool // a loop serves this state
	seq     uint64
	// seqSent is when seq was first sent, zero until then: an answer to
	// seq, a retry's included, was decided after it.
	seqSent time.Time
	// seqUsed is the used the first send of seq reported (sync mode sends
	// it again on a retry of seq).
	seqUsed int64
	started time.Time // started_at of the grant held; zero when none
	// base is the units credited to avail for this grant, net of those
	// voided: used = base - avail. In sync mode used runs over the
	// state's life (never reset: the cluster takes a new record's first
	// used as its baseline), and reported is the used of the last answer.
	base, reported int64
	// voided are the units the local deadline took from avail since the
	// last answer: given again if the next answer shows the grant alive,
	// else wasted.
	voided int64
	gen    uint64 // expiry timers of an older answer do nothing
	timer  *time.Timer
	// deadline is the local deadline of the last answer.
	deadline time.Time
	// spentBefore are the units spent from this key's earlier grants.
	spentBefore int64
	// Demand sampling: at sampleAt the key had spent sampleSpent and seen
	// sampleStrict strict requests; demand is the EWMA of units per second.
	sampleAt                  time.Time
	sampleSpent, sampleStrict int64
	demand                    float64
	// activeAt is when the loop last saw the key used (idleSpent units
	// spent, idleStrict strict requests).
	activeAt              time.Time
	idleSpent, idleStrict int64
}

// newGrantState is the state of k's grants, holding none yet; its units
// get a stripe per processor.
func newGrantState(m *grants, k bucketKey, spec grantSpec) *grantState {
	return &grantState{m: m, key: k, spec: spec, kick: make(chan struct{}, 1), avail: newUnits(stripesFor(runtime.GOMAXPROCS(0)))}
}

// admit decides r from its key's grant when it can: nil means the caller
// must decide r strictly.
func (m *grants) admit(r *Request) *Decision {
	if len(r.Also) != 0 {
		d := new(Decision)
		if !m.spendAll(r, d) {
			return nil
		}
		return d
	}
	g, left, ok := m.spend(r)
	if !ok {
		return nil
	}
	d := new(Decision)
	g.fill(d, r, left)
	return d
}

// spend takes r's cost from its key's grant: false when it cannot (the
// caller decides r strictly); left is what the grant has unspent after.
// A request with a RequestID (a grant records none), MaxWait or a negative
// cost never can. A request with Also is spendAll's.
func (m *grants) spend(r *Request) (g *grantState, left int64, ok bool) {
	if r.RequestID != "" || len(r.Also) != 0 || r.MaxWait != 0 || r.Cost < 0 {
		return nil, 0, false
	}
	g = (*m.states.Load())[bucketKey{r.Policy, r.Key}]
	if g == nil {
		m.miss(r.Policy, r.Key)
		return nil, 0, false
	}
	cost := r.Cost
	if cost == 0 {
		cost = 1
	}
	var contended, stole bool
	if len(g.avail.stripes) == 1 {
		left, _, _, ok = g.avail.take(0, cost)
	} else {
		hint := m.hints.get()
		left, contended, stole, ok = g.avail.take(hint.i, cost)
		m.hints.put(hint, contended)
	}
	if stole {
		g.rebalance()
	}
	if !ok {
		if plantedOverspend && plantedOverdraw(g, cost) {
			return g, 0, true
		}
		g.short()
		return nil, 0, false
	}
	if cost != 1 {
		g.extra.Add(cost - 1)
	}
	if left < g.lowWater.Load() {
		g.wake()
	}
	return g, left, true
}

// rebalance evens g's stripes out after a spend found its own short, unless
// the loop (or another spender) holds g.mu: then the next spend tries.
func (g *grantState) rebalance() {
	if g.mu.TryLock() {
		g.avail.rebalance()
		g.mu.Unlock()
	}
}

// setLowWater makes the loop wake when the stripe a decision spent from
// holds less than its share of total units.
func (g *grantState) setLowWater(total int64) {
	n := int64(len(g.avail.stripes))
	g.lowWater.Store((total + n - 1) / n)
}

// fill writes into d the decision of r, allowed from g with left units
// unspent: the one place a local decision is built. It writes d's fields
// one by one over a cleared d: a Decision built apart and copied in costs
// two copies of the struct, a quarter of a local decision's time.
func (g *grantState) fill(d *Decision, r *Request, left int64) {
	*d = Decision{}
	d.Allowed, d.Outcome, d.RequestID, d.DeniedCheck = true, LocalGrant, r.RequestID, -1
	limit := g.limit.Load()
	d.Remaining, d.Limit, d.Window = g.keyUnits(left, limit), limit, time.Duration(g.window.Load())
	d.ResetAfter, d.Quota = time.Duration(g.resetAfter.Load()), g.quota.Load()
	d.PolicyVersion, d.DecidedAt = g.version.Load(), time.Unix(0, g.decidedAt.Load()).UTC()
}

// keyUnits is what a local decision reports as the key's remaining units
// when the grant's stripe it spent from holds left: the key's units at the
// last answer, less what this client spent of its grant since (its units
// unspent taken as left in every stripe: the loop spreads them evenly). An
// estimate, as any remaining is once sent: other holders spend meanwhile,
// and a bucket refills. limit is the policy's limit, loaded once by the
// caller, which reports it too.
func (g *grantState) keyUnits(left, limit int64) int64 {
	return min(max(g.keyBase.Load()+left*int64(len(g.avail.stripes)), 0), limit)
}

// granting notes the log time of an answer whose units are about to be
// added to avail; g.mu is held.
func (g *grantState) granting(decidedAt time.Time) {
	g.decidedAt.Store(decidedAt.UnixNano())
	if plantedOverspend {
		g.overdrawn.Store(0)
	}
}

// wake asks the loop for a renewal; it never blocks.
func (g *grantState) wake() {
	// Read first: while a renewal is pending, decisions only read kicked.
	if !g.kicked.Load() && g.kicked.CompareAndSwap(false, true) {
		select {
		case g.kick <- struct{}{}:
		default:
		}
	}
}

// short notes a request the grant could not decide (it goes to the
// cluster) and makes sure a loop is acquiring or renewing.
func (g *grantState) short() {
	g.strict.Add(1)
	g.m.start(g)
}

// miss is the slow path of a key without grant state: when policy has
// local decisions (and the source wants key), a state is made for key and
// its loop starts acquiring a grant.
func (m *grants) miss(policy, key string) {
	p, ok := m.src.policy(policy)
	if !ok {
		return
	}
	spec, ok := grantSpecOf(p)
	if !ok || m.src.want != nil && !m.src.want(policy, key) {
		return
	}
	m.mu.Lock()
	if m.closed || time.Now().Before(m.refused[policy]) {
		m.mu.Unlock()
		return
	}
	k := bucketKey{policy, key}
	old := *m.states.Load()
	g, ok := old[k]
	if !ok {
		if len(old) >= maxGrantStates {
			old = m.evictLocked(old)
			if len(old) >= maxGrantStates {
				m.mu.Unlock()
				return
			}
		}
		g = newGrantState(m, k, spec)
		next := make(map[bucketKey]*grantState, len(old)+1)
		for kk, v := range old {
			next[kk] = v
		}
		next[k] = g
		m.states.Store(&next)
	}
	m.mu.Unlock()
	m.start(g)
}

// evictLocked drops the states no loop serves (they hold nothing) and
// returns the map left; m.mu is held.
func (m *grants) evictLocked(old map[bucketKey]*grantState) map[bucketKey]*grantState {
	next := make(map[bucketKey]*grantState, len(old))
	for k, g := range old {
		g.mu.Lock()
		idle := !g.running
		if idle {
			m.retired.Add(g.decisionsLocked())
		}
		g.mu.Unlock()
		if idle {
			continue
		}
		next[k] = g
	}
	m.states.Store(&next)
	return next
}

// start runs g's loop unless one runs, the client is closing or g's policy
// is refused grants for now; else it wakes the loop.
func (m *grants) start(g *grantState) {
	m.mu.Lock()
	if m.closed || time.Now().Before(m.refused[g.key.policy]) {
		m.mu.Unlock()
		return
	}
	g.mu.Lock()
	if g.running {
		g.mu.Unlock()
		m.mu.Unlock()
		g.wake()
		return
	}
	g.running = true
	g.mu.Unlock()
	m.wg.Add(1)
	m.mu.Unlock()
	go g.loop()
}

// refuse decides policy strictly for a while.
func (m *grants) refuse(policy string) {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.refused[policy] = time.Now().Add(grantRefusedBackoff)
}

// closing reports whether Close began.
func (m *grants) closing() bool { return m.renewCtx.Err() != nil }

// close releases every grant held, waiting at most the shorter of
// Config.Timeout and a second for the answers, then ends every loop.
func (m *grants) close() {
	m.mu.Lock()
	m.closed = true
	m.mu.Unlock()
	m.cancelRenew()
	done := make(chan struct{})
	go func() {
		m.wg.Wait()
		close(done)
	}()
	t := time.NewTimer(m.releaseTimeout())
	select {
	case <-done:
	case <-t.C:
	}
	t.Stop()
	m.cancel()
	<-done
}

func (m *grants) releaseTimeout() time.Duration { return min(m.src.timeout, time.Second) }

// stats adds the grants' counters to s.
func (m *grants) stats(s *Stats) {
	s.LocalGrant, s.GrantsHeld = m.retired.Load(), 0
	now := time.Now()
	for _, g := range *m.states.Load() {
		g.mu.Lock()
		s.LocalGrant += g.decisionsLocked()
		if !g.started.IsZero() && now.Before(g.deadline) {
			s.GrantsHeld++
		}
		g.mu.Unlock()
	}
	s.GrantsAcquired, s.GrantsRenewed, s.GrantsReleased = m.acquired.Load(), m.renewed.Load(), m.released.Load()
	s.UnitsGranted, s.UnitsReturned, s.UnitsWasted = m.unitsGranted.Load(), m.unitsReturned.Load(), m.unitsLost.Load()
	s.UnitsAllowed, s.UnitsReported = m.unitsAllowed.Load(), m.unitsReported.Load()
}

// decisionsLocked counts the local decisions made from g: the units spent
// from its grants less the units above 1 of each; g.mu is held.
func (g *grantState) decisionsLocked() uint64 {
	return uint64(g.spentBefore + g.base - g.avail.sum() - g.extra.Load())
}
