package access

import "fmt"

// Action is one operation of Quorate's API, as Authorize sees it. The zero
// Action is not an operation: Authorize refuses it, so that a procedure
// node forgot to classify is denied rather than allowed. Which procedure is
// which Action is node's table; Actions lists every value for its tests.
type Action uint8

// The actions. Their numbers are not stored or sent anywhere; only String
// names them outside the process.
const (
	ActionNone Action = iota // not an operation; always refused

	// ClassHealth.
	ActionHealth // health checks

	// ClassAdmin.
	ActionClusterStatus
	ActionNodeStatus
	ActionJoin
	ActionApplyPolicies
	ActionListPolicies
	ActionGetPolicy
	ActionDeletePolicies
	ActionMoveReplica
	ActionDrainNode
	ActionUncordonNode
	ActionRemoveNode
	ActionAddNode
	ActionMoveSlots
	ActionAddGroup
	ActionSplitGroup
	ActionRebalance
	ActionListPlans
	ActionCancelPlan
	ActionListAudit
	ActionSaveSnapshot
	ActionRestoreSnapshot

	// ClassData.
	ActionAdmit
	ActionAdmitBatch
	ActionPeek
	ActionRefund
	ActionReserve
	ActionCommit
	ActionAcquireLease
	ActionRenewLease
	ActionReleaseLease
	ActionCheckFence
	ActionPolicies

	// ClassRouting.
	ActionRoutes
	ActionReflection // gRPC server reflection: the public services' schema

	actionEnd // one past the last action
)

// Class is the kind of right an Action needs.
type Class uint8

const (
	// ClassNone is the class of ActionNone and of values out of range.
	ClassNone Class = iota
	// ClassHealth actions are allowed to everyone, authenticated or not.
	ClassHealth
	// ClassAdmin actions need RoleAdmin: policies, nodes, groups, plans,
	// cluster and node status.
	ClassAdmin
	// ClassData actions need RoleClient, and a caller limited to some
	// policies may use only those.
	ClassData
	// ClassRouting actions need either role: where calls go (Routes), which
	// a client needs to send its data calls, and the API's schema (gRPC
	// server reflection, for tools such as grpcurl); neither reveals any
	// policy or state.
	ClassRouting
)

// String returns "health", "admin", "data", "routing" or "none".
func (c Class) String() string {
	switch c {
	case ClassHealth:
		return "health"
	case ClassAdmin:
		return "admin"
	case ClassData:
		return "data"
	case ClassRouting:
		return "routing"
	}
	return "none"
}

// actionInfo describes one Action.
type actionInfo struct {
	name  string
	class Class
	// mayNameNone: a data action a caller limited to some policies may make
	// without naming one: Refund acts on an earlier request of the same
	// caller (request IDs are namespaced by the caller), and Policies
	// answers only the policies the caller may use.
	mayNameNone bool
}

var actionInfos = [actionEnd]actionInfo{
	ActionNone:            {"none", ClassNone, false},
	ActionHealth:          {"health", ClassHealth, false},
	ActionClusterStatus:   {"cluster_status", ClassAdmin, false},
	ActionNodeStatus:      {"node_status", ClassAdmin, false},
	ActionJoin:            {"join", ClassAdmin, false},
	ActionApplyPolicies:   {"apply_policies", ClassAdmin, false},
	ActionListPolicies:    {"list_policies", ClassAdmin, false},
	ActionGetPolicy:       {"get_policy", ClassAdmin, false},
	ActionDeletePolicies:  {"delete_policies", ClassAdmin, false},
	ActionMoveReplica:     {"move_replica", ClassAdmin, false},
	ActionDrainNode:       {"drain_node", ClassAdmin, false},
	ActionUncordonNode:    {"uncordon_node", ClassAdmin, false},
	ActionRemoveNode:      {"remove_node", ClassAdmin, false},
	ActionAddNode:         {"add_node", ClassAdmin, false},
	ActionMoveSlots:       {"move_slots", ClassAdmin, false},
	ActionAddGroup:        {"add_group", ClassAdmin, false},
	ActionSplitGroup:      {"split_group", ClassAdmin, false},
	ActionRebalance:       {"rebalance", ClassAdmin, false},
	ActionListPlans:       {"list_plans", ClassAdmin, false},
	ActionCancelPlan:      {"cancel_plan", ClassAdmin, false},
	ActionListAudit:       {"list_audit", ClassAdmin, false},
	ActionSaveSnapshot:    {"save_snapshot", ClassAdmin, false},
	ActionRestoreSnapshot: {"restore_snapshot", ClassAdmin, false},
	ActionAdmit:           {"admit", ClassData, false},
	ActionAdmitBatch:      {"admit_batch", ClassData, false},
	ActionPeek:            {"peek", ClassData, false},
	ActionRefund:          {"refund", ClassData, true},
	ActionReserve:         {"reserve", ClassData, false},
	ActionCommit:          {"commit", ClassData, false},
	ActionAcquireLease:    {"acquire_lease", ClassData, false},
	ActionRenewLease:      {"renew_lease", ClassData, false},
	ActionReleaseLease:    {"release_lease", ClassData, false},
	ActionCheckFence:      {"check_fence", ClassData, false},
	ActionPolicies:        {"policies", ClassData, true},
	ActionRoutes:          {"routes", ClassRouting, false},
	ActionReflection:      {"reflection", ClassRouting, false},
}

// Actions returns every action but ActionNone, in declaration order.
func Actions() []Action {
	out := make([]Action, 0, actionEnd-1)
	for a := ActionNone + 1; a < actionEnd; a++ {
		out = append(out, a)
	}
	return out
}

// String returns the action's name in snake case, e.g. "apply_policies".
func (a Action) String() string {
	if a >= actionEnd {
		return fmt.Sprintf("action(%d)", uint8(a))
	}
	return actionInfos[a].name
}

// Class returns the kind of right a needs.
func (a Action) Class() Class {
	if a >= actionEnd {
		return ClassNone
	}
	return actionInfos[a].class
}

// NeedsPolicies reports whether, for a caller limited to some policies, a
// must be authorized with the policies it touches: every data action but
// Refund, which names no policy and refunds only the caller's own admitted
// request, and Policies, whose answer holds only the policies the caller
// may use (those it names, if it names any, must be). The node passes the policies a request names, or those encoded
// in the reservation or lease it refers to (Commit, RenewLease,
// ReleaseLease); without them a limited caller is refused.
func (a Action) NeedsPolicies() bool {
	return a.Class() == ClassData && !actionInfos[a].mayNameNone
}
