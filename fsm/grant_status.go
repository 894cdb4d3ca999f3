package fsm

import (
	"cmp"
	"slices"
)

// GrantedKey is what the live grants of one (policy, key) add up to in a
// replica, for status: how many holders, and the units granted to them not
// yet reported spent (a local-plus-global allowance counts whole: nothing
// was spent ahead).
type GrantedKey struct {
	Policy, Key string
	Holders     uint32
	Unspent     int64
}

// GrantedKeyOf returns what the live grants of (policy, key) add up to, as
// of the last applied entry; false when it has none.
func (f *FSM) GrantedKeyOf(policy, key string) (GrantedKey, bool) {
	f.mu.RLock()
	defer f.mu.RUnlock()
	a := f.data.grants.agg(policy, key)
	if a == nil {
		return GrantedKey{}, false
	}
	gk := f.sumGrants(a)
	return gk, gk.Holders > 0
}

// GrantedKeys returns up to limit keys with live grants, as of the last
// applied entry, the most units granted unspent first (then by policy and
// key). Grants are replicated state: every replica of the group, whichever
// leads it, answers alike.
func (f *FSM) GrantedKeys(limit int) []GrantedKey {
	if limit <= 0 {
		return nil
	}
	f.mu.RLock()
	var out []GrantedKey
	for _, a := range f.data.grants.aggs {
		if gk := f.sumGrants(a); gk.Holders > 0 {
			out = append(out, gk)
		}
	}
	f.mu.RUnlock()
	slices.SortFunc(out, func(x, y GrantedKey) int {
		return cmp.Or(cmp.Compare(y.Unspent, x.Unspent), cmp.Compare(x.Policy, y.Policy), cmp.Compare(x.Key, y.Key))
	})
	return out[:min(len(out), limit)]
}

// sumGrants adds up the live grants of a, one key's aggregate, with the
// FSM's lock held.
func (f *FSM) sumGrants(a *grantAgg) GrantedKey {
	var gk GrantedKey
	for _, id := range a.ids {
		g, ok := f.data.grants.get(id)
		if !ok || g.expiresAt <= f.lastNow {
			continue
		}
		gk.Policy, gk.Key = g.policy, g.key
		gk.Holders++
		if g.sync {
			gk.Unspent += g.total
		} else {
			gk.Unspent += max(0, g.total-g.used)
		}
	}
	return gk
}
