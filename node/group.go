package node

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"sync/atomic"

	"github.com/hashicorp/go-hclog"
	"github.com/hashicorp/raft"

	"github.com/quorate/quorate/fsm"
	"github.com/quorate/quorate/groupcommit"
	"github.com/quorate/quorate/raftmux"
	"github.com/quorate/quorate/shard"
)

// Replica is one Raft Replica replica hosted by this node: the meta Replica (ID 0,
// which in a cluster without data groups holds the data too) or a data
// Replica. Each has its own raft instance, log store, snapshots and FSM,
// and talks to its peers over the node's peer mux on channel ID.
type Replica struct {
	ID        shard.GroupID
	Dir       string
	FSM       *fsm.FSM
	Raft      *raft.Raft
	transport *raftmux.Transport
	// Log is the replica's checked view of the node's shared Log;
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
	// Leader follows who this replica takes for the Leader (forwards to
	// a Leader that is replaced are given up at once).
	Leader *leaderWatch
	// quiet is whether this replica, as leader, heartbeats at the quiet
	// pace (quiet.go).
	quiet quietness
	// Snaps is the replica's snapshot store (the metrics read its newest
	// snapshot's size).
	Snaps raft.SnapshotStore
}

// removeGroupDir deletes a closed data group replica's directory.
func removeGroupDir(dir string) error {
	if filepath.Base(filepath.Dir(dir)) != "groups" {
		return fmt.Errorf("node: refusing to delete %s: not a data group directory", dir)
	}
	return os.RemoveAll(dir)
}

// groupDir is where group id keeps its Raft state under dataDir: the meta
// group in raft/ (where a single-group node always kept it), data groups in
// groups/<id>/.
func groupDir(dataDir string, id shard.GroupID) string {
	if id == shard.MetaGroup {
		return filepath.Join(dataDir, "raft")
	}
	return filepath.Join(dataDir, "groups", fmt.Sprint(id))
}

// openGroup opens (or creates) group id's stores and starts its raft. When
// the group has no state yet and boot is not empty, it is bootstrapped with
// boot as its configuration (every replica may bootstrap with the same one).
func (n *Node) openGroup(id shard.GroupID, boot []raft.Server, hlog hclog.Logger) (_ *Replica, err error) {
	g := &Replica{ID: id, Dir: groupDir(n.cfg.DataDir, id), FSM: fsm.New(fsm.Options{DataGroup: id != shard.MetaGroup})}
	g.Batch = groupcommit.New(groupLog{n, g})
	defer func() {
		if err != nil {
			_ = g.Close()
		}
	}()
	hlog = hlog.With("group", uint32(id))
	if g.transport, err = n.raftMux.Transport(uint32(id), raft.ServerAddress(n.raftAddr)); err != nil {
		return nil, err
	}
	if err := os.MkdirAll(g.Dir, 0o750); err != nil {
		return nil, fmt.Errorf("node: --data-dir: %w", err)
	}
	view, replicaTerms, first, last, err := g.openShared(&n.shared, hlog)
	if err != nil {
		return nil, err
	}
	g.Log = &checkedLog{store: view, file: n.shared.Dir, health: &g.Health, damaged: g.damaged}
	logs, err := raft.NewLogCache(1024, g.Log)
	if err != nil {
		return nil, err
	}
	stable := &recordingStable{StableStore: replicaTerms, file: n.shared.StablePath, health: &g.Health}
	fileSnaps, err := raft.NewFileSnapshotStoreWithLogger(g.Dir, 2, hlog)
	if err != nil {
		return nil, fmt.Errorf("node: --data-dir: %w", err)
	}
	snaps := &recordingSnapshots{SnapshotStore: fileSnaps, dir: filepath.Join(g.Dir, "snapshots"), health: &g.Health, damaged: g.damaged}
	g.Snaps = snaps
	if err := g.checkSnapshots(snaps, first, last); err != nil {
		return nil, err
	}
	if err := g.dropLogBehindSnapshot(snaps, first, last); err != nil {
		return nil, err
	}
	rc := n.raftConfig(hlog)
	g.HadState, err = raft.HasExistingState(logs, stable, snaps)
	if err != nil {
		return nil, err
	}
	if !g.HadState && len(boot) > 0 {
		if err := raft.BootstrapCluster(rc, logs, stable, snaps, g.transport, raft.Configuration{Servers: boot}); err != nil {
			return nil, fmt.Errorf("node: bootstrap of group %d: %w", id, err)
		}
	}
	if g.Raft, err = g.startRaft(rc, logs, stable, snaps); err != nil {
		return nil, fmt.Errorf("node: starting raft of group %d: %w", id, err)
	}
	// A change of leader ends the quiet pace at once: a replica that stops
	// leading must watch its new leader with the normal timeout.
	g.Leader = watchLeader(g.Raft, func() {
		n.metrics.leaderChanged(g.ID)
		if !g.IsLeader() {
			g.SetQuiet(false, &n.cfg, n.log)
		}
	})
	onDamage := func(err error) { n.replicaDamaged(g, err) }
	g.Health.onDamage.Store(&onDamage)
	return g, nil
}

// raftConfig is the raft configuration every group of this node uses.
func (n *Node) raftConfig(hlog hclog.Logger) *raft.Config {
	rc := raft.DefaultConfig()
	rc.LocalID = raft.ServerID(n.cfg.ID)
	rc.HeartbeatTimeout = n.cfg.HeartbeatTimeout
	rc.ElectionTimeout = n.cfg.ElectionTimeout
	rc.LeaderLeaseTimeout = n.cfg.LeaderLeaseTimeout
	rc.CommitTimeout = n.cfg.CommitTimeout
	rc.SnapshotThreshold = n.cfg.SnapshotThreshold
	rc.SnapshotInterval = n.cfg.SnapshotInterval
	rc.TrailingLogs = n.cfg.TrailingLogs
	rc.Logger = hlog
	rc.NoLegacyTelemetry = true // no peer IDs inside metric names (metrics_raft.go)
	// Group commit at the raft level: proposals waiting in a buffered apply
	// channel go out (and are fsynced) together, up to MaxAppendEntries.
	rc.BatchApplyCh = true
	rc.MaxAppendEntries = 512
	return rc
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

// waitFuture waits for a raft future until ctx is done. A future raft
// accepted but never served — its raft shut down first — would block
// Error() forever.
func waitFuture(ctx context.Context, f raft.Future) error {
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
