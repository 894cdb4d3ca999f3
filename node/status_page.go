package node

import (
	"bytes"
	"cmp"
	"context"
	"errors"
	"fmt"
	"net/http"
	"slices"
	"strings"
	"time"

	"github.com/quorate/quorate/access"
	"github.com/quorate/quorate/fsm"
	"github.com/quorate/quorate/node/internal/control"
	raftcmdv1 "github.com/quorate/quorate/proto/quorate/raftcmd/v1"
	quoratev1 "github.com/quorate/quorate/proto/quorate/v1"
	"github.com/quorate/quorate/shard"
	"github.com/quorate/quorate/statuspage"
)

// The status page (package statuspage renders it): GET /status on the port
// that serves admin calls — the admin listener when there is one, else the
// API port. It shows admin data (keys among them), so it needs what
// ClusterStatus needs: with an access file, a caller with the admin role
// (a client certificate or a bearer token, as for the API); without one the
// node serves only loopback and the page is open.

// statusPagePath is where the page is served.
const statusPagePath = "/status"

// statusPageRefresh is how often the browser reloads the page.
const statusPageRefresh = 5 * time.Second

// hotKeysOnPage is how many hot keys the page lists, all groups together.
const hotKeysOnPage = 20

// statusPage serves the page. Made in New, before the servers.
type statusPage struct {
	self string // this node's ID
	// adminElsewhere is set when the node has an admin listener, which
	// alone serves the page.
	adminElsewhere bool
	authorize      func(ctx context.Context, action access.Action, msg any) error // the edge's (edgeAuth)
	// clusterStatus is ClusterStatus's answer; ownStatus, this node's
	// entry alone, for when that fails.
	clusterStatus func(ctx context.Context) (*quoratev1.ClusterStatusResponse, error)
	ownStatus     func() *quoratev1.MemberStatus
	meta          metaView // the meta replica's state
	now           func() time.Time
}

// metaView is what the status page reads of the meta replica's state
// (*fsm.FSM).
type metaView interface {
	Policies() []fsm.PolicyVersion
	Plans() []*raftcmdv1.Plan
	ShardMap() (shard.Map, bool)
}

// register registers the page on mux, the mux of a server of kind.
func (sp *statusPage) register(mux *http.ServeMux, kind serverKind) {
	switch {
	case kind == serveAdmin || kind == serveAPI && !sp.adminElsewhere:
		mux.HandleFunc("GET "+statusPagePath, sp.serve)
	case kind == serveAPI:
		mux.HandleFunc("GET "+statusPagePath, func(w http.ResponseWriter, _ *http.Request) {
			http.Error(w, "the status page is served on the admin address (--admin-addr)", http.StatusNotFound)
		})
	}
}

func (sp *statusPage) serve(w http.ResponseWriter, r *http.Request) {
	if err := sp.authorize(r.Context(), access.ActionClusterStatus, nil); err != nil {
		code := http.StatusForbidden
		if errors.Is(err, access.ErrUnauthenticated) {
			code = http.StatusUnauthorized
			w.Header().Set("WWW-Authenticate", `Bearer realm="quorate"`)
		}
		http.Error(w, err.Error(), code)
		return
	}
	ctx, cancel := context.WithTimeout(r.Context(), 2*control.MemberStatusTimeout)
	defer cancel()
	var b bytes.Buffer
	if err := statuspage.Render(&b, sp.gather(ctx)); err != nil {
		http.Error(w, "rendering the status page: "+err.Error(), http.StatusInternalServerError)
		return
	}
	w.Header().Set("Content-Type", "text/html; charset=utf-8")
	w.Header().Set("Cache-Control", "no-store")
	w.Header().Set("Content-Security-Policy", "default-src 'none'; style-src 'unsafe-inline'")
	_, _ = w.Write(b.Bytes())
}

