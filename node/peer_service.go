package node

import (
	"context"
	"fmt"

	"connectrpc.com/connect"
	"google.golang.org/protobuf/proto"

	"github.com/quorate/quorate/node/internal/engine"
	raftcmdv1 "github.com/quorate/quorate/proto/quorate/raftcmd/v1"
	quoratev1 "github.com/quorate/quorate/proto/quorate/v1"
	"github.com/quorate/quorate/proto/quorate/v1/quoratev1connect"
	"github.com/quorate/quorate/shard"
)

// errNoReplica: this node hosts no replica of the group asked; another
// replica may answer (onReplicas tries the next on Unavailable).
var errNoReplica = fmt.Errorf("%w: no replica here", engine.ErrNotProposed)

// peerHandler serves quorate.v1.PeerService (forwarding channel only).
type peerHandler struct {
	n *Node
}

var _ quoratev1connect.PeerServiceHandler = (*peerHandler)(nil)

func (h *peerHandler) ExportSlots(ctx context.Context, req *connect.Request[quoratev1.ExportSlotsRequest]) (*connect.Response[quoratev1.ExportSlotsResponse], error) {
	m := req.Msg
	g := h.n.engine.DataGroup(shard.GroupID(m.GetGroup()))
	if g == nil {
		return nil, h.n.toConnectError(fmt.Errorf("%w: node %s hosts no replica of group %d", errNoReplica, h.n.cfg.ID, m.GetGroup()))
	}
	r := shard.SlotRange{Start: shard.Slot(min(m.GetStart(), shard.SlotCount)), End: shard.Slot(min(m.GetEnd(), shard.SlotCount))}
	// Frozen slots are read only for the step that froze them, while it
	// copies.
	if err := h.n.engine.CheckPlanned(ctx, engine.MigrationCall{Kind: "export", Group: g.ID, Migration: m.GetMigration(), Range: r}); err != nil {
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
		return nil, n.toConnectError(engine.BadRequest("envelope", "%v", err))
	}
	if !isCoordination(env) {
		return nil, n.toConnectError(engine.BadRequest("envelope", "only slot-migration entries may be applied to a group this way"))
	}
	g := n.engine.DataGroup(shard.GroupID(req.Msg.GetGroup()))
	if g == nil || !g.IsLeader() {
		return nil, n.toConnectError(fmt.Errorf("%w: node %s does not lead group %d", engine.ErrNotLeader, n.cfg.ID, req.Msg.GetGroup()))
	}
	ctx, cancel := n.engine.RequestContext(ctx)
	defer cancel()
	if err := n.engine.CheckMigrationEntry(ctx, g.ID, env); err != nil {
		return nil, n.toConnectError(err)
	}
	if _, err := n.engine.ProposeTo(ctx, engine.Dest{Replica: g, ID: g.ID}, env); err != nil {
		return nil, n.toConnectError(err)
	}
	return connect.NewResponse(&quoratev1.ApplyToGroupResponse{}), nil
}

// isCoordination reports whether env is a slot-migration entry.
func isCoordination(env *raftcmdv1.Envelope) bool {
	switch env.GetBody().(type) {
	case *raftcmdv1.Envelope_FreezeSlots, *raftcmdv1.Envelope_UnfreezeSlots, *raftcmdv1.Envelope_ImportSlots, *raftcmdv1.Envelope_DropImport,
		*raftcmdv1.Envelope_RestoreSlots:
		return true
	}
	return false
}
