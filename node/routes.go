package node

import (
	"cmp"
	"context"
	"slices"

	"connectrpc.com/connect"

	"github.com/quorate/quorate/fsm"
	"github.com/quorate/quorate/node/internal/replica"
	quoratev1 "github.com/quorate/quorate/proto/quorate/v1"
	"github.com/quorate/quorate/shard"
)

// Routes answers where each key's calls should go (AdmissionService.Routes),
// from this node's own state: no log round trip, no call to another node.
func (h *admissionHandler) Routes(context.Context, *connect.Request[quoratev1.RoutesRequest]) (*connect.Response[quoratev1.RoutesResponse], error) {
	return connect.NewResponse(h.routes()), nil
}

// routes is this node's view of where calls go: the shard map its meta
// replica applied (slot ranges in slot order, adjacent ranges of one group
// merged), each data group's leader as the replica hosted here sees it (no
// leader for a group not hosted here), and every registered member's API
// URL, this node's first. A cluster without data groups has one route: every
// slot to the meta group (0), which holds the data. A cluster expecting data
// groups that has no map yet answers epoch 0 and no slots: the client asks
// again.
func (h *admissionHandler) routes() *quoratev1.RoutesResponse {
	n := h.n
	scheme := n.cfg.apiScheme()
	apiURL := map[string]string{}
	out := &quoratev1.RoutesResponse{SlotCount: shard.SlotCount}
	nodes := n.meta.FSM.Nodes()
	slices.SortFunc(nodes, func(a, b fsm.Node) int { return cmp.Compare(a.ID, b.ID) })
	for _, m := range nodes {
		if m.APIAddr != "" {
			apiURL[m.ID] = scheme + "://" + m.APIAddr
		}
	}
	self := scheme + "://" + n.apiAddr
	out.Members = append(out.Members, self)
	for _, m := range nodes {
		if u := apiURL[m.ID]; u != "" && m.ID != n.cfg.ID && u != self {
			out.Members = append(out.Members, u)
		}
	}
	leader := func(id shard.GroupID, g *replica.Replica) *quoratev1.GroupRoute {
		r := &quoratev1.GroupRoute{Group: uint32(id)}
		if g != nil {
			r.LeaderId = g.LeaderID()
			if r.LeaderId == n.cfg.ID {
				r.LeaderUrl = self
			} else {
				r.LeaderUrl = apiURL[r.LeaderId]
			}
		}
		return r
	}
	m, ok := n.meta.FSM.ShardMap()
	if !ok {
		if n.cfg.DataGroups == 0 {
			out.Slots = []*quoratev1.SlotRoute{{Start: 0, End: shard.SlotCount, Group: uint32(shard.MetaGroup)}}
			out.Groups = []*quoratev1.GroupRoute{leader(shard.MetaGroup, n.meta)}
		}
		return out
	}
	out.Epoch = m.Epoch
	for _, a := range m.Ranges {
		if k := len(out.Slots); k > 0 && out.Slots[k-1].Group == uint32(a.Group) && out.Slots[k-1].End == uint32(a.Range.Start) {
			out.Slots[k-1].End = uint32(a.Range.End)
			continue
		}
		out.Slots = append(out.Slots, &quoratev1.SlotRoute{Start: uint32(a.Range.Start), End: uint32(a.Range.End), Group: uint32(a.Group)})
	}
	for _, g := range m.Groups {
		out.Groups = append(out.Groups, leader(g.ID, n.engine.DataGroup(g.ID)))
	}
	return out
}
