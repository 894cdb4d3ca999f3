// Package control is a node's control plane: the Controller, which keeps
// the node's replicas, the groups' Raft configurations, the node registry
// and the cluster ID in line with the meta group's replicated state, and
// carries out the admin operations that change that state on the meta
// leader.
//
// Controller.Run runs its loops until its context is done; each ticks,
// reads replicated state and acts only where this node leads the group
// concerned:
//
//   - the group loop (groups.go, replicas.go): the first shard map, once
//     the expected nodes registered; opening the data replicas the map
//     places here and closing (and deleting) those it no longer does; on
//     each data group led here, its ownership and policy table, and its
//     Raft configuration made to follow the map one change at a time,
//     leadership handed to the preferred replica;
//   - the plan loop (plans.go): on the meta leader, the running plan
//     driven phase by phase (slot moves: freeze, copy page by page, flip,
//     or roll back), each phase recorded before its calls;
//   - registration (membership.go): this node in the registry with its
//     addresses and feature level, joining through --join or the leader;
//   - the cluster-ID loop (clusterid.go): the node's recorded cluster ID
//     and the meta group's kept equal; InitClusterID gives the peer port
//     what the node knows before it serves;
//   - expiry (expire.go): Expire entries for the groups led here, and the
//     memory of reclaimed state handed back to the system.
//
// The admin operations, called by package node's handlers on the meta
// leader: MoveReplica, DrainNode, Rebalance (shard-map changes with a
// compare-and-set on the epoch, replicas.go); MoveSlots, AddGroup,
// SplitGroup, CancelPlan (plans, planning.go); JoinAsLeader (after the
// checks of join_check.go), AddNode, Uncordon, RemoveNode (membership.go,
// remove.go). Their refusals are this package's errors (ErrNodeLive,
// ErrNotTheNode, ErrNodeHoldsReplicas, ErrOtherCluster), or field errors;
// package node maps them to Connect codes. Changes an operator asked for
// carry an Actor (ActorOf, audit.go) that the meta group records.
//
// It reaches the rest of the node only through Deps: the meta replica, the
// data replicas (package replica), opening a replica, the request path
// (RequestPath, package engine's Engine) and the clients of other nodes'
// ports. What it keeps in memory is pacing, which a restart or a new leader
// begins afresh.
package control
