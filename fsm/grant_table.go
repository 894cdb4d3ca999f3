package fsm

import (
	"cmp"
	"slices"

	"github.com/quorate/quorate/admission"
	"github.com/quorate/quorate/fsm/internal/table"
	raftcmdv1 "github.com/quorate/quorate/proto/quorate/raftcmd/v1"
	"github.com/quorate/quorate/shard"
)

// grant is one budget lease: units of (policy, key) spent from the key's
// state when granted and held by (caller, holder) to spend in memory; or,
// when sync is set, a local-plus-global allowance (grant_sync.go): total is
// what the holder may admit until its next report, nothing spent ahead, and
// used what it reported admitting over the record's life, charged as
// reported. Its policy, key and caller share the copies its key's aggregate
// holds (grantTable.put): a grant's own memory is its fields and holder.
type grant struct {
	sync                        bool
	policy, key, caller, holder string
	seq                         uint64 // of the last call applied
	total, used, demand         int64  // granted over its life; reported spent; counted demand_milli (grant_demand.go)
	startedAt, expiresAt        int64
	// What the group saw the holder spend (observeSpend): the rate of its
	// last complete observation, in milli-units per second, and the time
	// and used at which the current one began.
	spendRate, obsAt, obsUsed int64
	// What a release can give back: the last top-up's units as the spend
	// they made, and those of earlier top-ups still held (carried) as one
	// spend placed no later than they lie (carry).
	lastTopUp, carried admission.Spend
	// The last call's answer, which a retry of it gets back: its top-up
	// (0 when it added nothing), time, remaining units and policy version.
	lastAdded, lastDecidedAt, lastRemaining int64
	lastPolicyVersion                       uint64
}

// grantAgg is what a key's grants add up to: the sum of the demands of its
// reserve grants (a sync record's demand is summed over the live ones when
// needed, syncOthers), the IDs of all (one per holder), and how many each
// caller holds (for MaxGrantsPerCaller). It holds the one copy of the
// policy's name, the key and each caller's name that the key's grants
// share.
type grantAgg struct {
	policy, key string
	demand      int64
	ids         []string
	callers     map[string]*callerGrants
}

// callerGrants is one caller's grants of a key: the shared copy of its
// name and their number.
type callerGrants struct {
	name string
	n    int
}

// aggKey finds a key's aggregate; it shares the aggregate's strings.
type aggKey struct{ policy, key string }

// grantTable is a group's budget leases by grant ID (grantID), in their
// expiry order, with per-key aggregates (by policy and key) that every change
// keeps: Put, Remove, the sweep (OnExpire) and restore (put again). The
// aggregates are derived state: not in snapshots, rebuilt from the grants.
type grantTable struct {
	t    *table.StateTable[grant]
	aggs map[aggKey]*grantAgg
	// units is what the reserve grants hold unspent: Σ total − used.
	units int64
}

// newGrantTable returns an empty table whose sweep calls onExpire with each
// grant it deletes (after the aggregates forgot it) and the sweep's time.
func newGrantTable(onExpire func(g grant, now int64)) *grantTable {
	gt := &grantTable{t: table.NewStateTable(grantExpires), aggs: map[aggKey]*grantAgg{}}
	gt.t.OnExpire = func(id string, g grant, now int64) {
		gt.forget(id, g)
		onExpire(g, now)
	}
	return gt
}

func grantExpires(_ admission.Policy, g grant) int64 { return g.expiresAt }

// grantID names a grant by (policy, key, caller, holder): 128 bits of the
// SHA-256 of the four, each length-prefixed, so that an ID costs 16 bytes
// whatever the lengths, and no caller can choose a tuple whose ID another
// grant has (that needs a second preimage of 128 bits).
func grantID(policy, key, caller, holder string) string {
	sum := newFingerprint("grant").str(policy).str(key).str(caller).str(holder).sum()
	return string(sum[:])
}

func (gt *grantTable) get(id string) (grant, bool) { return gt.t.Get(id) }
func (gt *grantTable) len() int                    { return gt.t.Len() }

// agg returns the aggregate of (policy, key), nil when it has no grant.
func (gt *grantTable) agg(policy, key string) *grantAgg { return gt.aggs[aggKey{policy, key}] }

// callerGrants is the number of grants caller holds on (policy, key),
// expired ones not yet deleted included.
func (gt *grantTable) callerGrants(policy, key, caller string) int {
	if a := gt.agg(policy, key); a != nil {
		if cg := a.callers[caller]; cg != nil {
			return cg.n
		}
	}
	return 0
}

// put stores grant g under id and updates its key's aggregate; g's policy,
// key and caller become the aggregate's copies.
func (gt *grantTable) put(id string, g grant) {
	a := gt.aggs[aggKey{g.policy, g.key}]
	if a == nil {
		a = &grantAgg{policy: g.policy, key: g.key, callers: map[string]*callerGrants{}}
		gt.aggs[aggKey{a.policy, a.key}] = a
	}
	g.policy, g.key = a.policy, a.key
	gt.units += g.unspent()
	if old, ok := gt.t.Get(id); ok {
		a.demand += g.reserveDemand() - old.reserveDemand()
		gt.units -= old.unspent()
		g.caller, g.holder = old.caller, old.holder
	} else {
		cg := a.callers[g.caller]
		if cg == nil {
			cg = &callerGrants{name: g.caller}
			a.callers[cg.name] = cg
		}
		cg.n++
		g.caller = cg.name
		a.demand += g.reserveDemand()
		a.ids = append(a.ids, id)
	}
	gt.t.Put(id, g, g.expiresAt)
}

