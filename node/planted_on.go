//go:build quorate_planted_local_read

package node

import (
	"time"

	"google.golang.org/protobuf/types/known/durationpb"
	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/quorate/quorate/admission"
	quoratev1 "github.com/quorate/quorate/proto/quorate/v1"
)

// plantedLocalRead, set only with -tags quorate_planted_local_read, breaks
// Admit on purpose: the node that receives a single-check Admit decides it
// from its own replica's state, without the log, answers "allowed" at once
// when its copy has room, and only then sends the request through the log
// in the background. Replicas that lag (every follower, and a deposed
// leader) admit what the log has already spent. The fault-injection
// harness builds this binary to prove that its over-admission and
// linearizability checkers catch a server that reads instead of deciding
// through the log. Never ship it.
const plantedLocalRead = true

// plantedLocalDecision answers req from local state when it would be
// allowed there; ok is false when the real path must decide.
func plantedLocalDecision(n *Node, req *quoratev1.AdmitRequest) (*quoratev1.AdmitResponse, bool) {
	pv, found := n.meta.FSM.Policy(req.GetPolicy())
	if !found || len(req.GetAlso()) > 0 {
		return nil, false
	}
	cost := max(req.GetCost(), 1)
	now := n.meta.FSM.LastNow()
	d := admission.Peek(pv.Policy, n.meta.FSM.State(req.GetPolicy(), req.GetKey()), now)
	if !d.Allowed || d.Remaining < cost {
		return nil, false
	}
	return &quoratev1.AdmitResponse{Allowed: true, Limit: d.Limit, Remaining: d.Remaining - cost,
		ResetAfter: durationpb.New(d.ResetAfter), RetryAfter: durationpb.New(0), PolicyVersion: pv.Version,
		DecidedAt: timestamppb.New(time.Unix(0, now).UTC()), Wait: durationpb.New(0)}, true
}