// gather gathers the page: every member's own state (as ClusterStatus
// asks for it), and the policies, plans and shard map of this node's meta
// replica.
func (sp *statusPage) gather(ctx context.Context) *statuspage.Page {
	p := &statuspage.Page{NodeID: sp.self, GeneratedAt: time.Now(), Refresh: statusPageRefresh}
	cs, err := sp.clusterStatus(ctx)
	if err != nil {
		p.Problems = append(p.Problems, "cluster status: "+err.Error())
		cs = &quoratev1.ClusterStatusResponse{Members: []*quoratev1.MemberStatus{sp.ownStatus()}}
	}
	p.ClusterID, p.MetaLeader = cs.GetClusterId(), cs.GetLeaderId()
	p.MapEpoch = cs.GetShardMap().GetEpoch()
	for _, m := range cs.GetMembers() {
		p.Members = append(p.Members, memberOnPage(m))
	}
	sm, hasMap := sp.meta.ShardMap()
	p.Groups = groupsOnPage(cs, sm, hasMap)
	p.HotKeys = hotKeysOnPageOf(cs.GetMembers())
	p.Policies = policiesOnPage(sp.meta.Policies(), cs.GetMembers())
	now := sp.now()
	for _, pl := range sp.meta.Plans() {
		st := control.PlanStatus(pl, now)
		e := statuspage.Plan{ID: st.GetId(), Kind: st.GetKind(), Summary: st.GetSummary(), State: st.GetState(), Error: st.GetError(),
			StepsDone: int(st.GetStepsDone()), Steps: len(st.GetSteps()), Age: st.GetAge().AsDuration()}
		if i := e.StepsDone; st.GetState() == "running" && i < len(st.GetSteps()) {
			e.Current = st.GetSteps()[i].GetAction() + " (" + st.GetSteps()[i].GetPhase() + ")"
		}
		p.Plans = append(p.Plans, e)
	}
	slices.SortFunc(p.Plans, func(a, b statuspage.Plan) int { return cmp.Compare(b.ID, a.ID) })
	return p
}

// memberOnPage is m with its health: whether it answered, sees a meta
// leader, and has every replica it hosts working with a leader.
func memberOnPage(m *quoratev1.MemberStatus) statuspage.Member {
	st := m.GetStatus()
	out := statuspage.Member{ID: m.GetId(), APIAddr: m.GetApiAddr(), Suffrage: m.GetSuffrage(), Role: st.GetRole(),
		Applied: st.GetLastAppliedIndex(), Keys: st.GetBuckets(), GroupsHosted: len(st.GetGroups()),
		LocalDecisions: st.GetNodeGrants().GetLocalDecisions(), GrantsHeld: st.GetNodeGrants().GetHeld(),
		UnitsWasted: st.GetNodeGrants().GetUnitsWasted()}
	var problems []string
	switch {
	case st == nil:
		out.Role = "—"
		problems = append(problems, "unreachable: "+m.GetError())
	case st.GetLeaderId() == "":
		problems = append(problems, "no meta leader")
	}
	for _, g := range st.GetGroups() {
		switch {
		case g.GetRole() == "leader":
			out.GroupsLed++
		case g.GetRole() == "damaged" || g.GetStorageError() != "":
			problems = append(problems, fmt.Sprintf("group %d: storage error", g.GetId()))
		case g.GetLeaderId() == "":
			problems = append(problems, fmt.Sprintf("group %d: no leader", g.GetId()))
		}
	}
	out.Healthy, out.Health = len(problems) == 0, "healthy"
	if !out.Healthy {
		out.Health = strings.Join(problems, "; ")
	}
	return out
}

// groupsOnPage is the meta group and every data group of the shard map,
// each with the leader its replicas report (the one that says it leads,
// else the one the replica of the highest term names); sm is the meta
// replica's shard map, when ok.
func groupsOnPage(cs *quoratev1.ClusterStatusResponse, sm shard.Map, ok bool) []statuspage.Group {
	type seen struct {
		term   uint64
		leader string
		keys   uint64
		sure   bool
	}
	views := map[uint32]*seen{}
	for _, m := range cs.GetMembers() {
		for _, g := range m.GetStatus().GetGroups() {
			v := views[g.GetId()]
			if v == nil {
				v = &seen{}
				views[g.GetId()] = v
			}
			switch {
			case g.GetRole() == "leader" && (!v.sure || g.GetTerm() > v.term):
				v.term, v.leader, v.keys, v.sure = g.GetTerm(), m.GetId(), g.GetKeys(), true
			case !v.sure && g.GetTerm() >= v.term && g.GetLeaderId() != "":
				v.term, v.leader, v.keys = g.GetTerm(), g.GetLeaderId(), max(v.keys, g.GetKeys())
			}
		}
	}
	meta := statuspage.Group{ID: uint32(shard.MetaGroup)}
	for _, m := range cs.GetMembers() {
		meta.Replicas = append(meta.Replicas, m.GetId())
	}
	groups := []statuspage.Group{meta}
	if !ok {
		groups[0].Slots, groups[0].Ranges = uint32(shard.SlotCount), shard.AllSlots().String()
	}
	for _, g := range cs.GetShardMap().GetGroups() {
		e := statuspage.Group{ID: g.GetId(), Replicas: g.GetReplicas(), Slots: g.GetSlots(), Forming: g.GetForming()}
		if ok {
			e.Ranges = slotRanges(sm.Owned(shard.GroupID(g.GetId())))
		}
		groups = append(groups, e)
	}
	for i := range groups {
		if v := views[groups[i].ID]; v != nil {
			groups[i].Leader, groups[i].Keys = v.leader, v.keys
		}
	}
	return groups
}

