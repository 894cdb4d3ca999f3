package replica

import (
	"context"
	"sync"

	"github.com/hashicorp/raft"
)

// leaderWatch follows who a replica takes for its group's leader: Context
// returns a context that ends when that changes. A request forwarded to a
// leader waits on it, so that when the leader dies or is paused and the
// group elects another, the forward is given up as soon as this replica
// hears of the new leader — instead of at the caller's deadline — and the
// request, if it carries a request ID, is sent to the new leader at once.
type leaderWatch struct {
	// changed, if set, runs after each change of leader.
	changed func()
	obs     *raft.Observer
	ch      chan raft.Observation
	done    chan struct{}

	mu     sync.Mutex
	ctx    context.Context
	cancel context.CancelFunc
}

// watchLeader starts following r's leader; changed, if not nil, runs on
// the watch's goroutine after each change.
func watchLeader(r *raft.Raft, changed func()) *leaderWatch {
	w := &leaderWatch{changed: changed, ch: make(chan raft.Observation, 16), done: make(chan struct{})}
	w.ctx, w.cancel = context.WithCancel(context.Background())
	w.obs = raft.NewObserver(w.ch, false, func(o *raft.Observation) bool {
		_, ok := o.Data.(raft.LeaderObservation)
		return ok
	})
	r.RegisterObserver(w.obs)
	go w.run()
	return w
}

// run ends the current context at each change of leader. An observation
// the channel had no room for is dropped by raft; the next one still ends
// the context, and one dropped change is at worst a forward waited on
// until its own deadline, as without a watch.
func (w *leaderWatch) run() {
	defer close(w.done)
	for range w.ch {
		w.mu.Lock()
		w.cancel()
		w.ctx, w.cancel = context.WithCancel(context.Background())
		w.mu.Unlock()
		if w.changed != nil {
			w.changed()
		}
	}
}

// Context ends when the replica's leader changes after this call.
func (w *leaderWatch) Context() context.Context {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.ctx
}

// stop stops following; r is the raft the watch was started on.
func (w *leaderWatch) stop(r *raft.Raft) {
	r.DeregisterObserver(w.obs)
	close(w.ch)
	<-w.done
	w.mu.Lock()
	w.cancel()
	w.mu.Unlock()
}
