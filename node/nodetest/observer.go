package nodetest

import (
	"sync/atomic"

	"github.com/quorate/quorate/node"
	raftcmdv1 "github.com/quorate/quorate/proto/quorate/raftcmd/v1"
)

// Observer is the node.Observer every node of a Cluster is configured with
// (Cluster.Observer): a test sets and clears its functions while the node
// runs, to act at a precise moment of a command's life on the leader, e.g.
// kill the node once an entry is in Raft but before it commits. Unset
// functions cost one atomic load. It stays with the node across restarts.
type Observer struct {
	proposed, applied atomic.Pointer[func(*raftcmdv1.Envelope)]
}

var _ node.Observer = (*Observer)(nil)

// SetProposed makes the node call f once Raft holds an entry of a command
// it proposed as leader, before it commits (nil clears it).
func (o *Observer) SetProposed(f func(*raftcmdv1.Envelope)) { store(&o.proposed, f) }

// SetApplied makes the node call f once a command it proposed as leader is
// applied, before it answers (nil clears it).
func (o *Observer) SetApplied(f func(*raftcmdv1.Envelope)) { store(&o.applied, f) }

// Proposed implements node.Observer.
func (o *Observer) Proposed(cmd *raftcmdv1.Envelope) { call(&o.proposed, cmd) }

// Applied implements node.Observer.
func (o *Observer) Applied(cmd *raftcmdv1.Envelope) { call(&o.applied, cmd) }

func store(p *atomic.Pointer[func(*raftcmdv1.Envelope)], f func(*raftcmdv1.Envelope)) {
	if f == nil {
		p.Store(nil)
		return
	}
	p.Store(&f)
}

func call(p *atomic.Pointer[func(*raftcmdv1.Envelope)], cmd *raftcmdv1.Envelope) {
	if f := p.Load(); f != nil {
		(*f)(cmd)
	}
}

// Observer returns node i's Observer, unless Options.Configure replaced it.
func (c *Cluster) Observer(i int) *Observer {
	o, _ := c.members[i].cfg.Observer.(*Observer)
	return o
}
