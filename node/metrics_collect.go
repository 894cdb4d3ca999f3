package node

import (
	"strconv"
	"time"

	"github.com/hashicorp/raft"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/quorate/quorate/admission"
	"github.com/quorate/quorate/fsm"
	"github.com/quorate/quorate/node/internal/engine"
	"github.com/quorate/quorate/node/internal/replica"
)

// The metrics read at scrape time: the state of each group replica this
// node hosts (Raft's numbers from raft.Stats and its accessors, the FSM's
// counts, the newest snapshot's size), the meta replica's policies and
// plans, and lease saturation on the groups led here.
//
// Raft's own go-metrics go to the process-wide go-metrics sink, which every
// group and every node of a process would share, so they cannot be told
// apart by group or node: the node leaves them alone (quorate serve, one
// node per process, routes them into the registry), and the numbers that
// matter per group are read per replica here.

var (
	descRaftState   = groupDesc("quorate_raft_state", "1 for the Raft state this node's replica of the group is in (leader, follower, candidate, shutdown).", "state")
	descRaftTerm    = groupDesc("quorate_raft_term", "The replica's current Raft term.")
	descCommitIndex = groupDesc("quorate_raft_commit_index", "The replica's commit index.")
	descAppliedIdx  = groupDesc("quorate_raft_applied_index", "The replica's applied index.")
	descLastLogIdx  = groupDesc("quorate_raft_last_log_index", "The last index in the replica's log.")
	descAppliedLag  = groupDesc("quorate_group_applied_index_lag", "Entries committed but not yet applied on this replica (commit index - applied index).")
	descFSMPending  = groupDesc("quorate_raft_fsm_pending", "Committed entries queued for this replica's FSM.")
	descLastContact = groupDesc("quorate_raft_last_contact_seconds", "Seconds since a follower replica last heard from its leader (0 on the leader; absent before any contact).")
	descVoters      = groupDesc("quorate_raft_voters", "Voters in the group's configuration as this replica knows it.")
	descKeys        = groupDesc("quorate_group_keys", "Keys (buckets and semaphores) the replica holds.")
	descRequestIDs  = groupDesc("quorate_group_request_ids", "Request-ID entries the replica holds (expired ones not yet reclaimed included).")
	descRequestIDB  = groupDesc("quorate_group_request_id_bytes", "Estimated memory of the replica's request-ID entries.")
	descReserved    = groupDesc("quorate_group_reservations", "Outstanding reservations the replica holds.")
	descGrants      = groupDesc("quorate_group_grants", "Budget leases the replica holds (expired ones not yet reclaimed included).")
	descGrantUnits  = groupDesc("quorate_group_granted_units", "Units granted by the replica's budget leases and not reported spent.")
	descGrantWaste  = prometheus.NewDesc("quorate_group_grant_wasted_units_total",
		"Units granted but neither reported spent nor given back (a holder that never released: under-admission), as this replica applied since it started.", []string{"group"}, nil)
	descSyncOver = prometheus.NewDesc("quorate_group_sync_overshoot_units_total",
		"Units local-plus-global (local.mode sync) holders reported admitting beyond what their key had left, as this replica applied since it started: over-admission, bounded per key and window by the policy's sync bound.", []string{"group"}, nil)
	descSnapBytes = groupDesc("quorate_group_snapshot_bytes", "Size of the replica's newest snapshot (0 before the first).")

	descPolicyInfo = prometheus.NewDesc("quorate_policy_info",
		"1 for each policy of the meta replica's table, with its version and algorithm (at most 200 policies).", []string{"policy", "version", "algorithm"}, nil)
	descLeasesHeld = prometheus.NewDesc("quorate_leases_held",
		"Live leases of a concurrency policy on the groups this node leads.", []string{"policy"}, nil)
	descLeaseCap = prometheus.NewDesc("quorate_lease_capacity",
		"The policy's limit times the keys holding leases, on the groups this node leads: quorate_leases_held / quorate_lease_capacity is the saturation of the keys in use.", []string{"policy"}, nil)
	descPlans = prometheus.NewDesc("quorate_plans",
		"Plans in the meta replica, by state.", []string{"state"}, nil)
	descPlanSteps = prometheus.NewDesc("quorate_plan_steps",
		"Steps of the running plan (0 when no plan runs).", nil, nil)
	descPlanStepsDone = prometheus.NewDesc("quorate_plan_steps_done",
		"Steps of the running plan already done (0 when no plan runs).", nil, nil)
)

func groupDesc(name, help string, labels ...string) *prometheus.Desc {
	return prometheus.NewDesc(name, help, append([]string{"group"}, labels...), nil)
}

// groupCollector collects the scrape-time metrics of m's node.
type groupCollector struct{ m *metrics }

func (c groupCollector) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range []*prometheus.Desc{descRaftState, descRaftTerm, descCommitIndex, descAppliedIdx, descLastLogIdx,
		descAppliedLag, descFSMPending, descLastContact, descVoters, descKeys, descRequestIDs, descRequestIDB, descReserved, descGrants, descGrantUnits, descGrantWaste, descSyncOver,
		descSnapBytes, descPolicyInfo, descLeasesHeld, descLeaseCap, descPlans, descPlanSteps, descPlanStepsDone} {
		ch <- d
	}
}

