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

// group is one Raft group replica hosted by this node: the meta group (ID 0,
// which in a cluster without data groups holds the data too) or a data
// group. Each has its own raft instance, log store, snapshots and FSM,
// and talks to its peers over the node's peer mux on channel ID.
type group struct {
	id        shard.GroupID
	dir       string
	fsm       *fsm.FSM
	raft      *raft.Raft
	transport *raftmux.Transport
	// log is the replica's checked view of the node's shared log;
	// health the replica's last storage error.
	log    *checkedLog
	health storageHealth
	// stopping is set once the replica is being stopped for damaged files.
	stopping atomic.Bool
	hadState bool
	// batch is the group commit of this replica's commands while it leads.
	batch *groupcommit.Committer
	// caughtUpTerm is the Raft term in which a barrier last completed on
	// this replica as leader (caughtUp).
	caughtUpTerm atomic.Uint64
	// leader follows who this replica takes for the leader (forwards to
	// a leader that is replaced are given up at once).
	leader *leaderWatch
	// quiet is whether this replica, as leader, heartbeats at the quiet
	// pace (quiet.go).
	quiet quietness
	// snaps is the replica's snapshot store (the metrics read its newest
	// snapshot's size).
	snaps raft.SnapshotStore
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
func (n *Node) openGroup(id shard.GroupID, boot []raft.Server, hlog hclog.Logger) (_ *group, err error) {
	g := &group{id: id, dir: groupDir(n.cfg.DataDir, id), fsm: fsm.New(fsm.Options{DataGroup: id != shard.MetaGroup})}
	g.batch = groupcommit.New(groupLog{n, g})
	defer func() {
		if err != nil {
			_ = g.close()
		}
	}()
	hlog = hlog.With("group", uint32(id))
	if g.transport, err = n.raftMux.Transport(uint32(id), raft.ServerAddress(n.raftAddr)); err != nil {
		return nil, err
	}
	if err := os.MkdirAll(g.dir, 0o750); err != nil {
		return nil, fmt.Errorf("node: --data-dir: %w", err)
	}
	view, replicaTerms, first, last, err := g.openShared(&n.shared, hlog)
	if err != nil {
		return nil, err
	}
	g.log = &checkedLog{store: view, file: n.shared.dir, health: &g.health, damaged: g.damaged}
	logs, err := raft.NewLogCache(1024, g.log)
	if err != nil {
		return nil, err
	}
	stable := &recordingStable{StableStore: replicaTerms, file: n.shared.stablePath, health: &g.health}
	fileSnaps, err := raft.NewFileSnapshotStoreWithLogger(g.dir, 2, hlog)
	if err != nil {
		return nil, fmt.Errorf("node: --data-dir: %w", err)
	}
	snaps := &recordingSnapshots{SnapshotStore: fileSnaps, dir: filepath.Join(g.dir, "snapshots"), health: &g.health, damaged: g.damaged}
	g.snaps = snaps
	if err := g.checkSnapshots(snaps, first, last); err != nil {
		return nil, err
	}
	if err := g.dropLogBehindSnapshot(snaps, first, last); err != nil {
		return nil, err
	}
	rc := n.raftConfig(hlog)
	g.hadState, err = raft.HasExistingState(logs, stable, snaps)
	if err != nil {
		return nil, err
	}
	if !g.hadState && len(boot) > 0 {
		if err := raft.BootstrapCluster(rc, logs, stable, snaps, g.transport, raft.Configuration{Servers: boot}); err != nil {
			return nil, fmt.Errorf("node: bootstrap of group %d: %w", id, err)
		}
	}
	if g.raft, err = g.startRaft(rc, logs, stable, snaps); err != nil {
		return nil, fmt.Errorf("node: starting raft of group %d: %w", id, err)
	}
	// A change of leader ends the quiet pace at once: a replica that stops
	// leading must watch its new leader with the normal timeout.
	g.leader = watchLeader(g.raft, func() {
		n.metrics.leaderChanged(g.id)
		if !g.isLeader() {
			g.setQuiet(false, &n.cfg, n.log)
		}
	})
	onDamage := func(err error) { n.replicaDamaged(g, err) }
	g.health.onDamage.Store(&onDamage)
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

func (g *group) isLeader() bool { return g.raft != nil && g.raft.State() == raft.Leader }

// leaderID is the ID of the node the group's replica here knows as leader.
func (g *group) leaderID() string {
	_, id := g.raft.LeaderWithID()
	return string(id)
}

func (g *group) votersCount() int {
	f := g.raft.GetConfiguration()
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

// close stops raft without handing off leadership and closes the stores.
func (g *group) close() error {
	var errs []error
	if g.leader != nil {
		g.leader.stop(g.raft)
	}
	if g.raft != nil {
		errs = append(errs, g.raft.Shutdown().Error())
	}
	if g.transport != nil {
		errs = append(errs, g.transport.Close())
	}
	return errors.Join(errs...)
}
