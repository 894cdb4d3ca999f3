package replica

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"sync/atomic"

	"github.com/hashicorp/raft"

	"github.com/quorate/quorate/fsm"
	"github.com/quorate/quorate/groupcommit"
	"github.com/quorate/quorate/raftmux"
	"github.com/quorate/quorate/shard"
)

// Replica is one Raft group replica hosted by a node: the meta group (ID 0,
// which in a cluster without data groups holds the data too) or a data
// group. Each has its own raft instance, log store, snapshots and FSM,
// and talks to its peers over the node's peer mux on channel ID.
type Replica struct {
	ID        shard.GroupID
	Dir       string
	FSM       *fsm.FSM
	Raft      *raft.Raft
	transport *raftmux.Transport
	// Log is the replica's checked view of the node's shared log;
	// health the replica's last storage error.
	Log    *checkedLog
	Health storageHealth
	// stopping is set once the replica is being stopped for damaged files.
	stopping atomic.Bool
	HadState bool
	// Batch is the group commit of this replica's commands while it leads.
	Batch *groupcommit.Committer
	// CaughtUpTerm is the Raft term in which a barrier last completed on
	// this replica as leader (caughtUp).
	CaughtUpTerm atomic.Uint64
	// Leader follows who this replica takes for the leader (forwards to
	// a leader that is replaced are given up at once).
	Leader *leaderWatch
	// quiet is whether this replica, as leader, heartbeats at the quiet
	// pace (quiet.go).
	quiet quietness
	// Snaps is the replica's snapshot store (the metrics read its newest
	// snapshot's size).
	Snaps raft.SnapshotStore
	// host is what the node's replicas share (host.go).
	host *Host
}

// RemoveDir deletes a closed data group replica's directory.
func RemoveDir(dir string) error {
	if filepath.Base(filepath.Dir(dir)) != "groups" {
		return fmt.Errorf("node: refusing to delete %s: not a data group directory", dir)
	}
	return os.RemoveAll(dir)
}

// GroupDir is where group id keeps its Raft state under dataDir: the meta
// group in raft/ (where a single-group node always kept it), data groups in
// groups/<id>/.
func GroupDir(dataDir string, id shard.GroupID) string {
	if id == shard.MetaGroup {
		return filepath.Join(dataDir, "raft")
	}
	return filepath.Join(dataDir, "groups", fmt.Sprint(id))
}

func (g *Replica) IsLeader() bool { return g.Raft != nil && g.Raft.State() == raft.Leader }

// LeaderID is the ID of the node the group's replica here knows as leader.
func (g *Replica) LeaderID() string {
	_, id := g.Raft.LeaderWithID()
	return string(id)
}

func (g *Replica) VotersCount() int {
	f := g.Raft.GetConfiguration()
	if f.Error() != nil {
		return 0
	}
	c := 0
	for _, s := range f.Configuration().Servers {
		if s.Suffrage == raft.Voter {
			c++
		}
	}
	return c
}

// WaitFuture waits for a raft future until ctx is done. A future raft
// accepted but never served — its raft shut down first — would block
// Error() forever.
func WaitFuture(ctx context.Context, f raft.Future) error {
	done := make(chan error, 1)
	go func() { done <- f.Error() }()
	select {
	case err := <-done:
		return err
	case <-ctx.Done():
		return ctx.Err()
	}
}

// Close stops raft without handing off leadership and closes the stores.
func (g *Replica) Close() error {
	var errs []error
	if g.Leader != nil {
		g.Leader.stop(g.Raft)
	}
	if g.Raft != nil {
		errs = append(errs, g.Raft.Shutdown().Error())
	}
	if g.transport != nil {
		errs = append(errs, g.transport.Close())
	}
	return errors.Join(errs...)
}
