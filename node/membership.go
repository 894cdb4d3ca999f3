package node

import (
	"context"
	"slices"
	"time"

	"connectrpc.com/connect"

	"github.com/quorate/quorate/fsm"
	quoratev1 "github.com/quorate/quorate/proto/quorate/v1"
)

// register makes sure this node is a voter of the cluster and that its
// addresses are in the replicated registry, so other nodes can forward to it
// and list it. It retries until that is so or ctx is done: a node without
// state asks Config.Join; a node with state asks the leader it knows.
func (n *Node) register(ctx context.Context) {
	self := fsm.Node{ID: n.cfg.ID, RaftAddr: n.raftAddr, APIAddr: n.apiAddr}
	req := &quoratev1.JoinRequest{Id: self.ID, RaftAddr: self.RaftAddr, ApiAddr: self.APIAddr}
	wait := 20 * time.Millisecond
	for {
		if slices.Contains(n.meta.fsm.Nodes(), self) {
			close(n.registered)
			n.log.Debug("registered")
			return
		}
		err := n.joinOnce(ctx, req)
		if err != nil && ctx.Err() == nil {
			n.log.Debug("joining", "err", err)
		}
		t := time.NewTimer(wait)
		select {
		case <-ctx.Done():
			t.Stop()
			return
		case <-t.C:
		}
		wait = min(2*wait, time.Second)
	}
}

// joinOnce asks the leader (or, with no leader known, the --join address) to
// add and register this node.
func (n *Node) joinOnce(ctx context.Context, req *quoratev1.JoinRequest) error {
	ctx, cancel := context.WithTimeout(ctx, n.cfg.RequestTimeout)
	defer cancel()
	if leaderAddr, _ := n.leader(); leaderAddr == "" && n.cfg.Join != "" && !n.isLeader() {
		base, _ := joinURL(n.cfg.Join)
		_, err := n.peers.get(base).admin.Join(ctx, connect.NewRequest(req))
		return err
	}
	return n.onLeader(ctx, routing{idempotent: true},
		func(ctx context.Context) error { return n.joinAsLeader(ctx, req) },
		func(ctx context.Context, p *peerClient) error {
			_, err := p.admin.Join(ctx, connect.NewRequest(req))
			return err
		})
}

// Registered is closed once this node's addresses are in its own replica of
// the registry: it is a member that others can forward to.
func (n *Node) Registered() <-chan struct{} { return n.registered }
