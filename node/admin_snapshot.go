package node

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"maps"
	"slices"
	"sync"
	"time"

	"connectrpc.com/connect"
	"github.com/cenkalti/backoff/v5"
	"google.golang.org/protobuf/proto"

	"github.com/quorate/quorate/fsm"
	"github.com/quorate/quorate/node/internal/engine"
	"github.com/quorate/quorate/node/internal/replica"
	raftcmdv1 "github.com/quorate/quorate/proto/quorate/raftcmd/v1"
	quoratev1 "github.com/quorate/quorate/proto/quorate/v1"
	"github.com/quorate/quorate/proto/quorate/v1/quoratev1connect"
	"github.com/quorate/quorate/shard"
)

// A backup (quorate admin snapshot save) reads each group's state in
// pages. A group's first page is read on its leader after a read barrier
// (engine.CaughtUp): the leader copies the group's state at one applied
// index (fsm.Backup) into a save session, and the following pages read
// that copy, so every page of a group is of one index and holds every
// command acknowledged before the first. Sessions live in the leader's
// memory until its last page, or until it has been idle for
// saveSessionIdle when the node next adds or reads one; a new leader has
// none (the save starts again).

// Bounds of a save.
const (
	defaultSavePageBytes = 1 << 20
	maxSavePageBytes     = 4 << 20
	saveSessionIdle      = 2 * time.Minute
	maxSaveSessions      = 8
)

// errSaveSession is returned for a page of a save session this node does
// not hold: it expired, or the group's leadership moved.
var errSaveSession = errors.New("save session unknown")

// saveSession is one group's state copied for a save.
type saveSession struct {
	group     shard.GroupID
	backup    *fsm.Backup
	policies  []*quoratev1.Policy // the meta group's
	clusterID string
	shardMap  *quoratev1.ShardMapStatus
	used      time.Time
}

// saveSessions are the save sessions this node holds.
type saveSessions struct {
	mu sync.Mutex
	m  map[string]*saveSession
}

// add keeps s under a new ID, after forgetting idle sessions; it refuses
// one more than maxSaveSessions.
func (ss *saveSessions) add(s *saveSession) (string, error) {
	ss.mu.Lock()
	defer ss.mu.Unlock()
	ss.sweepLocked()
	if len(ss.m) >= maxSaveSessions {
		return "", connect.NewError(connect.CodeResourceExhausted, fmt.Errorf("%d saves are in progress on this node; wait for one to finish", len(ss.m)))
	}
	var b [16]byte
	_, _ = rand.Read(b[:])
	id := hex.EncodeToString(b[:])
	if ss.m == nil {
		ss.m = make(map[string]*saveSession)
	}
	s.used = time.Now()
	ss.m[id] = s
	return id, nil
}

// sweepLocked forgets the sessions idle for saveSessionIdle (ss.mu held).
func (ss *saveSessions) sweepLocked() {
	for id, o := range ss.m {
		if time.Since(o.used) > saveSessionIdle {
			delete(ss.m, id)
		}
	}
}

// get returns session id of group g, after forgetting idle sessions.
func (ss *saveSessions) get(id string, g shard.GroupID) (*saveSession, bool) {
	ss.mu.Lock()
	defer ss.mu.Unlock()
	ss.sweepLocked()
	s, ok := ss.m[id]
	if !ok || s.group != g {
		return nil, false
	}
	s.used = time.Now()
	return s, true
}

func (ss *saveSessions) done(id string) {
	ss.mu.Lock()
	defer ss.mu.Unlock()
	delete(ss.m, id)
}

