package client

import (
	"cmp"
	"slices"
	"time"
)

// A request with Also (the middleware's several limits) is decided from
// grants when every one of its checks has a live grant holding its cost:
// all or nothing. The spend holds the mutexes of the checks' grants (in
// key order, so that two such spends never wait on each other; a grant's
// loop holds only its own), so that no renewal, expiry or release sees
// units taken for a request that is then decided strictly: the units taken
// from the checks that had them go back before the mutexes do. Single-check
// spends of the same keys go on without the mutexes meanwhile: they only
// ever find fewer units. A check whose key has no grant state, or whose
// policy has no local decisions, sends the whole request to the cluster.

// spendAll decides r, a request with Also, from the grants of all its
// checks and writes the decision into d: false (d untouched) when one of
// them cannot spend its check's cost, and then nothing was spent locally;
// the caller decides r strictly, as the cluster decides every denial.
func (m *grants) spendAll(r *Request, d *Decision) bool {
	if r.RequestID != "" || r.MaxWait != 0 {
		return false
	}
	n := 1 + len(r.Also)
	checks := make([]Check, n)
	checks[0] = Check{Policy: r.Policy, Key: r.Key, Cost: r.Cost}
	copy(checks[1:], r.Also)
	states := *m.states.Load()
	gs := make([]*grantState, n)
	missing := false
	for i := range checks {
		ch := &checks[i]
		if ch.Cost < 0 {
			return false
		}
		if ch.Cost == 0 {
			ch.Cost = 1
		}
		if gs[i] = states[bucketKey{ch.Policy, ch.Key}]; gs[i] == nil {
			m.miss(ch.Policy, ch.Key)
			missing = true
		}
	}
	if missing {
		return false
	}
	locked := lockOrder(gs)
	for _, g := range locked {
		g.mu.Lock()
	}
	lefts := make([]int64, n)
	short := -1
	hint := m.hints.get()
	for i, g := range gs {
		left, _, _, ok := g.avail.take(hint.i, checks[i].Cost)
		if !ok {
			short = i
			for j := range i {
				gs[j].avail.add(checks[j].Cost)
			}
			break
		}
		lefts[i] = left
	}
	m.hints.put(hint, false)
	if short < 0 {
		for i, g := range gs {
			// A request is one decision: the first check's grant counts it
			// (its units above 1 are extra), the others' count none.
			extra := checks[i].Cost
			if i == 0 {
				extra--
			}
			if extra != 0 {
				g.extra.Add(extra)
			}
		}
	}
	for _, g := range locked {
		g.mu.Unlock()
	}
	if short >= 0 {
		for i, g := range gs {
			if i == short {
				g.short() // acquires or renews the grant that lacked units
			} else {
				g.strict.Add(1)
			}
		}
		return false
	}
	for i, g := range gs {
		if lefts[i] < g.lowWater.Load() {
			g.wake()
		}
	}
	gs[0].fill(d, r, lefts[0])
	d.Checks = make([]CheckResult, n)
	for i, g := range gs {
		limit := g.limit.Load()
		d.Checks[i] = CheckResult{Policy: checks[i].Policy, Key: checks[i].Key, Allowed: true, Limit: limit,
			Remaining: g.keyUnits(lefts[i], limit), ResetAfter: time.Duration(g.resetAfter.Load()),
			Window: time.Duration(g.window.Load()), Quota: g.quota.Load(), PolicyVersion: g.version.Load()}
	}
	return true
}

// lockOrder is the distinct states of gs in the order their mutexes are
// taken: by policy, then key.
func lockOrder(gs []*grantState) []*grantState {
	out := slices.Clone(gs)
	slices.SortFunc(out, func(a, b *grantState) int {
		return cmp.Or(cmp.Compare(a.key.policy, b.key.policy), cmp.Compare(a.key.key, b.key.key))
	})
	return slices.Compact(out)
}