func (c groupCollector) Collect(ch chan<- prometheus.Metric) {
	n := c.m.n
	if n.meta == nil || n.meta.Raft == nil {
		return
	}
	leases := map[string]fsm.LeaseUse{}
	for _, g := range n.engine.Hosted() {
		if g.Raft == nil {
			continue
		}
		c.collectGroup(ch, g)
		if g.IsLeader() {
			for p, u := range g.FSM.LeasesHeld() {
				t := leases[p]
				t.Keys, t.Held = t.Keys+u.Keys, t.Held+u.Held
				leases[p] = t
			}
		}
	}
	c.collectPolicies(ch, leases)
	c.collectPlans(ch)
}

func (c groupCollector) collectGroup(ch chan<- prometheus.Metric, g *replica.Replica) {
	gl := groupLabel(g.ID)
	gauge := func(d *prometheus.Desc, v float64, labels ...string) {
		ch <- prometheus.MustNewConstMetric(d, prometheus.GaugeValue, v, append([]string{gl}, labels...)...)
	}
	state := g.Raft.State()
	for _, s := range []raft.RaftState{raft.Leader, raft.Follower, raft.Candidate, raft.Shutdown} {
		v := 0.0
		if s == state {
			v = 1
		}
		gauge(descRaftState, v, roleName(s))
	}
	commit, applied := g.Raft.CommitIndex(), g.Raft.AppliedIndex()
	gauge(descRaftTerm, float64(g.Raft.CurrentTerm()))
	gauge(descCommitIndex, float64(commit))
	gauge(descAppliedIdx, float64(applied))
	gauge(descLastLogIdx, float64(g.Raft.LastIndex()))
	gauge(descAppliedLag, float64(commit-min(commit, applied)))
	stats := g.Raft.Stats()
	if v, err := strconv.ParseFloat(stats["fsm_pending"], 64); err == nil {
		gauge(descFSMPending, v)
	}
	if state == raft.Leader {
		gauge(descLastContact, 0)
	} else if t := g.Raft.LastContact(); !t.IsZero() {
		gauge(descLastContact, time.Since(t).Seconds())
	}
	if f := g.Raft.GetConfiguration(); f.Error() == nil {
		voters := 0
		for _, sv := range f.Configuration().Servers {
			if sv.Suffrage == raft.Voter {
				voters++
			}
		}
		gauge(descVoters, float64(voters))
	}
	gauge(descKeys, float64(g.FSM.BucketCount()+g.FSM.SemaphoreCount()))
	gauge(descRequestIDs, float64(g.FSM.DedupeLen()))
	gauge(descRequestIDB, float64(max(0, g.FSM.DedupeBytes())))
	gauge(descReserved, float64(g.FSM.ReservationCount()))
	grants, units, wasted := g.FSM.GrantStats()
	gauge(descGrants, float64(grants))
	gauge(descGrantUnits, float64(units))
	ch <- prometheus.MustNewConstMetric(descGrantWaste, prometheus.CounterValue, float64(wasted), gl)
	ch <- prometheus.MustNewConstMetric(descSyncOver, prometheus.CounterValue, float64(g.FSM.SyncStats()), gl)
	snapBytes := 0.0
	if g.Snaps != nil {
		if list, err := g.Snaps.List(); err == nil && len(list) > 0 {
			snapBytes = float64(list[0].Size)
		}
	}
	gauge(descSnapBytes, snapBytes)
}

// collectPolicies sends the policy info of up to maxPolicyLabels policies
// and the lease saturation of the concurrency policies among them.
func (c groupCollector) collectPolicies(ch chan<- prometheus.Metric, leases map[string]fsm.LeaseUse) {
	policies := c.m.n.meta.FSM.Policies()
	for i, pv := range policies {
		if i == maxPolicyLabels {
			break
		}
		p := pv.Policy
		ch <- prometheus.MustNewConstMetric(descPolicyInfo, prometheus.GaugeValue, 1,
			p.Name, strconv.FormatUint(pv.Version, 10), string(p.Algorithm))
		if p.Algorithm != admission.AlgorithmConcurrency {
			continue
		}
		u := leases[p.Name]
		ch <- prometheus.MustNewConstMetric(descLeasesHeld, prometheus.GaugeValue, float64(u.Held), p.Name)
		ch <- prometheus.MustNewConstMetric(descLeaseCap, prometheus.GaugeValue, float64(u.Keys*p.Limit), p.Name)
	}
}

// collectPlans sends the count of plans by state and the running plan's
// progress.
func (c groupCollector) collectPlans(ch chan<- prometheus.Metric) {
	meta := c.m.n.meta.FSM
	byState := map[string]int{}
	for _, s := range []uint32{fsm.PlanRunning, fsm.PlanDone, fsm.PlanCancelling, fsm.PlanCancelled, fsm.PlanFailed} {
		byState[engine.PlanStateName(s)] = 0
	}
	for _, p := range meta.Plans() {
		byState[engine.PlanStateName(p.GetState())]++
	}
	for s, k := range byState {
		ch <- prometheus.MustNewConstMetric(descPlans, prometheus.GaugeValue, float64(k), s)
	}
	steps, done := 0, 0
	if p, ok := meta.ActivePlan(); ok {
		steps, done = len(p.GetSteps()), int(p.GetCurrent())
	}
	ch <- prometheus.MustNewConstMetric(descPlanSteps, prometheus.GaugeValue, float64(steps))
	ch <- prometheus.MustNewConstMetric(descPlanStepsDone, prometheus.GaugeValue, float64(done))
}