func (h *adminHandler) SaveSnapshot(ctx context.Context, req *connect.Request[quoratev1.SaveSnapshotRequest]) (*connect.Response[quoratev1.SaveSnapshotResponse], error) {
	n := h.n
	m := req.Msg
	maxBytes := int(m.GetMaxBytes())
	switch {
	case maxBytes == 0:
		maxBytes = defaultSavePageBytes
	case maxBytes > maxSavePageBytes:
		return nil, n.toConnectError(engine.BadRequest("max_bytes", "a page holds at most %d bytes (got %d)", maxSavePageBytes, maxBytes))
	}
	g := shard.GroupID(m.GetGroup())
	if g == shard.MetaGroup {
		// A read: asking again after an unknown outcome is safe.
		return onMetaLeader(ctx, n, req, true, func(ctx context.Context) (*quoratev1.SaveSnapshotResponse, error) {
			return h.savePage(ctx, n.meta, m, maxBytes)
		}, quoratev1connect.AdminServiceClient.SaveSnapshot)
	}
	r := n.engine.DataGroup(g)
	if _, held := n.saves.get(m.GetSession(), g); held || (r != nil && r.IsLeader()) {
		ctx, cancel := n.engine.RequestContext(ctx)
		defer cancel()
		out, err := h.savePage(ctx, r, m, maxBytes)
		if err != nil {
			return nil, n.toConnectError(err)
		}
		return connect.NewResponse(out), nil
	}
	if req.Header().Get(engine.ForwardedHeader) != "" {
		return nil, n.toConnectError(fmt.Errorf("%w: node %s does not lead group %d", engine.ErrNotLeader, n.cfg.ID, g))
	}
	if sm, ok := n.meta.FSM.ShardMap(); !ok {
		return nil, n.toConnectError(engine.BadRequest("group", "a single-group cluster has no group %d (its state is in the meta group's, 0)", g))
	} else if _, ok := sm.Group(g); !ok {
		return nil, n.toConnectError(engine.BadRequest("group", "the shard map has no group %d", g))
	}
	var out *connect.Response[quoratev1.SaveSnapshotResponse]
	err := n.engine.OnReplicas(ctx, g, func(ctx context.Context, p *engine.PeerClient) error {
		fwd := connect.NewRequest(m)
		fwd.Header().Set(engine.ForwardedHeader, n.cfg.ID)
		engine.SetForwardedIdentity(ctx, fwd.Header())
		var err error
		out, err = p.Admin.SaveSnapshot(ctx, fwd)
		return err
	})
	if err != nil {
		return nil, n.toConnectError(err)
	}
	return out, nil
}

// savePage answers a page of a save: of session m.Session when given (r
// unused), else of a new session of r's state, which this node leads.
func (h *adminHandler) savePage(ctx context.Context, r *replica.Replica, m *quoratev1.SaveSnapshotRequest, maxBytes int) (*quoratev1.SaveSnapshotResponse, error) {
	n := h.n
	g := shard.GroupID(m.GetGroup())
	id := m.GetSession()
	s, ok := n.saves.get(id, g)
	first := false
	switch {
	case id != "" && !ok:
		return nil, connect.NewError(connect.CodeFailedPrecondition, fmt.Errorf(
			"%w: group %d's save session %s expired or its leader changed: save again", errSaveSession, g, id))
	case id == "":
		if err := n.engine.CaughtUp(ctx, r); err != nil {
			return nil, err
		}
		s = &saveSession{group: g, backup: r.FSM.Backup(), clusterID: n.mux.ClusterID()}
		if g == shard.MetaGroup {
			s.policies = policiesToAPI(n.meta.FSM.Policies())
			s.shardMap = h.shardMapStatus()
		}
		var err error
		if id, err = n.saves.add(s); err != nil {
			return nil, err
		}
		first = true
	}
	total := uint64(len(s.policies) + len(s.backup.Records))
	if m.GetOffset() > total {
		return nil, engine.BadRequest("offset", "the session holds %d records (got offset %d)", total, m.GetOffset())
	}
	out := &quoratev1.SaveSnapshotResponse{Group: uint32(g), Session: id, AppliedIndex: s.backup.AppliedIndex,
		NowUnixNano: s.backup.Now, ClusterId: s.clusterID, TotalRecords: total}
	if first {
		out.ShardMap = s.shardMap
	}
	off, size := int(m.GetOffset()), 0
	for ; off < len(s.policies) && (size < maxBytes || out.Records == 0); off++ {
		out.Policies = append(out.Policies, s.policies[off])
		size += proto.Size(s.policies[off])
		out.Records++
	}
	if off >= len(s.policies) && size < maxBytes {
		state, next := s.backup.Page(off-len(s.policies), maxBytes-size)
		var err error
		if out.State, err = proto.Marshal(state); err != nil {
			return nil, fmt.Errorf("encoding a save page: %w", err) // a bug: Internal
		}
		out.Records += uint32(next - (off - len(s.policies)))
		off = next + len(s.policies)
	}
	if out.Done = uint64(off) == total; out.Done {
		n.saves.done(id)
	}
	return out, nil
}

