package fsm_test

import (
	"errors"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/quorate/quorate/fsm"
	raftcmdv1 "github.com/quorate/quorate/proto/quorate/raftcmd/v1"
	"github.com/quorate/quorate/shard"
)

// metaCmd is one of the meta group's commands: env builds its entry at
// now; planID is the ID the CreatePlan before it returned.
type metaCmd struct {
	name string
	env  func(now int64, planID uint64) *raftcmdv1.Envelope
}

// metaCommands lists every meta-group-only command, in an order in which
// each succeeds on a meta FSM.
func metaCommands(tb testing.TB) []metaCmd {
	const clusterID = "0123456789abcdef0123456789abcdef"
	sm := initialMap(tb)
	register := func(id string) metaCmd {
		return metaCmd{"RegisterNode", func(now int64, _ uint64) *raftcmdv1.Envelope {
			return registerNodeEnv(now, id, id+":7000", id+":8000")
		}}
	}
	return []metaCmd{
		register("n1"), register("n2"), register("n3"), register("n4"),
		{"RemoveNode", func(now int64, _ uint64) *raftcmdv1.Envelope {
			return &raftcmdv1.Envelope{NowUnixNano: now, Body: &raftcmdv1.Envelope_RemoveNode{RemoveNode: &raftcmdv1.RemoveNode{Id: "n4"}}}
		}},
		{"SetClusterID", func(now int64, _ uint64) *raftcmdv1.Envelope {
			return &raftcmdv1.Envelope{NowUnixNano: now, Body: &raftcmdv1.Envelope_SetClusterId{SetClusterId: &raftcmdv1.SetClusterID{Id: clusterID}}}
		}},
		{"PutPolicies", func(now int64, _ uint64) *raftcmdv1.Envelope {
			return putPoliciesEnv(now, tokenBucket("tb", 1, time.Second, 1, 1), tokenBucket("gone", 1, time.Second, 1, 1))
		}},
		{"DeletePolicies", func(now int64, _ uint64) *raftcmdv1.Envelope { return deletePoliciesEnv(now, "gone") }},
		{"SetShardMap", func(now int64, _ uint64) *raftcmdv1.Envelope { return setShardMapEnv(now, 0, sm) }},
		{"CreatePlan", func(now int64, _ uint64) *raftcmdv1.Envelope { return createPlanEnv(now, moveStep(1, 2, 0, 100)) }},
		{"UpdatePlan", func(now int64, id uint64) *raftcmdv1.Envelope {
			return updatePlanEnv(now, &raftcmdv1.UpdatePlan{Id: id, FromPhase: fsm.PhasePending, ToPhase: fsm.PhaseCopying})
		}},
		{"CancelPlan", func(now int64, id uint64) *raftcmdv1.Envelope { return cancelPlanEnv(now, id) }},
	}
}

// applyMetaCommands applies metaCommands to a meta FSM, each of which must
// succeed, and returns the plan's ID.
func applyMetaCommands(t *testing.T, a *applier) uint64 {
	t.Helper()
	var planID uint64
	for i, c := range metaCommands(t) {
		res := a.apply(c.env(t0+int64(i)*sec, planID))
		if err, ok := res.(error); ok {
			t.Fatalf("%s on the meta group: %v", c.name, err)
		}
		if c.name == "CreatePlan" {
			planID = resultAs[*fsm.PlanResult](t, c.name, res).Plan.GetId()
		}
	}
	return planID
}

// The meta group applies every meta-group command.
func TestMetaGroupAppliesMetaCommands(t *testing.T) {
	a := newApplier(t, fsm.Options{})
	planID := applyMetaCommands(t, a)
	if nodes := a.f.Nodes(); len(nodes) != 3 {
		t.Errorf("Nodes() = %v, want n1..n3", nodes)
	}
	if a.f.ClusterID() == "" {
		t.Error("no cluster ID")
	}
	if _, ok := a.f.Policy("tb"); !ok {
		t.Error("PutPolicies: no policy tb")
	}
	if _, ok := a.f.Policy("gone"); ok {
		t.Error("DeletePolicies: policy gone is still there")
	}
	if _, ok := a.f.ShardMap(); !ok {
		t.Error("no shard map")
	}
	if p, ok := a.f.ActivePlan(); !ok || p.GetId() != planID || p.GetState() != fsm.PlanCancelling {
		t.Errorf("ActivePlan() = %v, %v; want plan %d cancelling", p, ok, planID)
	}
}

