// Package engine is a node's request engine: the one path every request
// takes to a decision by a group's leader. A request — a data command, each
// Admit of an AdmitBatch, an admin call that must run on the meta leader — is
// an Item routed by its Routing to a Dest (route.go: the key's data group by
// the node's replica of the shard map, or the meta group), with its leader's
// part (Here: a command or a local function) and its forwarding part (Away).
// A unary call enters through Run (run.go), typed by its answer: a
// Request[Resp] with a Command and its Answer, or a Local, and a Forward.
// Engine.Decide decides a batch of items with one set of rules (engine.go):
// the items of groups this node leads are proposed together through each
// group's commit queue (groupcommit_glue.go: the entry stamped with the
// leader's clock, appended to raft, the FSM's result returned); the others are forwarded to
// their leader over the peer port (peers.go, forward.go: lone Admits share
// AdmitBatch calls per leader). An item certainly not applied
// (ErrNotProposed) is routed again until its deadline; one whose outcome is
// unknown (ErrOutcomeUnknown) only when it carries a request ID
// (requestid.go folds the key into it).
//
// Before proposing, a group led here learns the policies a command names
// from the meta group (request_checks.go, meta.go); slot-migration entries
// and exports are accepted only as steps of the running plan (planned.go,
// migrate.go). AcquireLease requests wait on the leader in Waiters.
// Retry and Doubling are the node's retry rules.
//
// A request's caller travels in its context (identity.go: the identity the
// API edge authenticated, a node's own, and the address a call came from),
// and in headers when a node forwards it to a leader. BadRequest is the
// error of a request field that is wrong.
//
// The engine decides nothing itself: answers are what a group's FSM
// returned for an entry of the request. Package node's handlers and its
// Envoy service call Run or Decide, and so does the control plane (package
// control); it reaches replicas through package replica.
package engine
