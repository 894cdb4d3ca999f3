package node

import (
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/quorate/quorate/fsm"
	"github.com/quorate/quorate/hotkeys"
	quoratev1 "github.com/quorate/quorate/proto/quorate/v1"
	"github.com/quorate/quorate/shard"
)

// Decision statistics for the operators' views (NodeState.policy_decisions,
// GroupState.hot_keys, the status page): what this node decided as the
// leader of its groups, counted where the engine learns each result
// (decideHere). Nothing of it is replicated or snapshotted, and nothing
// reads it to decide: a new leader starts counting from zero.

const (
	// hotKeyCounters is the capacity of each group's sketch: a key whose
	// share of the group's decisions exceeds 1/hotKeyCounters is in it.
	hotKeyCounters = 64
	// hotKeysShown is how many of them NodeState reports per group.
	hotKeysShown = 10
	// rateBucket and rateBuckets make the window of the per-policy rates.
	rateBucket  = 5 * time.Second
	rateBuckets = 12
	// chartMinutes is how many minutes of per-minute counts each policy
	// keeps for the status page's charts.
	chartMinutes = 15
)

// decisionStats is the node's count of decisions, by group (hot keys) and
// by policy. The zero value is ready to use.
type decisionStats struct {
	mu       sync.Mutex
	started  time.Time
	groups   map[shard.GroupID]*hotkeys.Sketch
	policies map[string]*policyCount
}

// policyCount is one policy's decisions since start and, per rateBucket,
// over the last rateBuckets buckets.
type policyCount struct {
	decisions, denied, shadowDenied uint64
	// Ring of buckets by their index (Unix time / rateBucket).
	at            [rateBuckets]int64
	bucketDecided [rateBuckets]uint64
	bucketDenied  [rateBuckets]uint64
	// Ring of minutes by their index (Unix time / time.Minute).
	minuteAt      [chartMinutes]int64
	minuteDecided [chartMinutes]uint64
	minuteDenied  [chartMinutes]uint64
}

// record counts res when it is an Admit decision of group's (a repeat of a
// request ID decided nothing and is not counted).
func (s *decisionStats) Record(group shard.GroupID, res any) {
	r, ok := res.(*fsm.AdmitResult)
	if !ok || r.Duplicate {
		return
	}
	s.add(group, r, time.Now())
}

func (s *decisionStats) add(group shard.GroupID, r *fsm.AdmitResult, now time.Time) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.groups == nil {
		s.started = now
		s.groups = make(map[shard.GroupID]*hotkeys.Sketch)
		s.policies = make(map[string]*policyCount)
	}
	sk := s.groups[group]
	if sk == nil {
		sk = hotkeys.New(hotKeyCounters)
		s.groups[group] = sk
	}
	b := now.UnixNano() / int64(rateBucket)
	m := now.UnixNano() / int64(time.Minute)
	for _, c := range r.Checks {
		sk.Add(c.Policy+"\x00"+c.Key, 1)
		pc := s.policies[c.Policy]
		if pc == nil {
			pc = &policyCount{}
			s.policies[c.Policy] = pc
		}
		i := b % rateBuckets
		if pc.at[i] != b {
			pc.at[i], pc.bucketDecided[i], pc.bucketDenied[i] = b, 0, 0
		}
		j := m % chartMinutes
		if pc.minuteAt[j] != m {
			pc.minuteAt[j], pc.minuteDecided[j], pc.minuteDenied[j] = m, 0, 0
		}
		pc.decisions++
		pc.bucketDecided[i]++
		pc.minuteDecided[j]++
		if !c.Decision.Allowed {
			pc.denied++
			pc.bucketDenied[i]++
			pc.minuteDenied[j]++
		}
		if c.ShadowDenied {
			pc.shadowDenied++
		}
	}
}

// hotKeys is group's heaviest keys as this node counted them.
func (s *decisionStats) hotKeys(group shard.GroupID) []*quoratev1.HotKey {
	s.mu.Lock()
	defer s.mu.Unlock()
	sk := s.groups[group]
	if sk == nil {
		return nil
	}
	var out []*quoratev1.HotKey
	for _, e := range sk.Top(hotKeysShown) {
		policy, key, _ := strings.Cut(e.Key, "\x00")
		out = append(out, &quoratev1.HotKey{Policy: policy, Key: key, Count: e.Count, Error: e.Error})
	}
	return out
}

// byPolicy is every policy's counts, by name, with its rates over the
// buckets of the last minute (since the first decision when that is less).
func (s *decisionStats) byPolicy(now time.Time) []*quoratev1.PolicyDecisions {
	s.mu.Lock()
	defer s.mu.Unlock()
	window := rateBucket * rateBuckets
	if since := now.Sub(s.started); since < window {
		window = max(since, rateBucket)
	}
	b := now.UnixNano() / int64(rateBucket)
	m := now.UnixNano() / int64(time.Minute)
	out := make([]*quoratev1.PolicyDecisions, 0, len(s.policies))
	for name, pc := range s.policies {
		var decided, denied uint64
		for i := range rateBuckets {
			if b-pc.at[i] < rateBuckets {
				decided += pc.bucketDecided[i]
				denied += pc.bucketDenied[i]
			}
		}
		byMinute, deniedByMinute := make([]uint64, chartMinutes), make([]uint64, chartMinutes)
		for k := range chartMinutes {
			if want := m - chartMinutes + 1 + int64(k); pc.minuteAt[want%chartMinutes] == want {
				byMinute[k], deniedByMinute[k] = pc.minuteDecided[want%chartMinutes], pc.minuteDenied[want%chartMinutes]
			}
		}
		out = append(out, &quoratev1.PolicyDecisions{
			DecisionsByMinute:  byMinute,
			DeniedByMinute:     deniedByMinute,
			Policy:             name,
			Decisions:          pc.decisions,
			Denied:             pc.denied,
			ShadowDenied:       pc.shadowDenied,
			DecisionsPerSecond: float64(decided) / window.Seconds(),
			DeniedPerSecond:    float64(denied) / window.Seconds(),
		})
	}
	slices.SortFunc(out, func(a, b *quoratev1.PolicyDecisions) int { return strings.Compare(a.Policy, b.Policy) })
	return out
}

// policySummary is one policy's counts and hot keys, as the metrics read
// them (metrics_decisions.go).
type policySummary struct {
	decisions, denied, shadowDenied uint64
	// heavyKeys counts the policy's keys whose share of their group's
	// decisions surely (their count less its error) exceeds
	// 1/hotKeyCounters; heaviest is the largest such sure count.
	heavyKeys int
	heaviest  uint64
}

// summary is every policy's counts and hot keys, by name.
func (s *decisionStats) summary() map[string]policySummary {
	s.mu.Lock()
	defer s.mu.Unlock()
	out := make(map[string]policySummary, len(s.policies))
	for name, pc := range s.policies {
		out[name] = policySummary{decisions: pc.decisions, denied: pc.denied, shadowDenied: pc.shadowDenied}
	}
	for _, sk := range s.groups {
		for _, e := range sk.Top(-1) {
			sure := e.Count - e.Error
			if sure*hotKeyCounters <= sk.Total() {
				continue
			}
			policy, _, _ := strings.Cut(e.Key, "\x00")
			ps := out[policy]
			ps.heavyKeys++
			ps.heaviest = max(ps.heaviest, sure)
			out[policy] = ps
		}
	}
	return out
}