// metaReads is what a data group's reads of meta state return.
type metaReads struct {
	nodes     []fsm.Node
	clusterID string
	hasMap    bool
	plans     int
	policies  []fsm.PolicyVersion
	metaIndex uint64
}

func readMeta(f *fsm.FSM) metaReads {
	_, hasMap := f.ShardMap()
	return metaReads{nodes: f.Nodes(), clusterID: f.ClusterID(), hasMap: hasMap, plans: len(f.Plans()),
		policies: f.Policies(), metaIndex: f.PoliciesMetaIndex()}
}

func (r metaReads) equal(o metaReads) bool {
	return slices.Equal(r.nodes, o.nodes) && r.clusterID == o.clusterID && r.hasMap == o.hasMap &&
		r.plans == o.plans && slices.Equal(r.policies, o.policies) && r.metaIndex == o.metaIndex
}

// A data group refuses every meta-group command (SetPolicies and
// SetOwnership are its own) with ErrNotMetaGroup naming it: its meta part
// stays empty and nothing else changes. The refused entry moves time and
// term, shifts leases and sweeps exactly as another refused entry does.
func TestDataGroupRefusesMetaCommands(t *testing.T) {
	planID := applyMetaCommands(t, newApplier(t, fsm.Options{}))
	ks := keysIn(t, "m", 3, lowHalf)
	now := t0 + 10*sec
	// dataGroupWithState is a data group of term 1 holding a bucket, a
	// lease and a reservation that expires within 5 s.
	dataGroupWithState := func() *applier {
		a := dataGroup(t, 1, 1, g1Before()...)
		a.index++
		if res := applyTermLog(a.f, a.index, 1, encode(t, stamp(admitEnv(now, "tb", ks[0], 1), 1))); !resultAs[*fsm.AdmitResult](t, "admit", res).Decision.Allowed {
			t.Fatalf("admit: %+v", res)
		}
		resultAs[*fsm.LeaseResult](t, "acquire", a.apply(stamp(acquireOp("conc", ks[1]).withTTL(time.Minute).env(now), 1)))
		resultAs[*fsm.ReserveResult](t, "reserve", a.apply(stamp(reserveEnv(now, "qu", ks[2], 3, 5*time.Second, "r1"), 1)))
		return a
	}
	seen := map[string]bool{}
	for _, c := range metaCommands(t) {
		if seen[c.name] {
			continue
		}
		seen[c.name] = true
		t.Run(c.name, func(t *testing.T) {
			a, ref := dataGroupWithState(), dataGroupWithState()
			empty := readMeta(a.f)
			if len(empty.nodes) != 0 || empty.clusterID != "" || empty.hasMap || empty.plans != 0 {
				t.Fatalf("a data group's meta part is not empty: %+v", empty)
			}

			// At the group's time: nothing changes at all.
			before := snapshotBytes(t, a.f)
			err := wantErr(t, c.name, a.apply(c.env(a.f.LastNow(), planID)), fsm.ErrNotMetaGroup)
			if !strings.Contains(err.Error(), c.name) {
				t.Errorf("error %q does not name %s", err, c.name)
			}
			if !slices.Equal(before, snapshotBytes(t, a.f)) {
				t.Fatal("a refused meta command changed the snapshot")
			}
			if got := readMeta(a.f); !got.equal(empty) {
				t.Fatalf("meta reads after the refusal %+v, want %+v", got, empty)
			}

			wantErr(t, "unknown policy", ref.apply(stamp(admitEnv(ref.f.LastNow(), "nope", ks[0], 1), 1)), fsm.ErrUnknownPolicy)

			// Later, then in a new term: the same as a refused Admit of an
			// unknown policy (time, the reservation's sweep, then term and
			// lease shift).
			for i, step := range []struct {
				now  int64
				term uint64
			}{{now + 20*sec, 1}, {now + 40*sec, 2}} {
				index := a.index + 1
				a.index, ref.index = index, index
				wantErr(t, c.name+" later", applyTermLog(a.f, index, step.term, encode(t, c.env(step.now, planID))), fsm.ErrNotMetaGroup)
				wantErr(t, "unknown policy", applyTermLog(ref.f, index, step.term, encode(t, stamp(admitEnv(step.now, "nope", ks[0], 1), 1))), fsm.ErrUnknownPolicy)
				if !slices.Equal(snapshotBytes(t, a.f), snapshotBytes(t, ref.f)) {
					t.Fatalf("step %d: a refused meta command moved the state otherwise than a refused Admit", i)
				}
				if a.f.LastNow() != step.now || a.f.ReservationCount() != 0 || a.f.SemaphoreCount() != 1 {
					t.Fatalf("step %d: now %d (want %d), %d reservations (want 0: swept), %d semaphores (want 1)",
						i, a.f.LastNow(), step.now, a.f.ReservationCount(), a.f.SemaphoreCount())
				}
				if got := readMeta(a.f); !got.equal(empty) {
					t.Fatalf("step %d: meta reads %+v, want %+v", i, got, empty)
				}
			}
		})
	}
}

