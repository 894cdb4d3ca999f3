package replica

import (
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"time"

	"github.com/hashicorp/go-hclog"
	"github.com/hashicorp/raft"

	"github.com/quorate/quorate/fsm"
	"github.com/quorate/quorate/groupcommit"
	"github.com/quorate/quorate/raftmux"
	"github.com/quorate/quorate/shard"
)

// Config is what the replicas take of their node's configuration: where
// they keep their files, and the Raft timing and snapshot settings every
// group of the node uses.
type Config struct {
	NodeID  string
	DataDir string
	// HeartbeatTimeout, ElectionTimeout and LeaderLeaseTimeout are raft's;
	// a quiet leader stretches its heartbeat pace from them (quiet.go).
	HeartbeatTimeout, ElectionTimeout, LeaderLeaseTimeout, CommitTimeout time.Duration
	SnapshotThreshold, TrailingLogs                                      uint64
	SnapshotInterval                                                     time.Duration
}

// Host is what the replicas of one node share, and the few ways they reach
// the rest of it. The node makes one in New, fills it before it opens the
// meta replica, and keeps it until every replica closed.
type Host struct {
	Config Config
	Log    *slog.Logger
	// RaftLog is the log every raft instance writes to (raftlog.go).
	RaftLog hclog.Logger
	// Hub carries every group's Raft RPCs over the peer port (hub.go);
	// RaftAddr is the node's advertised address on it.
	Hub      *raftmux.Hub
	RaftAddr string
	// Shared are the node's shared Raft log and stable store.
	Shared *SharedLogs
	// Data are the node's data group replicas (a damaged one is taken out
	// of them, damaged.go).
	Data *Set
	// NewBatch makes a replica's group commit: the request engine's
	// Committer over the replica's raft.
	NewBatch func(*Replica) *groupcommit.Committer
	// LeaderChanged is told of each change of a replica's leader.
	LeaderChanged func(shard.GroupID)
}

// Open opens (or creates) group id's stores and starts its raft. When the
// group has no state yet and boot is not empty, it is bootstrapped with
// boot as its configuration (every replica may bootstrap with the same one).
func (h *Host) Open(id shard.GroupID, boot []raft.Server) (_ *Replica, err error) {
	g := &Replica{ID: id, Dir: GroupDir(h.Config.DataDir, id), FSM: fsm.New(fsm.Options{DataGroup: id != shard.MetaGroup}), host: h}
	g.Batch = h.NewBatch(g)
	defer func() {
		if err != nil {
			_ = g.Close()
		}
	}()
	hlog := h.RaftLog.With("group", uint32(id))
	if g.transport, err = h.Hub.Transport(uint32(id), raft.ServerAddress(h.RaftAddr)); err != nil {
		return nil, err
	}
	if err := os.MkdirAll(g.Dir, 0o750); err != nil {
		return nil, fmt.Errorf("node: --data-dir: %w", err)
	}
	view, replicaTerms, first, last, err := g.openShared(h.Shared, hlog)
	if err != nil {
		return nil, err
	}
	g.Log = &checkedLog{store: view, file: h.Shared.Dir, health: &g.Health, damaged: g.damaged}
	logs, err := raft.NewLogCache(1024, g.Log)
	if err != nil {
		return nil, err
	}
	stable := &recordingStable{StableStore: replicaTerms, file: h.Shared.StablePath, health: &g.Health}
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
	rc := h.RaftConfig(hlog)
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
		h.LeaderChanged(g.ID)
		if !g.IsLeader() {
			g.SetQuiet(false)
		}
	})
	onDamage := func(err error) { h.damaged(g, err) }
	g.Health.onDamage.Store(&onDamage)
	return g, nil
}

// RaftConfig is the raft configuration every group of the node uses,
// logging to hlog.
func (h *Host) RaftConfig(hlog hclog.Logger) *raft.Config {
	c := h.Config
	rc := raft.DefaultConfig()
	rc.LocalID = raft.ServerID(c.NodeID)
	rc.HeartbeatTimeout = c.HeartbeatTimeout
	rc.ElectionTimeout = c.ElectionTimeout
	rc.LeaderLeaseTimeout = c.LeaderLeaseTimeout
	rc.CommitTimeout = c.CommitTimeout
	rc.SnapshotThreshold = c.SnapshotThreshold
	rc.SnapshotInterval = c.SnapshotInterval
	rc.TrailingLogs = c.TrailingLogs
	rc.Logger = hlog
	rc.NoLegacyTelemetry = true // no peer IDs inside metric names (the node's metrics_raft.go)
	// Group commit at the raft level: proposals waiting in a buffered apply
	// channel go out (and are fsynced) together, up to MaxAppendEntries.
	rc.BatchApplyCh = true
	rc.MaxAppendEntries = 512
	return rc
}
