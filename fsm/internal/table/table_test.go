package table

import (
	"cmp"
	"fmt"
	"math/rand/v2"
	"reflect"
	"slices"
	"testing"

	"github.com/quorate/quorate/admission"
)

// tableModel is a reference state table: a map, and its keys in a slice
// sorted by (expiry, key).
type tableModel[V any] struct {
	states  map[string]modelEntry[V]
	order   []modelKey
	expires func(admission.Policy, V) int64
}

type modelEntry[V any] struct {
	v   V
	exp int64
}

type modelKey struct {
	exp int64
	key string
}

func compareModelKeys(a, b modelKey) int {
	if c := cmp.Compare(a.exp, b.exp); c != 0 {
		return c
	}
	return cmp.Compare(a.key, b.key)
}

func newTableModel[V any](expires func(admission.Policy, V) int64) *tableModel[V] {
	return &tableModel[V]{states: map[string]modelEntry[V]{}, expires: expires}
}

func (m *tableModel[V]) put(key string, v V, exp int64) {
	m.remove(key)
	m.states[key] = modelEntry[V]{v, exp}
	i, _ := slices.BinarySearchFunc(m.order, modelKey{exp, key}, compareModelKeys)
	m.order = slices.Insert(m.order, i, modelKey{exp, key})
}

func (m *tableModel[V]) remove(key string) {
	e, ok := m.states[key]
	if !ok {
		return
	}
	i, _ := slices.BinarySearchFunc(m.order, modelKey{e.exp, key}, compareModelKeys)
	m.order = slices.Delete(m.order, i, i+1)
	delete(m.states, key)
}

// sweep is StateTable.Sweep's contract, step by step; it returns the keys
// deleted, in order.
func (m *tableModel[V]) sweep(now int64, limit int, policyOf func(string) (admission.Policy, bool)) []string {
	var gone []string
	for i := 0; i < limit && len(m.order) > 0; i++ {
		k := m.order[0].key
		e := m.states[k]
		if e.exp > now {
			break
		}
		if p, ok := policyOf(k); ok {
			if at := m.expires(p, e.v); at > now {
				m.put(k, e.v, at)
				continue
			}
		}
		gone = append(gone, k)
		m.remove(k)
	}
	return gone
}

// checkTable compares a table's contents with the model's.
func checkTable[V any](t *testing.T, step int, tab interface {
	Len() int
	Get(string) (V, bool)
	NextExpiry() (int64, bool)
	Entries() []Record[V]
}, m *tableModel[V], probe string) {
	t.Helper()
	if tab.Len() != len(m.states) {
		t.Fatalf("step %d: len %d, want %d", step, tab.Len(), len(m.states))
	}
	v, ok := tab.Get(probe)
	e, wok := m.states[probe]
	if ok != wok || !reflect.DeepEqual(v, e.v) {
		t.Fatalf("step %d: get(%q) = %+v, %v; want %+v, %v", step, probe, v, ok, e.v, wok)
	}
	next, ok := tab.NextExpiry()
	if ok != (len(m.states) > 0) || ok && next != m.order[0].exp {
		t.Fatalf("step %d: nextExpiry %d, %v", step, next, ok)
	}
	if step%97 == 0 {
		got := tab.Entries()
		slices.SortFunc(got, func(a, b Record[V]) int { return cmp.Compare(a.Key, b.Key) })
		var want []Record[V]
		for _, k := range slices.Sorted(func(yield func(string) bool) {
			for k := range m.states {
				if !yield(k) {
					return
				}
			}
		}) {
			want = append(want, Record[V]{Key: k, State: m.states[k].v, ExpiresAt: m.states[k].exp})
		}
		if len(got) != len(want) || len(got) > 0 && !reflect.DeepEqual(got, want) {
			t.Fatalf("step %d: entries differ from the model's", step)
		}
	}
}

// modelPolicyOf: keys of "a/" keep a state alive until its own expiry
// (expires returns it), "b/" has no policy, "c/" is expired by its policy.
func modelPolicyOf(key string) (admission.Policy, bool) {
	switch key[0] {
	case 'a':
		return admission.Policy{Name: "a", Limit: 1}, true
	case 'c':
		return admission.Policy{Name: "c"}, true
	}
	return admission.Policy{}, false
}