// RestoreSnapshot writes a page of a backup's state into the groups that
// own its slots in the meta leader's shard map (the meta group itself in a
// single-group cluster), retrying within the request's deadline while a
// group has no leader or has not applied ownership at the map's epoch yet
// (then Unavailable: the CLI sends the page again). A cluster that expects
// data groups and has no shard map yet answers Unavailable at once.
func (h *adminHandler) RestoreSnapshot(ctx context.Context, req *connect.Request[quoratev1.RestoreSnapshotRequest]) (*connect.Response[quoratev1.RestoreSnapshotResponse], error) {
	n := h.n
	state := new(raftcmdv1.SlotState)
	if err := proto.Unmarshal(req.Msg.GetState(), state); err != nil {
		return nil, n.toConnectError(engine.BadRequest("state", "not a state page: %v", err))
	}
	src := req.Msg.GetSourceNowUnixNano()
	// A page written again overwrites the same keys: safe to retry.
	return onMetaLeader(ctx, n, req, true,
		func(ctx context.Context) (*quoratev1.RestoreSnapshotResponse, error) {
			out := &quoratev1.RestoreSnapshotResponse{Records: uint32(fsm.SlotStateRecords(state))}
			sm, ok := n.meta.FSM.ShardMap()
			if !ok && n.engine.HasShardMap() {
				// Data groups are configured but not made yet: state
				// written to the meta group now would be left behind
				// when the map routes its keys to them.
				return nil, engine.ErrNoShardMap
			}
			if !ok {
				if _, err := n.engine.Propose(ctx, restoreEnvelope(state, src, 0)); err != nil {
					return nil, err
				}
				return out, nil
			}
			groups := make([]shard.GroupID, 0, len(sm.Groups))
			for _, sg := range sm.Groups {
				groups = append(groups, sg.ID)
			}
			parts, err := fsm.SplitByGroup(state, groups, func(s shard.Slot) (shard.GroupID, bool) {
				g, _, ok := sm.Lookup(s)
				return g, ok
			})
			if err != nil {
				return nil, err
			}
			for _, g := range slices.Sorted(maps.Keys(parts)) {
				env := restoreEnvelope(parts[g], src, sm.Epoch)
				if err := h.restoreInto(ctx, g, env); err != nil {
					return nil, fmt.Errorf("restoring %d records into group %d: %w", fsm.SlotStateRecords(parts[g]), g, err)
				}
				out.Groups = append(out.Groups, uint32(g))
			}
			return out, nil
		}, quoratev1connect.AdminServiceClient.RestoreSnapshot)
}

func restoreEnvelope(s *raftcmdv1.SlotState, src int64, epoch uint64) *raftcmdv1.Envelope {
	return &raftcmdv1.Envelope{Body: &raftcmdv1.Envelope_RestoreSlots{RestoreSlots: &raftcmdv1.RestoreSlots{
		SourceNowUnixNano: src, MapEpoch: epoch, State: s}}}
}

// restoreInto proposes env to data group g, retrying within ctx (the
// request's deadline) while the answer is "not yet".
func (h *adminHandler) restoreInto(ctx context.Context, g shard.GroupID, env *raftcmdv1.Envelope) error {
	err, stopped := engine.Retry(ctx, engine.Doubling(20*time.Millisecond, 500*time.Millisecond), func() error {
		err := h.n.engine.ApplyToGroup(ctx, g, proto.Clone(env).(*raftcmdv1.Envelope))
		if err == nil {
			return nil
		}
		if errors.Is(err, fsm.ErrNotOwnedYet) || errors.Is(err, engine.ErrNotLeader) || errors.Is(err, engine.ErrNotProposed) ||
			connect.CodeOf(err) == connect.CodeUnavailable {
			return err
		}
		return backoff.Permanent(err)
	})
	if err == nil {
		return stopped
	}
	return err // the last "not yet" when the deadline came first
}
