package fsm

import (
	"fmt"
	"maps"
	"slices"

	"github.com/quorate/quorate/shard"

	raftcmdv1 "github.com/quorate/quorate/proto/quorate/raftcmd/v1"
)

// metaState is the state only the meta group serves: the registered
// nodes, the shard map, the plans, the cluster ID, and the date of the
// last change to its policy table. The table itself is the FSM's
// (policyTable): PutPolicies and DeletePolicies, metaState's methods,
// change it through policies. A data group's metaState stays empty: its
// FSM refuses the meta group's commands (metaCommand).
//
// Its commands are its methods: RegisterNode and RemoveNode
// (membership.go), SetClusterID (clusterid.go), SetShardMap (shardmap.go),
// PutPolicies and DeletePolicies (policies.go), CreatePlan, UpdatePlan and
// CancelPlan (plans.go), dispatched by apply (audit.go), which records the
// audited ones. Its part of a snapshot is metaSnapshot.
type metaState struct {
	policies  *policyTable // the FSM's
	nodes     map[string]Node
	shardMap  *shard.Map // nil: no data groups (a single-group cluster)
	plans     []*raftcmdv1.Plan
	clusterID string // "" before SetClusterID
	// audit is the trail of admin changes (audit.go).
	audit auditTrail

	// policiesChangedAt is the log index of the last entry that changed
	// the policy table (0: none yet); policiesChangeUnknown is true from a
	// restore until the next entry, which then counts as the change. Like
	// FSM.appliedIndex it decides nothing: nodes compare it with a data
	// group's PoliciesMetaIndex instead of comparing whole tables.
	policiesChangedAt     uint64
	policiesChangeUnknown bool
}

// metaCommand returns the name of env's command when it is one of the meta
// group's only (metaState's commands but SetPolicies, which copies the
// meta group's table into a data group), and false for any other.
func metaCommand(env *raftcmdv1.Envelope) (string, bool) {
	switch env.GetBody().(type) {
	case *raftcmdv1.Envelope_RegisterNode:
		return "RegisterNode", true
	case *raftcmdv1.Envelope_RemoveNode:
		return "RemoveNode", true
	case *raftcmdv1.Envelope_SetClusterId:
		return "SetClusterID", true
	case *raftcmdv1.Envelope_SetShardMap:
		return "SetShardMap", true
	case *raftcmdv1.Envelope_PutPolicies:
		return "PutPolicies", true
	case *raftcmdv1.Envelope_DeletePolicies:
		return "DeletePolicies", true
	case *raftcmdv1.Envelope_CreatePlan:
		return "CreatePlan", true
	case *raftcmdv1.Envelope_UpdatePlan:
		return "UpdatePlan", true
	case *raftcmdv1.Envelope_CancelPlan:
		return "CancelPlan", true
	}
	return "", false
}

// refuseMetaCommand returns ErrNotMetaGroup, naming the command, for a
// meta-group command applied by a data group (dataGroup:
// Options.DataGroup), and nil for any other command or group. Refused,
// the entry changes nothing but what every entry changes before its
// command (time, term, sweeps: FSM.applyLocked), as any refused command.
//
// Nodes propose these commands to the meta group only, so no log Quorate
// wrote holds one in a data group: refusing them changes no outcome of an
// existing log and needs no feature level (features.go).
func refuseMetaCommand(env *raftcmdv1.Envelope, dataGroup bool) error {
	if !dataGroup {
		return nil
	}
	if name, ok := metaCommand(env); ok {
		return fmt.Errorf("%w: %s is a meta-group command; a data group refuses it", ErrNotMetaGroup, name)
	}
	return nil
}

func newMetaState(policies *policyTable) metaState {
	return metaState{policies: policies, nodes: make(map[string]Node)}
}

// applyRemoveNode forgets a node (an unknown one is no error).
func (m *metaState) applyRemoveNode(c *raftcmdv1.RemoveNode) interface{} {
	delete(m.nodes, c.GetId())
	return nil
}