// TestStateTableAgainstModel applies random puts (new keys and updates,
// expiries tied and not), removes, shifts (each) and sweeps to a StateTable and to the
// model, through growth and shrinking, and checks that they hold the same
// states and sweep the same keys in the same order.
func TestStateTableAgainstModel(t *testing.T) {
	r := rand.New(rand.NewPCG(5, 6))
	expires := func(p admission.Policy, v int64) int64 {
		if p.Limit == 1 {
			return v
		}
		return 0
	}
	tab := NewStateTable(expires)
	var swept []string
	tab.OnExpire = func(key string, _ int64, _ int64) { swept = append(swept, key) }
	m := newTableModel(expires)
	now := int64(0)
	for step := range 60_000 {
		// Phases: fill with long-lived states, then drain.
		size, horizon, tick := 6000, int64(5000), int64(3)
		if (step/15_000)%2 == 1 {
			size, horizon, tick = 50, 50, 40
		}
		key := fmt.Sprintf("%c/%d", "abc"[r.IntN(3)], r.IntN(size))
		switch x := r.IntN(100); {
		case x < 60:
			v := now + r.Int64N(horizon)
			exp := v
			if r.IntN(4) == 0 {
				exp = now + r.Int64N(10) // recorded expiry before the state's own
			}
			tab.Put(key, v, exp)
			m.put(key, v, exp)
		case x < 70:
			tab.Remove(key)
			m.remove(key)
		case x < 71:
			d := r.Int64N(5)
			tab.Each(func(_ string, v, exp int64) (int64, int64) { return v + d, exp + d })
			for k, e := range m.states {
				m.states[k] = modelEntry[int64]{e.v + d, e.exp + d}
			}
			for i := range m.order {
				m.order[i].exp += d
			}
		default:
			now += r.Int64N(tick)
			limit := 1 + r.IntN(40)
			swept = swept[:0]
			tab.Sweep(now, limit, modelPolicyOf)
			if want := m.sweep(now, limit, modelPolicyOf); !slices.Equal(swept, want) {
				t.Fatalf("step %d: swept %q, want %q", step, swept, want)
			}
		}
		checkTable(t, step, tab, m, key)
	}
}

// TestBucketTableAgainstModel applies random puts of states of every
// algorithm (token buckets recorded with their TAT as expiry or not, windows,
// logs nil, empty or not; a key's state changing shape), sweeps under
// policies of every algorithm (or none) and checks that a BucketTable holds
// the same states and expiries as the model and sweeps the same keys in the
// same order.
func TestBucketTableAgainstModel(t *testing.T) {
	r := rand.New(rand.NewPCG(7, 8))
	policies := map[byte]admission.Policy{
		't': {Name: "t", Algorithm: admission.AlgorithmTokenBucket, Limit: 10, Period: 100, Burst: 10},
		'f': {Name: "f", Algorithm: admission.AlgorithmFixedWindow, Limit: 10, Period: 40},
		'w': {Name: "w", Algorithm: admission.AlgorithmSlidingWindow, Limit: 10, Period: 40},
		'l': {Name: "l", Algorithm: admission.AlgorithmSlidingLog, Limit: 10, Period: 40},
	}
	policyOf := func(key string) (admission.Policy, bool) {
		p, ok := policies[key[0]]
		return p, ok
	}
	tab := NewBucketTable()
	m := newTableModel(admission.ExpiresAt)
	var swept []string
	now := int64(1000)
	for step := range 60_000 {
		size, horizon := 3000, int64(3000)
		if (step/15_000)%2 == 1 {
			size, horizon = 50, 50
		}
		key := fmt.Sprintf("%c/%d", "tfwlx"[r.IntN(5)], r.IntN(size))
		switch x := r.IntN(100); {
		case x < 65:
			var s admission.State
			exp := now + r.Int64N(horizon)
			switch r.IntN(6) {
			case 0, 1:
				s = admission.State{Kind: admission.KindTokenBucket, TAT: exp}
				if r.IntN(8) == 0 {
					exp = r.Int64N(2) * (now - r.Int64N(10)) // another expiry: 0 or past
				}
			case 2:
				s = admission.State{Kind: admission.KindFixedWindow, Start: exp - 40, Count: r.Int64N(10)}
			case 3:
				s = admission.State{Kind: admission.KindSlidingWindow, Start: exp - 80, Count: r.Int64N(10), Prev: r.Int64N(10)}
			case 4:
				s = admission.State{Kind: admission.KindSlidingLog}
				switch r.IntN(3) {
				case 0:
					s.Log = []admission.LogEntry{}
				case 1:
					s.Log = []admission.LogEntry{{At: exp - 40, Cost: 1 + r.Int64N(3)}}
				}
			default: // odd states: fields of several algorithms, or no kind
				s = admission.State{Kind: admission.Kind(r.IntN(6)), TAT: r.Int64N(2) * exp, Start: r.Int64N(3), Count: r.Int64N(3)}
				if r.IntN(3) == 0 {
					s.Log = []admission.LogEntry{{At: exp, Cost: 1}}
				}
			}
			tab.Put(key, s, exp)
			m.put(key, s, exp)
		default:
			now += r.Int64N(horizon / 20)
			limit := 1 + r.IntN(40)
			want := m.sweep(now, limit, policyOf)
			swept = swept[:0]
			before := tab.Entries()
			tab.Sweep(now, limit, policyOf)
			gone := map[string]bool{}
			for _, e := range tab.Entries() {
				gone[e.Key] = true
			}
			for _, e := range before {
				if !gone[e.Key] {
					swept = append(swept, e.Key)
				}
			}
			slices.Sort(swept)
			want = slices.Clone(want)
			slices.Sort(want)
			if !slices.Equal(swept, want) {
				t.Fatalf("step %d: swept %q, want %q", step, swept, want)
			}
		}
		checkTable(t, step, tab, m, key)
	}
	if len(tab.gcra) == 0 || len(tab.counter) == 0 || len(tab.log) == 0 || len(tab.other) == 0 {
		t.Fatalf("the table ended with shapes unused: %d gcra, %d counter, %d log, %d other",
			len(tab.gcra), len(tab.counter), len(tab.log), len(tab.other))
	}
}
