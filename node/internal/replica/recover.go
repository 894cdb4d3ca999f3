package replica

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"

	"github.com/hashicorp/go-hclog"
	"github.com/hashicorp/raft"
	"go.etcd.io/bbolt"

	"github.com/quorate/quorate/fsm"
	"github.com/quorate/quorate/shard"
)

// Recovery from a lost majority. When a group's other voters are gone for
// good, its surviving replica can never again win an election or commit an
// entry. Recover rewrites the membership of every group a stopped node's
// data directory holds to that node alone (raft.RecoverCluster, as
// Consul's peers.json and etcd's --force-new-cluster): each group's state
// (snapshot and log) is replayed into a new snapshot whose configuration is
// this node as the only voter, and its log is emptied. What the survivor
// never received is lost; what it received but was never committed becomes
// committed.

var (
	// ErrNodeRunning refuses to recover a data directory a running node
	// holds (its stable store is locked).
	ErrNodeRunning = errors.New("a node is running on the data directory")
	// ErrNotNodeDir refuses to recover a directory that is not a node's
	// data directory.
	ErrNotNodeDir = errors.New("not a node's data directory")
	// ErrRecoveryDeclined is returned when the recovery was not confirmed:
	// nothing was changed.
	ErrRecoveryDeclined = errors.New("recovery not confirmed: nothing was changed")
)

// RecoveryGroup is what Recover finds of one group's replica.
type RecoveryGroup struct {
	ID uint32
	// LastIndex and LastTerm are the replica's last entry (its log's, or
	// its newest snapshot's); SnapshotIndex is its newest snapshot's.
	LastIndex, LastTerm, SnapshotIndex uint64
	// Voters are the voters of the group's latest configuration the
	// replica knows; Lost are those other than this node, which the
	// recovery drops.
	Voters, Lost []string
	// Suffrage is this node's in that configuration ("voter", "nonvoter",
	// or "" when it is not in it).
	Suffrage string
	// Skipped says why the replica is left as it is (empty: recovered).
	Skipped string
}

// RecoveryPlan is what Recover finds in a stopped node's data directory,
// before it changes anything.
type RecoveryPlan struct {
	NodeID, RaftAddr string
	// Groups are the replicas the directory holds, the meta group first.
	Groups []RecoveryGroup
	// Unhosted are data groups of the shard map this node holds no replica
	// of: no recovery here brings them back.
	Unhosted []uint32
}

