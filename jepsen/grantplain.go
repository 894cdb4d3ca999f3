package jepsen

import (
	"context"
	"fmt"
	"math/rand/v2"
	"time"

	"connectrpc.com/connect"

	"github.com/quorate/quorate/client"
	quoratev1 "github.com/quorate/quorate/proto/quorate/v1"
)

// The grant workloads' plain callers: each admit is one Admit call as a
// caller without the Go client sends it — to the nodes in turn, not marked
// strict, without a request ID — so a node decides a hot key's admits from
// the grant it holds for its callers, and the others through the log. The
// caller cannot tell which: its op is an ordinary allowed or denied one,
// dated by the answer's decided_at (for a decision from a node's grant, the
// log time its units were granted: the window the cluster counted them
// in), so the workload's window check covers the nodes' grants as it
// covers the clients'. The nemesis kills and pauses the nodes that hold
// them.

// startPlain makes a plain caller named name and its workers.
func (g *grantWorkload) startPlain(name string, num int) (*grantClient, error) {
	gc := &grantClient{name: name, num: num, strict: true, plain: true,
		caller: fmt.Sprintf("jepsen-grant-%d-%s", g.opts.ClientBase, name)}
	cfg := g.c.clientConfig(gc.caller)
	cfg.DisableGrants, cfg.DisableRouting = true, true
	gc.tr = &cutTransport{base: cfg.HTTPClient.Transport}
	cc, err := client.New(cfg)
	if err != nil {
		return nil, fmt.Errorf("jepsen: grant workload %s: %w", g.opts.Policy, err)
	}
	gc.cc = cc
	wctx, cancel := context.WithCancel(g.ctx)
	gc.cancel = cancel
	g.mu.Lock()
	g.clients = append(g.clients, gc)
	g.mu.Unlock()
	for w := range g.opts.Workers {
		cl := g.opts.ClientBase + 10*num + w
		g.wg.Go(func() { g.workPlain(wctx, gc, cl, rand.New(rand.NewPCG(g.opts.Seed, uint64(cl)<<8))) })
	}
	return gc, nil
}

// workPlain admits on random keys of PlainKeys (picked as work picks
// its) through gc's plain calls until ctx ends.
func (g *grantWorkload) workPlain(ctx context.Context, gc *grantClient, cl int, rng *rand.Rand) {
	for seq := 0; ctx.Err() == nil; seq++ {
		key := g.pickKey(rng, g.opts.PlainKeys)
		// The workload's own name for the op (none is sent), so the
		// checkers count every op apart.
		op := Op{Kind: KindAdmit, Policy: g.opts.Policy, Client: cl, RequestID: fmt.Sprintf("c%d-p%d", cl, seq),
			Caller: gc.caller, Key: key}
		tr := &trail{}
		cctx, cancel := context.WithTimeout(withTrail(ctx, tr), g.opts.Timeout)
		req := &quoratev1.AdmitRequest{Policy: op.Policy, Key: key, Caller: gc.caller}
		op.Start = time.Now()
		resp, err := client.Invoke(cctx, gc.cc, client.Call{Procedure: "Admit"},
			func(ctx context.Context, s client.Services) (*connect.Response[quoratev1.AdmitResponse], error) {
				return s.Admission.Admit(ctx, connect.NewRequest(req))
			})
		op.End = time.Now()
		cancel()
		tr.record(&op)
		switch {
		case err != nil:
			op.Outcome, op.Error = classify(err), err.Error()
		case resp.GetAllowed():
			op.Outcome = OutcomeAllowed
		default:
			op.Outcome = OutcomeDenied
		}
		if err == nil {
			op.Remaining, op.DecidedAt = resp.GetRemaining(), nanos(resp.GetDecidedAt().AsTime())
		}
		g.h.Add(op)
		pause := time.Duration(rng.IntN(3000)) * time.Microsecond
		if op.Outcome != OutcomeAllowed {
			pause = time.Duration(10+rng.IntN(30)) * time.Millisecond
		}
		sleepCtx(ctx, pause)
	}
}