// A data group still applies its own commands that are not data commands:
// SetPolicies and SetOwnership.
func TestDataGroupAppliesSetPoliciesAndSetOwnership(t *testing.T) {
	a := newApplier(t, fsm.Options{DataGroup: true})
	a.setPolicies(t0, tokenBucket("p", 10, time.Second, 10, 1))
	if pv, ok := a.f.Policy("p"); !ok || pv.Version != 1 || a.f.PoliciesMetaIndex() != 1 {
		t.Fatalf("after SetPolicies: Policy(p) = %+v, %v; meta index %d", pv, ok, a.f.PoliciesMetaIndex())
	}
	a.own(t0, 1, 1, shard.Assignment{Range: shard.AllSlots(), Group: 1, Epoch: 1})
	if g, epoch, _, ok := a.f.Ownership(); !ok || g != 1 || epoch != 1 {
		t.Fatalf("after SetOwnership: group %d, epoch %d, %v", g, epoch, ok)
	}
	if r := resultAs[*fsm.AdmitResult](t, "admit", a.apply(stamp(admitEnv(t0, "p", "k", 1), 1))); !r.Decision.Allowed {
		t.Fatalf("admit: %+v", r)
	}
}

// Every command kind is classified: a data group refuses exactly the meta
// group's commands with ErrNotMetaGroup. A new kind fails this test until
// it is added to one list (and, if the meta group's only, to the FSM's).
func TestEveryCommandKindIsClassified(t *testing.T) {
	meta := map[string]bool{}
	for _, c := range metaCommands(t) {
		meta[c.name] = true
	}
	// Kinds by Envelope field name; the meta ones by command name.
	metaFields := map[string]string{
		"register_node": "RegisterNode", "remove_node": "RemoveNode", "set_cluster_id": "SetClusterID",
		"set_shard_map": "SetShardMap", "put_policies": "PutPolicies", "delete_policies": "DeletePolicies",
		"create_plan": "CreatePlan", "update_plan": "UpdatePlan", "cancel_plan": "CancelPlan",
	}
	dataFields := []string{"admit", "peek", "refund", "lease", "reserve", "commit", "grant", "batch", "expire",
		"set_ownership", "set_policies", "freeze_slots", "unfreeze_slots", "import_slots", "drop_import", "restore_slots"}
	if len(metaFields) != len(meta) {
		t.Fatalf("metaCommands has %d kinds, metaFields %d", len(meta), len(metaFields))
	}
	oneof := (&raftcmdv1.Envelope{}).ProtoReflect().Descriptor().Oneofs().ByName("body")
	for i := range oneof.Fields().Len() {
		fd := oneof.Fields().Get(i)
		name := string(fd.Name())
		env := &raftcmdv1.Envelope{NowUnixNano: t0}
		m := env.ProtoReflect()
		m.Set(fd, m.NewField(fd))
		res := newApplier(t, fsm.Options{DataGroup: true}).apply(env)
		err, _ := res.(error)
		switch cmd, isMeta := metaFields[name]; {
		case isMeta:
			if !meta[cmd] {
				t.Errorf("%s: %s is not in metaCommands", name, cmd)
			}
			if !errors.Is(err, fsm.ErrNotMetaGroup) || !strings.Contains(err.Error(), cmd) {
				t.Errorf("%s in a data group: %v, want ErrNotMetaGroup naming %s", name, res, cmd)
			}
		case slices.Contains(dataFields, name):
			if errors.Is(err, fsm.ErrNotMetaGroup) {
				t.Errorf("%s in a data group: %v", name, err)
			}
		default:
			t.Errorf("Envelope field %s is in neither list: classify it", name)
		}
	}
}