// metaSnapshot is metaState's part of a snapshot: the header's shard_map,
// plans and cluster_id, and the node records, which follow the policies.
type metaSnapshot struct {
	nodes    []Node // by ID
	shardMap *raftcmdv1.ShardMap
	plans    []*raftcmdv1.Plan
	// clusterID is in the header.
	clusterID string
	// audit are the audit records, oldest first. They follow every other
	// record of the snapshot, counted by the header's audit_count, which
	// is absent when there are none.
	audit []AuditRecord
}

// snapshot copies m's part of a snapshot (the FSM's lock held).
func (m *metaState) snapshot() metaSnapshot {
	s := metaSnapshot{nodes: sortedNodes(m.nodes), plans: clonePlans(m.plans), clusterID: m.clusterID,
		audit: append([]AuditRecord(nil), m.audit.recs...)}
	if m.shardMap != nil {
		s.shardMap = ShardMapToProto(*m.shardMap)
	}
	return s
}

// header fills the header fields of the meta part.
func (s *metaSnapshot) header(h *raftcmdv1.SnapshotHeader) {
	h.NodeCount = uint64(len(s.nodes))
	h.ShardMap, h.Plans, h.ClusterId = s.shardMap, s.plans, s.clusterID
	h.AuditCount = uint64(len(s.audit))
}

// writeRecords writes the meta part's records: nodes by ID.
func (s *metaSnapshot) writeRecords(enc *recordWriter) {
	for _, n := range s.nodes {
		enc.write(&raftcmdv1.RegisterNode{Id: n.ID, RaftAddr: n.RaftAddr, ApiAddr: n.APIAddr, FeatureLevel: n.FeatureLevel})
	}
}

// writeAudit writes the audit records, after every other record.
func (s *metaSnapshot) writeAudit(enc *recordWriter) {
	for _, r := range s.audit {
		enc.write(auditToRecord(r))
	}
}

// readAudit reads the audit records the header counts, after every other
// record. They must be by increasing log index, and at most
// MaxAuditRecords.
func (s *metaSnapshot) readAudit(h *raftcmdv1.SnapshotHeader, dec *recordReader) error {
	if h.GetAuditCount() > MaxAuditRecords {
		return fmt.Errorf("%w: %d audit records, at most %d are kept", ErrBadSnapshot, h.GetAuditCount(), MaxAuditRecords)
	}
	for range h.GetAuditCount() {
		var r raftcmdv1.AuditRecord
		if err := dec.read(&r); err != nil {
			return err
		}
		if n := len(s.audit); n > 0 && s.audit[n-1].Index >= r.GetIndex() {
			return fmt.Errorf("%w: audit record of index %d after %d", ErrBadSnapshot, r.GetIndex(), s.audit[n-1].Index)
		}
		s.audit = append(s.audit, auditFromRecord(&r))
	}
	return nil
}

// readMetaSnapshot reads the meta part of a snapshot: from its header, and
// the node records.
func readMetaSnapshot(h *raftcmdv1.SnapshotHeader, dec *recordReader) (metaSnapshot, error) {
	s := metaSnapshot{shardMap: h.GetShardMap(), plans: h.GetPlans(), clusterID: h.GetClusterId()}
	for range h.GetNodeCount() {
		var n raftcmdv1.RegisterNode
		if err := dec.read(&n); err != nil {
			return s, err
		}
		s.nodes = append(s.nodes, Node{ID: n.GetId(), RaftAddr: n.GetRaftAddr(), APIAddr: n.GetApiAddr(), FeatureLevel: n.GetFeatureLevel()})
	}
	return s, nil
}

// restoredMeta returns the metaState of a snapshot's meta part. The date
// of the policy table's last change is unknown until the next entry.
func restoredMeta(policies *policyTable, s metaSnapshot) metaState {
	m := newMetaState(policies)
	for _, n := range s.nodes {
		m.nodes[n.ID] = n
	}
	if s.shardMap != nil {
		sm := ShardMapFromProto(s.shardMap)
		m.shardMap = &sm
	}
	m.plans, m.clusterID = s.plans, s.clusterID
	m.audit.recs = s.audit
	m.policiesChangedAt, m.policiesChangeUnknown = 0, true
	return m
}

func sortedNodes(m map[string]Node) []Node {
	out := make([]Node, 0, len(m))
	for _, k := range slices.Sorted(maps.Keys(m)) {
		out = append(out, m[k])
	}
	return out
}
