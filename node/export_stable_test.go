package node

import (
	"errors"
	"io"
	"math"
	"time"

	"github.com/hashicorp/go-hclog"
	"github.com/hashicorp/raft"

	"github.com/quorate/quorate/fsm"
	"github.com/quorate/quorate/node/internal/replica"
	"github.com/quorate/quorate/shard"
)

// ReplicaVote reads group gid's current term, and the term and candidate
// (its Raft address) of its last vote (0 and "" when it never voted), from
// the stable store of the stopped node cfg.
func ReplicaVote(cfg Config, gid uint32) (term, voteTerm uint64, candidate string, err error) {
	logs, _, s, err := replica.OpenStopped(cfg.DataDir, gid)
	if err != nil {
		return 0, 0, "", err
	}
	defer logs.Close()
	if term, err = s.GetUint64([]byte("CurrentTerm")); err != nil {
		return 0, 0, "", err
	}
	voteTerm, err = s.GetUint64([]byte("LastVoteTerm"))
	if err != nil && err.Error() != "not found" { // raft's test for a missing key
		return 0, 0, "", err
	}
	cand, err := s.Get([]byte("LastVoteCand"))
	if err != nil && err.Error() != "not found" {
		return 0, 0, "", err
	}
	return term, voteTerm, string(cand), nil
}

// AskVote starts group gid's replica from the files of the stopped node
// cfg, with raft on an in-memory transport and timeouts that keep it a
// follower, and has the candidate with ID id (a voter of the group) and
// Raft address addr ask it for its vote in term, with a log as up to date
// as can be. It reports whether raft granted the vote.
func AskVote(cfg Config, gid uint32, id, addr string, term uint64) (granted bool, err error) {
	logs, view, stable, err := replica.OpenStopped(cfg.DataDir, gid)
	if err != nil {
		return false, err
	}
	defer func() { err = errors.Join(err, logs.Close()) }()
	snaps, err := raft.NewFileSnapshotStore(replica.GroupDir(cfg.DataDir, shard.GroupID(gid)), 2, io.Discard)
	if err != nil {
		return false, err
	}
	rc := raft.DefaultConfig()
	rc.LocalID = raft.ServerID(cfg.ID)
	rc.HeartbeatTimeout, rc.ElectionTimeout = time.Hour, time.Hour
	rc.Logger = hclog.NewNullLogger()
	self, trans := raft.NewInmemTransport("")
	candAddr, cand := raft.NewInmemTransport("")
	trans.Connect(candAddr, cand)
	cand.Connect(self, trans)
	r, err := raft.NewRaft(rc, fsm.New(fsm.Options{DataGroup: gid != 0}), view, stable, snaps, trans)
	if err != nil {
		return false, err
	}
	defer func() { err = errors.Join(err, r.Shutdown().Error()) }()
	var resp raft.RequestVoteResponse
	req := &raft.RequestVoteRequest{RPCHeader: raft.RPCHeader{ProtocolVersion: raft.ProtocolVersionMax, ID: []byte(id), Addr: []byte(addr)},
		Term: term, LastLogIndex: math.MaxUint64 / 2, LastLogTerm: term}
	if err := cand.RequestVote(rc.LocalID, self, req, &resp); err != nil {
		return false, err
	}
	return resp.Granted, nil
}
