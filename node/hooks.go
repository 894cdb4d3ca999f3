package node

import (
	"sync/atomic"

	raftcmdv1 "github.com/quorate/quorate/proto/quorate/raftcmd/v1"
)

// hooks are fault-injection points for tests of this package (set through
// export_test.go): a test can crash or isolate the node at a precise moment
// of a request's life. Unset hooks cost one atomic load.
type hooks struct {
	// afterPropose runs on the leader right after an entry is handed to
	// raft, before it commits: the outcome is not known yet.
	afterPropose atomic.Pointer[func(*raftcmdv1.Envelope)]
	// afterApply runs on the leader once the entry is applied, before the
	// answer goes back: the outcome is decided, the reply not yet sent.
	afterApply atomic.Pointer[func(*raftcmdv1.Envelope)]
}

func (h *hooks) run(p *atomic.Pointer[func(*raftcmdv1.Envelope)], env *raftcmdv1.Envelope) {
	if f := p.Load(); f != nil {
		(*f)(env)
	}
}
