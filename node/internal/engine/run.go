package engine

import (
	"context"

	raftcmdv1 "github.com/quorate/quorate/proto/quorate/raftcmd/v1"
)

// Request is one request to run on the leader of its group (Run), whose
// answer is a *Resp: on the leader, one command or a local function;
// elsewhere, the same request forwarded.
type Request[Resp any] struct {
	Route Routing

	// On the leader (this node), one of: Command, proposed sharing entries
	// with the group's other commands, whose FSM result Answer (made with
	// AnswerOf) turns into the answer; or Local, run with the group's
	// destination (an acquire that waits, an admin call of several steps).
	Command *raftcmdv1.Envelope
	Answer  func(res any) *Resp
	Local   func(ctx context.Context, d Dest) (*Resp, error)

	// Elsewhere: Forward sends the request to the leader p and returns its
	// answer; its error is sorted as a forwarded call's (classifyRemote).
	Forward func(ctx context.Context, p *PeerClient) (*Resp, error)
}

// AnswerOf is a Request's Answer from a function of the FSM's result type
// Res (e.g. *fsm.PeekResult), which the command's kind fixes.
func AnswerOf[Res, Resp any](f func(Res) *Resp) func(res any) *Resp {
	return func(res any) *Resp { return f(res.(Res)) }
}

// Decider decides items: the Engine, or what a caller that sees it only
// through an interface of its own asks of it.
type Decider interface {
	Decide(ctx context.Context, items []*Item)
}

var _ Decider = (*Engine)(nil)

// Run runs r on the leader of its group with Decide's routing and retries,
// as a batch of one, within ctx (the caller bounds it: RequestContext). It
// returns the answer and the leader the last attempt forwarded r to (""
// when it was decided here).
func Run[Resp any](ctx context.Context, e Decider, r Request[Resp]) (resp *Resp, leader string, err error) {
	it := &Item{Route: r.Route, Here: Here{Env: r.Command}}
	if r.Local != nil {
		it.Here.Local = func(ctx context.Context, d Dest) (err error) {
			resp, err = r.Local(ctx, d)
			return err
		}
	}
	it.Away.Forward = func(ctx context.Context, p *PeerClient) (err error) {
		resp, err = r.Forward(ctx, p)
		return err
	}
	e.Decide(ctx, []*Item{it})
	if it.Err != nil {
		return nil, it.Away.ViaLeader, it.Err
	}
	if it.Here.Res != nil {
		resp = r.Answer(it.Here.Res)
	}
	return resp, it.Away.ViaLeader, nil
}
