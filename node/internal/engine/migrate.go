package engine

import (
	"context"
	"fmt"
	"time"

	raftcmdv1 "github.com/quorate/quorate/proto/quorate/raftcmd/v1"
	quoratev1 "github.com/quorate/quorate/proto/quorate/v1"

	"connectrpc.com/connect"
	"github.com/quorate/quorate/admission"
	"github.com/quorate/quorate/fsm"
	"github.com/quorate/quorate/shard"
	"google.golang.org/protobuf/proto"
)

// CheckMigrationEntry refuses slot-migration entry env for group id, which
// this node leads, unless it belongs to a plan step being driven now
// (fitsPlan; a backup's RestoreSlots page belongs to none and passes),
// and an import whose source time is more than fsm.MaxClockSkew ahead of
// this leader's clock (the group refuses it too, against the entry's own
// time).
func (n *Engine) CheckMigrationEntry(ctx context.Context, id shard.GroupID, env *raftcmdv1.Envelope) error {
	if env.GetRestoreSlots() != nil {
		return nil // a restore belongs to no plan (its admin call was authorized)
	}
	if err := n.CheckPlanned(ctx, MigrationCallOf(id, env)); err != nil {
		return err
	}
	imp := env.GetImportSlots()
	if imp == nil {
		return nil
	}
	if src, now := imp.GetSourceNowUnixNano(), n.Now(); src > now.Add(fsm.MaxClockSkew).UnixNano() {
		return &admission.FieldError{Field: "source_now_unix_nano", Err: fsm.ErrClockSkew, Reason: fmt.Sprintf(
			"clock skew: migration %d's source time %s is %v ahead of group %d's leader %s (at most %v)", imp.GetMigration(),
			time.Unix(0, src).UTC().Format(time.RFC3339Nano), time.Duration(src-now.UnixNano()), id, n.cfg.ID, fsm.MaxClockSkew)}
	}
	return nil
}

// ApplyToGroup proposes a slot-migration entry to data group id: here when
// this node leads it, else through the replica that does (the map's
// replicas in turn, until one answers as leader).
func (n *Engine) ApplyToGroup(ctx context.Context, id shard.GroupID, env *raftcmdv1.Envelope) error {
	if g := n.DataGroup(id); g != nil && g.IsLeader() {
		if err := n.CheckMigrationEntry(ctx, id, env); err != nil {
			return err
		}
		_, err := n.ProposeTo(ctx, Dest{Replica: g, ID: id}, env)
		return err
	}
	body, err := proto.Marshal(env)
	if err != nil {
		return err
	}
	return n.OnReplicas(ctx, id, func(ctx context.Context, p *PeerClient) error {
		_, err := p.Peer.ApplyToGroup(ctx, connect.NewRequest(&quoratev1.ApplyToGroupRequest{Group: uint32(id), Envelope: body}))
		return err
	})
}

// OnReplicas calls call on group id's leader as this node knows it, else on
// its other replicas in turn, until one succeeds or answers something other
// than "unavailable" (not the leader, no replica).
func (n *Engine) OnReplicas(ctx context.Context, id shard.GroupID, call func(context.Context, *PeerClient) error) error {
	m, ok := n.meta.FSM.ShardMap()
	if !ok {
		return ErrNoShardMap
	}
	sg, ok := m.Group(id)
	if !ok {
		return fmt.Errorf("%w: group %d is not in the shard map", ErrNotProposed, id)
	}
	var last error = fmt.Errorf("%w: group %d has no replica to ask", ErrNotProposed, id)
	d := Dest{Replica: n.DataGroup(id), ID: id, Nodes: sg.Replicas}
	if d.Replica != nil {
		if addr, _ := n.ForwardAddr(d, 0); addr != "" {
			if last = call(ctx, n.peerPorts.At(addr)); connect.CodeOf(last) != connect.CodeUnavailable {
				return last
			}
		}
	}
	d.Replica = nil
	for i := range sg.Replicas {
		addr, _ := n.ForwardAddr(d, i)
		if addr == "" {
			continue
		}
		if last = call(ctx, n.peerPorts.At(addr)); last == nil || connect.CodeOf(last) != connect.CodeUnavailable {
			return last
		}
	}
	return last
}

// ExportPage reads one page of migration's state from a replica of group
// from: this node's when it applied the freeze, else another's.
func (n *Engine) ExportPage(ctx context.Context, from shard.GroupID, migration uint64, r shard.SlotRange, cursor []byte) (fsm.ExportPage, error) {
	if g := n.DataGroup(from); g != nil {
		if page, err := g.FSM.ExportSlots(migration, r, cursor, n.cfg.MigrationChunkBytes); err == nil {
			return page, nil
		}
	}
	var page fsm.ExportPage
	err := n.OnReplicas(ctx, from, func(ctx context.Context, p *PeerClient) error {
		resp, err := p.Peer.ExportSlots(ctx, connect.NewRequest(&quoratev1.ExportSlotsRequest{Group: uint32(from), Migration: migration,
			Start: uint32(r.Start), End: uint32(r.End), Cursor: cursor, MaxBytes: uint32(n.cfg.MigrationChunkBytes)}))
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