// Recover rewrites the membership of every group whose replica dataDir
// holds to this node alone, after confirm accepted the plan (confirm
// false: ErrRecoveryDeclined, nothing changed). The node must be stopped.
func Recover(dataDir string, hlog hclog.Logger, confirm func(*RecoveryPlan) bool) (_ *RecoveryPlan, err error) {
	nodeID, err := checkNodeDir(dataDir)
	if err != nil {
		return nil, err
	}
	logs := NewSharedLogs(dataDir, 0, nil)
	l, stable, err := logs.get(hlog)
	if err != nil {
		if errors.Is(err, bbolt.ErrTimeout) {
			return nil, fmt.Errorf("%w: %s is locked by the node using it: stop the node first (recovery is offline): %w",
				ErrNodeRunning, dataDir, err)
		}
		return nil, err
	}
	defer func() { err = errors.Join(err, logs.Close()) }()
	ids, err := hostedGroups(dataDir)
	if err != nil {
		return nil, err
	}
	plan := &RecoveryPlan{NodeID: nodeID}
	type stores struct {
		logs   raft.LogStore
		stable raft.StableStore
		snaps  raft.SnapshotStore
	}
	var open []stores
	for _, id := range ids {
		view, err := l.Group(uint32(id))
		if err != nil {
			return nil, err
		}
		snaps, err := raft.NewFileSnapshotStoreWithLogger(GroupDir(dataDir, id), 2, hlog)
		if err != nil {
			return nil, fmt.Errorf("node: --data-dir: %w", err)
		}
		rg, cfg, err := inspect(uint32(id), view, snaps)
		if err != nil {
			return nil, fmt.Errorf("node: --data-dir: reading group %d's replica: %w", id, err)
		}
		i := slices.IndexFunc(cfg.Servers, func(s raft.Server) bool { return string(s.ID) == nodeID })
		if i >= 0 {
			rg.Suffrage = strings.ToLower(cfg.Servers[i].Suffrage.String())
			for _, v := range rg.Voters {
				if v != nodeID {
					rg.Lost = append(rg.Lost, v)
				}
			}
			if id == shard.MetaGroup {
				plan.RaftAddr = string(cfg.Servers[i].Address)
			}
		}
		switch {
		case id == shard.MetaGroup && i < 0:
			return nil, fmt.Errorf("%w: node %s is not in the meta group's latest configuration this directory holds (it was removed from the cluster): "+
				"it cannot be recovered as the cluster's survivor", ErrNotNodeDir, nodeID)
		case i < 0:
			rg.Skipped = "this node is not in the group's latest configuration (a replica being removed): left as is"
		}
		plan.Groups = append(plan.Groups, rg)
		open = append(open, stores{view, replicaStable{stable, uint32(id)}, snaps})
	}
	if plan.Unhosted, err = unhosted(plan, open[0].logs, open[0].snaps); err != nil {
		return nil, fmt.Errorf("node: --data-dir: reading the meta group's shard map: %w", err)
	}
	if !confirm(plan) {
		return plan, ErrRecoveryDeclined
	}
	only := raft.Configuration{Servers: []raft.Server{{Suffrage: raft.Voter, ID: raft.ServerID(nodeID), Address: raft.ServerAddress(plan.RaftAddr)}}}
	for i, rg := range plan.Groups {
		if rg.Skipped != "" {
			continue
		}
		rc := raft.DefaultConfig()
		rc.LocalID = raft.ServerID(nodeID)
		rc.Logger = hlog
		_, trans := raft.NewInmemTransport(raft.ServerAddress(plan.RaftAddr))
		s := open[i]
		f := fsm.New(fsm.Options{DataGroup: rg.ID != uint32(shard.MetaGroup)})
		if err := raft.RecoverCluster(rc, f, s.logs, s.stable, s.snaps, trans, only); err != nil {
			return plan, fmt.Errorf("node: recovering group %d: %w (groups before it are recovered; run the recovery again)", rg.ID, err)
		}
	}
	return plan, nil
}

// checkNodeDir checks that dataDir is a node's data directory, with a meta
// group replica, and returns the node's ID. It writes nothing.
func checkNodeDir(dataDir string) (string, error) {
	fi, err := os.Stat(dataDir)
	if err != nil {
		return "", fmt.Errorf("%w: --data-dir: %w", ErrNotNodeDir, err)
	}
	if !fi.IsDir() {
		return "", fmt.Errorf("%w: --data-dir %s is not a directory", ErrNotNodeDir, dataDir)
	}
	for _, name := range []string{dataFormatFile, "node-id"} {
		if !exists(filepath.Join(dataDir, name)) {
			return "", fmt.Errorf("%w: --data-dir %s has no %s file", ErrNotNodeDir, dataDir, name)
		}
	}
	if err := CheckDataFormat(dataDir); err != nil {
		return "", err
	}
	if !Exists(dataDir, shard.MetaGroup) || !exists(filepath.Join(dataDir, stableFileName)) {
		return "", fmt.Errorf("%w: --data-dir %s holds no meta group replica: the node never joined a cluster", ErrNotNodeDir, dataDir)
	}
	b, err := os.ReadFile(filepath.Join(dataDir, "node-id"))
	if err != nil {
		return "", fmt.Errorf("node: --data-dir: %w", err)
	}
	id := strings.TrimSpace(string(b))
	if id == "" {
		return "", fmt.Errorf("%w: --data-dir %s: its node-id file is empty", ErrNotNodeDir, dataDir)
	}
	return id, nil
}