// slotRanges writes assignments' ranges in slot order, adjacent ones merged.
func slotRanges(as []shard.Assignment) string {
	rs := make([]shard.SlotRange, 0, len(as))
	for _, a := range as {
		rs = append(rs, a.Range)
	}
	slices.SortFunc(rs, func(a, b shard.SlotRange) int { return cmp.Compare(a.Start, b.Start) })
	var merged []shard.SlotRange
	for _, r := range rs {
		if k := len(merged); k > 0 && merged[k-1].End == r.Start {
			merged[k-1].End = r.End
			continue
		}
		merged = append(merged, r)
	}
	parts := make([]string, len(merged))
	for i, r := range merged {
		parts[i] = r.String()
	}
	return strings.Join(parts, " ")
}

// hotKeysOnPageOf adds up the hot keys every member counted for each group
// (a member counts while it leads the group) and keeps the heaviest; a key
// listed for its grants alone (no decisions counted) is not hot.
func hotKeysOnPageOf(members []*quoratev1.MemberStatus) []statuspage.HotKey {
	type id struct {
		group       uint32
		policy, key string
	}
	sum := map[id]*statuspage.HotKey{}
	for _, m := range members {
		for _, g := range m.GetStatus().GetGroups() {
			for _, h := range g.GetHotKeys() {
				if h.GetCount() == 0 {
					continue
				}
				k := id{g.GetId(), h.GetPolicy(), h.GetKey()}
				e := sum[k]
				if e == nil {
					e = &statuspage.HotKey{Group: k.group, Policy: k.policy, Key: k.key}
					sum[k] = e
				}
				e.Count += h.GetCount()
				e.Error += h.GetError()
			}
		}
	}
	out := make([]statuspage.HotKey, 0, len(sum))
	for _, e := range sum {
		out = append(out, *e)
	}
	slices.SortFunc(out, func(a, b statuspage.HotKey) int {
		return cmp.Or(cmp.Compare(b.Count, a.Count), cmp.Compare(a.Group, b.Group), cmp.Compare(a.Policy, b.Policy), cmp.Compare(a.Key, b.Key))
	})
	return out[:min(len(out), hotKeysOnPage)]
}

// policiesOnPage is every policy with its version and the decisions the
// members that answered counted for it.
func policiesOnPage(pvs []fsm.PolicyVersion, members []*quoratev1.MemberStatus) []statuspage.Policy {
	counts := map[string]*statuspage.Policy{}
	for _, m := range members {
		for _, d := range m.GetStatus().GetPolicyDecisions() {
			c := counts[d.GetPolicy()]
			if c == nil {
				c = &statuspage.Policy{}
				counts[d.GetPolicy()] = c
			}
			c.Decisions += d.GetDecisions()
			c.Denied += d.GetDenied()
			c.DecisionsPerSec += d.GetDecisionsPerSecond()
			c.DeniedPerSec += d.GetDeniedPerSecond()
			// Each member's minutes end with its current one; the
			// members' clocks agree to well within a minute.
			c.DecisionsByMinute = addByMinute(c.DecisionsByMinute, d.GetDecisionsByMinute())
			c.DeniedByMinute = addByMinute(c.DeniedByMinute, d.GetDeniedByMinute())
		}
	}
	out := make([]statuspage.Policy, 0, len(pvs))
	for _, p := range policiesToAPI(pvs) {
		e := statuspage.Policy{}
		if c := counts[p.GetName()]; c != nil {
			e = *c
		}
		e.Name, e.Algorithm, e.Limit, e.Period, e.Version, e.Shadow = p.GetName(), p.GetAlgorithm(), p.GetLimit(), p.GetPeriod().AsDuration(), p.GetVersion(), p.GetShadow()
		e.Burst, e.Calendar = p.GetBurst(), p.GetCalendar()
		if len(e.DecisionsByMinute) == 0 { // no member decided it lately: an empty chart
			e.DecisionsByMinute, e.DeniedByMinute = make([]uint64, chartMinutes), make([]uint64, chartMinutes)
		}
		out = append(out, e)
	}
	slices.SortFunc(out, func(a, b statuspage.Policy) int { return strings.Compare(a.Name, b.Name) })
	return out
}

// addByMinute adds the per-minute counts of one member, aligned on their
// last (current) minute, to sum. A member reports at most chartMinutes.
func addByMinute(sum, member []uint64) []uint64 {
	member = member[max(0, len(member)-chartMinutes):]
	if len(sum) < len(member) {
		sum = append(make([]uint64, len(member)-len(sum)), sum...)
	}
	off := len(sum) - len(member)
	for i, v := range member {
		sum[off+i] += v
	}
	return sum
}
