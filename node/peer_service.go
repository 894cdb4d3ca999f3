package node

import (
	"context"
	"fmt"
	"time"

	"connectrpc.com/connect"
	"google.golang.org/protobuf/proto"

	"github.com/quorate/quorate/admission"
	"github.com/quorate/quorate/fsm"
	raftcmdv1 "github.com/quorate/quorate/proto/quorate/raftcmd/v1"
	quoratev1 "github.com/quorate/quorate/proto/quorate/v1"
	"github.com/quorate/quorate/proto/quorate/v1/quoratev1connect"
	"github.com/quorate/quorate/shard"
)

// errNoReplica: this node hosts no replica of the group asked; another
// replica may answer (onReplicas tries the next on Unavailable).
var errNoReplica = fmt.Errorf("%w: no replica here", ErrNotProposed)

// peerHandler serves quorate.v1.PeerService (forwarding channel only).
type peerHandler struct {
	n *Node
}

var _ quoratev1connect.PeerServiceHandler = (*peerHandler)(nil)

func (h *peerHandler) ExportSlots(ctx context.Context, req *connect.Request[quoratev1.ExportSlotsRequest]) (*connect.Response[quoratev1.ExportSlotsResponse], error) {
	m := req.Msg
	g := h.n.dataGroup(shard.GroupID(m.GetGroup()))
	if g == nil {
		return nil, h.n.toConnectError(fmt.Errorf("%w: node %s hosts no replica of group %d", errNoReplica, h.n.cfg.ID, m.GetGroup()))
	}
	r := shard.SlotRange{Start: shard.Slot(min(m.GetStart(), shard.SlotCount)), End: shard.Slot(min(m.GetEnd(), shard.SlotCount))}
	// Frozen slots are read only for the step that froze them, while it
	// copies.
	if err := h.n.checkPlanned(ctx, migrationCall{kind: "export", group: g.ID, migration: m.GetMigration(), r: r}); err != nil {
		return nil, h.n.toConnectError(err)
	}
	maxBytes := int(m.GetMaxBytes())
	if maxBytes <= 0 || maxBytes > MaxMigrationChunkBytes {
		maxBytes = h.n.cfg.migrationChunkBytes()
	}
	page, err := g.FSM.ExportSlots(m.GetMigration(), r, m.GetCursor(), maxBytes)
	if err != nil {
		return nil, h.n.toConnectError(err)
	}
	state, err := proto.Marshal(page.State)
	if err != nil {
		return nil, h.n.toConnectError(fmt.Errorf("encoding the export page: %w", err)) // a bug: Internal
	}
	return connect.NewResponse(&quoratev1.ExportSlotsResponse{State: state, Records: uint32(page.Records),
		NextCursor: page.Next, Done: page.Done, SourceNowUnixNano: page.SourceNow}), nil
}

func (h *peerHandler) ApplyToGroup(ctx context.Context, req *connect.Request[quoratev1.ApplyToGroupRequest]) (*connect.Response[quoratev1.ApplyToGroupResponse], error) {
	n := h.n
	env := new(raftcmdv1.Envelope)
	if err := proto.Unmarshal(req.Msg.GetEnvelope(), env); err != nil {
		return nil, n.toConnectError(badRequest("envelope", "%v", err))
	}
	if !isCoordination(env) {
		return nil, n.toConnectError(badRequest("envelope", "only slot-migration entries may be applied to a group this way"))
	}
	g := n.dataGroup(shard.GroupID(req.Msg.GetGroup()))
	if g == nil || !g.IsLeader() {
		return nil, n.toConnectError(fmt.Errorf("%w: node %s does not lead group %d", ErrNotLeader, n.cfg.ID, req.Msg.GetGroup()))
	}
	ctx, cancel := n.requestContext(ctx)
	defer cancel()
	if err := n.checkMigrationEntry(ctx, g.ID, env); err != nil {
		return nil, n.toConnectError(err)
	}
	if _, err := n.proposeTo(ctx, dest{g: g, id: g.ID}, env); err != nil {
		return nil, n.toConnectError(err)
	}
	return connect.NewResponse(&quoratev1.ApplyToGroupResponse{}), nil
}

