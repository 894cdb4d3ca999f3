package engine

import raftcmdv1 "github.com/quorate/quorate/proto/quorate/raftcmd/v1"

// proposed tells the configured Observer, if any, that cmds are in Raft.
func (n *Engine) proposed(cmds ...*raftcmdv1.Envelope) {
	if o := n.cfg.Observer; o != nil {
		for _, cmd := range cmds {
			o.Proposed(cmd)
		}
	}
}

// applied tells the configured Observer, if any, that cmd is applied.
func (n *Engine) applied(cmd *raftcmdv1.Envelope) {
	if o := n.cfg.Observer; o != nil {
		o.Applied(cmd)
	}
}

// Observer is told of the commands a node proposes as a group's leader
// (Config.Observer): a program embedding a node can trace a command's life
// from it, and the fault tests stop or isolate a node at a precise moment
// of it. Its methods run on the request path, on the goroutine that
// proposes the entry: the request waits while they run.
type Observer interface {
	// Proposed is called once Raft holds the command's entry, before it
	// commits: its outcome is not known yet.
	Proposed(cmd *raftcmdv1.Envelope)
	// Applied is called once the command is applied on this node, before
	// its answer goes back: the outcome is decided, the reply not yet sent.
	Applied(cmd *raftcmdv1.Envelope)
}