// unspent is what a reserve grant holds unspent; a sync allowance holds
// nothing spent.
func (g grant) unspent() int64 {
	if g.sync {
		return 0
	}
	return g.total - g.used
}

// reserveDemand is g's demand in its key's reserve aggregate.
func (g grant) reserveDemand() int64 {
	if g.sync {
		return 0
	}
	return g.demand
}

// remove deletes the grant id, if any.
func (gt *grantTable) remove(id string) {
	if g, ok := gt.t.Get(id); ok {
		gt.forget(id, g)
		gt.t.Remove(id)
	}
}

// forget takes grant g (id) out of its key's aggregate.
func (gt *grantTable) forget(id string, g grant) {
	gt.units -= g.unspent()
	k := aggKey{g.policy, g.key}
	a := gt.aggs[k]
	if a == nil {
		return
	}
	a.demand -= g.reserveDemand()
	if i := slices.Index(a.ids, id); i >= 0 {
		a.ids = slices.Delete(a.ids, i, i+1)
	}
	if cg := a.callers[g.caller]; cg != nil {
		if cg.n--; cg.n == 0 {
			delete(a.callers, g.caller)
		}
	}
	if len(a.ids) == 0 {
		delete(gt.aggs, k)
	}
}

// sweep deletes up to limit expired grants, smallest (expiry, ID) first.
func (gt *grantTable) sweep(now int64, limit int) { gt.t.Sweep(now, limit, noPolicy) }

// entries copies every grant, unsorted.
func (gt *grantTable) entries() []table.Record[grant] { return gt.t.Entries() }

// deleteSlots deletes the grants of keys in set, in ID order, and returns
// them.
func (gt *grantTable) deleteSlots(set *slotSet) []grant {
	var ids []string
	for _, r := range gt.t.Entries() {
		if set.has(shard.SlotOf(r.State.key)) {
			ids = append(ids, r.Key)
		}
	}
	slices.Sort(ids)
	out := make([]grant, 0, len(ids))
	for _, id := range ids {
		g, _ := gt.t.Get(id)
		out = append(out, g)
		gt.remove(id)
	}
	return out
}

// sortGrants orders grant records by ID, as snapshots write them.
func sortGrants(rs []table.Record[grant]) {
	slices.SortFunc(rs, func(a, b table.Record[grant]) int { return cmp.Compare(a.Key, b.Key) })
}

func grantToRecord(rec *raftcmdv1.GrantRecord, g grant) {
	rec.Policy, rec.Key, rec.Holder, rec.Caller, rec.Seq = g.policy, g.key, g.holder, g.caller, g.seq
	rec.Total, rec.Used, rec.DemandMilli = g.total, g.used, g.demand
	rec.StartedAtUnixNano, rec.ExpiresAtUnixNano = g.startedAt, g.expiresAt
	rec.LastAdded = g.lastAdded
	rec.LastTopUp, rec.Carried = spendRecord(rec.LastTopUp, g.lastTopUp), spendRecord(rec.Carried, g.carried)
	rec.LastDecidedAtUnixNano, rec.LastRemaining, rec.LastPolicyVersion = g.lastDecidedAt, g.lastRemaining, g.lastPolicyVersion
	rec.Sync = g.sync
	rec.SpendRateMilli, rec.ObservedAtUnixNano, rec.ObservedUsed = g.spendRate, g.obsAt, g.obsUsed
}

func grantFromRecord(rec *raftcmdv1.GrantRecord) (string, grant) {
	g := grant{policy: rec.GetPolicy(), key: rec.GetKey(), holder: rec.GetHolder(), caller: rec.GetCaller(), seq: rec.GetSeq(),
		total: rec.GetTotal(), used: rec.GetUsed(), demand: rec.GetDemandMilli(),
		startedAt: rec.GetStartedAtUnixNano(), expiresAt: rec.GetExpiresAtUnixNano(),
		lastAdded: rec.GetLastAdded(), lastTopUp: spendFromRecord(rec.GetLastTopUp()), carried: spendFromRecord(rec.GetCarried()),
		lastDecidedAt: rec.GetLastDecidedAtUnixNano(), lastRemaining: rec.GetLastRemaining(), lastPolicyVersion: rec.GetLastPolicyVersion(),
		sync: rec.GetSync(), spendRate: rec.GetSpendRateMilli(), obsAt: rec.GetObservedAtUnixNano(), obsUsed: rec.GetObservedUsed()}
	return grantID(g.policy, g.key, g.caller, g.holder), g
}

// spendRecord fills rec (reused when not nil) from sp; nil for no units.
func spendRecord(rec *raftcmdv1.SpendRecord, sp admission.Spend) *raftcmdv1.SpendRecord {
	if sp == (admission.Spend{}) {
		return nil
	}
	if rec == nil {
		rec = new(raftcmdv1.SpendRecord)
	}
	rec.Cost, rec.AtUnixNano, rec.UntilUnixNano, rec.ShiftedNanos = sp.Cost, sp.At, sp.Until, sp.Shifted
	return rec
}

func spendFromRecord(rec *raftcmdv1.SpendRecord) admission.Spend {
	return admission.Spend{Cost: rec.GetCost(), At: rec.GetAtUnixNano(), Until: rec.GetUntilUnixNano(), Shifted: rec.GetShiftedNanos()}
}