// hostedGroups are the groups whose replica dataDir holds: the meta group,
// then the data groups in order of ID.
func hostedGroups(dataDir string) ([]shard.GroupID, error) {
	ids := []shard.GroupID{shard.MetaGroup}
	entries, err := os.ReadDir(filepath.Join(dataDir, "groups"))
	if errors.Is(err, os.ErrNotExist) {
		return ids, nil
	}
	if err != nil {
		return nil, fmt.Errorf("node: --data-dir: %w", err)
	}
	var data []shard.GroupID
	for _, e := range entries {
		n, err := strconv.ParseUint(e.Name(), 10, 32)
		if err != nil || !e.IsDir() || n == uint64(shard.MetaGroup) || !Exists(dataDir, shard.GroupID(n)) {
			continue
		}
		data = append(data, shard.GroupID(n))
	}
	slices.Sort(data)
	return append(ids, data...), nil
}

// inspect reads a replica's last entry, newest snapshot and latest
// configuration (the newest snapshot's, or a later one in the log).
func inspect(id uint32, logs raft.LogStore, snaps raft.SnapshotStore) (RecoveryGroup, raft.Configuration, error) {
	rg := RecoveryGroup{ID: id}
	var cfg raft.Configuration
	metas, err := snaps.List()
	if err != nil {
		return rg, cfg, err
	}
	if len(metas) > 0 {
		rg.SnapshotIndex, rg.LastIndex, rg.LastTerm = metas[0].Index, metas[0].Index, metas[0].Term
		cfg = metas[0].Configuration
	}
	first, err := logs.FirstIndex()
	if err != nil {
		return rg, cfg, err
	}
	last, err := logs.LastIndex()
	if err != nil {
		return rg, cfg, err
	}
	for i := max(first, rg.SnapshotIndex+1); last > 0 && i <= last; i++ {
		var e raft.Log
		if err := logs.GetLog(i, &e); err != nil {
			return rg, cfg, fmt.Errorf("entry %d: %w", i, err)
		}
		if e.Type == raft.LogConfiguration {
			cfg = raft.DecodeConfiguration(e.Data)
		}
		rg.LastIndex, rg.LastTerm = e.Index, e.Term
	}
	for _, s := range cfg.Servers {
		if s.Suffrage == raft.Voter {
			rg.Voters = append(rg.Voters, string(s.ID))
		}
	}
	return rg, cfg, nil
}

// unhosted are the data groups of the shard map the meta replica (its
// newest snapshot and its log replayed) holds that plan has no replica of.
func unhosted(plan *RecoveryPlan, logs raft.LogStore, snaps raft.SnapshotStore) ([]uint32, error) {
	f := fsm.New(fsm.Options{})
	from := uint64(1)
	if metas, err := snaps.List(); err != nil {
		return nil, err
	} else if len(metas) > 0 {
		_, rc, err := snaps.Open(metas[0].ID)
		if err != nil {
			return nil, err
		}
		err = f.Restore(rc)
		_ = rc.Close()
		if err != nil {
			return nil, err
		}
		from = metas[0].Index + 1
	}
	last, err := logs.LastIndex()
	if err != nil {
		return nil, err
	}
	for i := from; i <= last; i++ {
		var e raft.Log
		if err := logs.GetLog(i, &e); err != nil {
			if errors.Is(err, raft.ErrLogNotFound) {
				continue // below the log's first entry, inside the snapshot
			}
			return nil, fmt.Errorf("entry %d: %w", i, err)
		}
		if e.Type == raft.LogCommand {
			_ = f.Apply(&e)
		}
	}
	m, ok := f.ShardMap()
	if !ok {
		return nil, nil
	}
	var out []uint32
	for _, g := range m.Groups {
		if !slices.ContainsFunc(plan.Groups, func(rg RecoveryGroup) bool { return rg.ID == uint32(g.ID) && rg.Skipped == "" }) {
			out = append(out, uint32(g.ID))
		}
	}
	return out, nil
}