// checkMigrationEntry refuses slot-migration entry env for group id, which
// this node leads, unless it belongs to a plan step being driven now
// (fitsPlan), and an import whose source time is more than
// fsm.MaxClockSkew ahead of this leader's clock (the group refuses it too,
// against the entry's own time).
func (n *Node) checkMigrationEntry(ctx context.Context, id shard.GroupID, env *raftcmdv1.Envelope) error {
	if err := n.checkPlanned(ctx, migrationCallOf(id, env)); err != nil {
		return err
	}
	imp := env.GetImportSlots()
	if imp == nil {
		return nil
	}
	if src, now := imp.GetSourceNowUnixNano(), n.now(); src > now.Add(fsm.MaxClockSkew).UnixNano() {
		return &admission.FieldError{Field: "source_now_unix_nano", Err: fsm.ErrClockSkew, Reason: fmt.Sprintf(
			"clock skew: migration %d's source time %s is %v ahead of group %d's leader %s (at most %v)", imp.GetMigration(),
			time.Unix(0, src).UTC().Format(time.RFC3339Nano), time.Duration(src-now.UnixNano()), id, n.cfg.ID, fsm.MaxClockSkew)}
	}
	return nil
}

// isCoordination reports whether env is a slot-migration entry.
func isCoordination(env *raftcmdv1.Envelope) bool {
	switch env.GetBody().(type) {
	case *raftcmdv1.Envelope_FreezeSlots, *raftcmdv1.Envelope_UnfreezeSlots, *raftcmdv1.Envelope_ImportSlots, *raftcmdv1.Envelope_DropImport:
		return true
	}
	return false
}

// applyToGroup proposes a slot-migration entry to data group id: here when
// this node leads it, else through the replica that does (the map's
// replicas in turn, until one answers as leader).
func (n *Node) applyToGroup(ctx context.Context, id shard.GroupID, env *raftcmdv1.Envelope) error {
	if g := n.dataGroup(id); g != nil && g.IsLeader() {
		if err := n.checkMigrationEntry(ctx, id, env); err != nil {
			return err
		}
		_, err := n.proposeTo(ctx, dest{g: g, id: id}, env)
		return err
	}
	body, err := proto.Marshal(env)
	if err != nil {
		return err
	}
	return n.onReplicas(ctx, id, func(ctx context.Context, p *peerClient) error {
		_, err := p.peer.ApplyToGroup(ctx, connect.NewRequest(&quoratev1.ApplyToGroupRequest{Group: uint32(id), Envelope: body}))
		return err
	})
}

// onReplicas calls call on group id's leader as this node knows it, else on
// its other replicas in turn, until one succeeds or answers something other
// than "unavailable" (not the leader, no replica).
func (n *Node) onReplicas(ctx context.Context, id shard.GroupID, call func(context.Context, *peerClient) error) error {
	m, ok := n.meta.FSM.ShardMap()
	if !ok {
		return errNoShardMap
	}
	sg, ok := m.Group(id)
	if !ok {
		return fmt.Errorf("%w: group %d is not in the shard map", ErrNotProposed, id)
	}
	var last error = fmt.Errorf("%w: group %d has no replica to ask", ErrNotProposed, id)
	d := dest{g: n.dataGroup(id), id: id, replicas: sg.Replicas}
	if d.g != nil {
		if addr, _ := n.forwardAddr(d, 0); addr != "" {
			if last = call(ctx, n.peerPorts.at(addr)); connect.CodeOf(last) != connect.CodeUnavailable {
				return last
			}
		}
	}
	d.g = nil
	for i := range sg.Replicas {
		addr, _ := n.forwardAddr(d, i)
		if addr == "" {
			continue
		}
		if last = call(ctx, n.peerPorts.at(addr)); last == nil || connect.CodeOf(last) != connect.CodeUnavailable {
			return last
		}
	}
	return last
}

// exportPage reads one page of migration's state from a replica of group
// from: this node's when it applied the freeze, else another's.
func (n *Node) exportPage(ctx context.Context, from shard.GroupID, migration uint64, r shard.SlotRange, cursor []byte) (fsm.ExportPage, error) {
	if g := n.dataGroup(from); g != nil {
		if page, err := g.FSM.ExportSlots(migration, r, cursor, n.cfg.migrationChunkBytes()); err == nil {
			return page, nil
		}
	}
	var page fsm.ExportPage
	err := n.onReplicas(ctx, from, func(ctx context.Context, p *peerClient) error {
		resp, err := p.peer.ExportSlots(ctx, connect.NewRequest(&quoratev1.ExportSlotsRequest{Group: uint32(from), Migration: migration,
			Start: uint32(r.Start), End: uint32(r.End), Cursor: cursor, MaxBytes: uint32(n.cfg.migrationChunkBytes())}))
		if err != nil {
			return err
		}
		m := resp.Msg
		page = fsm.ExportPage{State: new(raftcmdv1.SlotState), Records: int(m.GetRecords()), Next: m.GetNextCursor(),
			Done: m.GetDone(), SourceNow: m.GetSourceNowUnixNano()}
		return proto.Unmarshal(m.GetState(), page.State)
	})
	return page, err
}
