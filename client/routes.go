package client

import (
	"context"
	"math/rand/v2"
	"slices"
	"sort"
	"sync"

	"connectrpc.com/connect"

	"github.com/quorate/quorate/client/slot"
	quoratev1 "github.com/quorate/quorate/proto/quorate/v1"
)

// leaderHeader is the response header a node sets on an answer it got by
// forwarding the call to another node (the key's group leader): the client's
// routes are stale.
const leaderHeader = "Quorate-Leader"

// routeTable is one Routes answer, ready for lookups.
type routeTable struct {
	epoch   uint64
	slots   []*quoratev1.SlotRoute // sorted by start
	leaders map[uint32]string      // group → leader API URL
	members []string
}

func newRouteTable(r *quoratev1.RoutesResponse) *routeTable {
	t := &routeTable{epoch: r.GetEpoch(), slots: slices.Clone(r.GetSlots()), leaders: map[uint32]string{}}
	sort.Slice(t.slots, func(i, j int) bool { return t.slots[i].GetStart() < t.slots[j].GetStart() })
	for _, g := range r.GetGroups() {
		if u := g.GetLeaderUrl(); u != "" {
			t.leaders[g.GetGroup()] = u
		}
	}
	for _, m := range r.GetMembers() {
		if m != "" {
			t.members = append(t.members, m)
		}
	}
	return t
}

// leaderOf is the API URL of the leader of key's group, "" when unknown.
func (t *routeTable) leaderOf(key string) string {
	s := uint32(slot.Of(key))
	i := sort.Search(len(t.slots), func(i int) bool { return t.slots[i].GetEnd() > s })
	if i == len(t.slots) || t.slots[i].GetStart() > s {
		return ""
	}
	return t.leaders[t.slots[i].GetGroup()]
}

// router keeps the newest routes the client learnt and refreshes them in
// the background, one refresh at a time.
type router struct {
	c       *Client
	servers []string // Config.Servers: asked when the routes name no member

	mu         sync.Mutex
	table      *routeTable // nil until the first Routes answer
	seenEpoch  uint64      // the highest epoch any node answered
	refreshing bool
	again      bool // a refresh was asked for while one ran
	turn       int  // the next of servers, with Config.DisableRouting
}

func newRouter(c *Client, servers []string) *router {
	return &router{c: c, servers: servers}
}

// members is every node the client knows: the routes' members and the
// configured servers.
func (r *router) members() []string {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.membersLocked()
}

func (r *router) membersLocked() []string {
	if r.table == nil || len(r.table.members) == 0 {
		return r.servers
	}
	out := slices.Clone(r.table.members)
	for _, s := range r.servers {
		if !slices.Contains(out, s) {
			out = append(out, s)
		}
	}
	return out
}

// target is the server to send a call for key to: its group leader when the
// routes name one that avoid does not, else a random member not in avoid
// (any member once every one is).
//
// With Config.DisableRouting it is the next of the configured servers in
// turn, whatever key and avoid.
func (r *router) target(key string, avoid map[string]bool) string {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.c.cfg.DisableRouting {
		s := r.servers[r.turn%len(r.servers)]
		r.turn++
		return s
	}
	if r.table != nil && key != "" {
		if l := r.table.leaderOf(key); l != "" && !avoid[l] {
			return l
		}
	}
	members := r.membersLocked()
	var ok []string
	for _, m := range members {
		if !avoid[m] {
			ok = append(ok, m)
		}
	}
	if len(ok) == 0 {
		clear(avoid)
		ok = members
	}
	return ok[rand.N(len(ok))]
}

// refresh asks for the routes again in the background; a refresh asked for
// while one runs makes it run once more when it ends. It does nothing with
// Config.DisableRouting.
func (r *router) refresh() {
	if r.c.cfg.DisableRouting {
		return
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.refreshing {
		r.again = true
		return
	}
	r.refreshing = true
	r.c.wg.Add(1)
	go r.run()
}

func (r *router) run() {
	defer r.c.wg.Done()
	for {
		r.fetch(r.c.ctx)
		r.mu.Lock()
		if !r.again || r.c.ctx.Err() != nil {
			r.refreshing = false
			r.mu.Unlock()
			return
		}
		r.again = false
		r.mu.Unlock()
	}
}

// fetch asks the known nodes in turn for their routes and installs the
// first answer whose epoch is not older than one already seen; a node that
// does not host a group names no leader for it, so the leaders other nodes
// of the same epoch name fill the gaps. A node whose routes call fails, or
// that answers an older map, is skipped.
func (r *router) fetch(ctx context.Context) {
	var t *routeTable
	for _, m := range r.members() {
		actx, cancel := context.WithTimeout(ctx, r.c.cfg.Timeout)
		resp, err := r.c.admission(m).Routes(actx, connect.NewRequest(&quoratev1.RoutesRequest{}))
		cancel()
		if err != nil {
			r.c.cfg.Logger.Debug("routes", "server", m, "error", err)
			continue
		}
		r.mu.Lock()
		seen := r.seenEpoch
		r.mu.Unlock()
		next := newRouteTable(resp.Msg)
		switch {
		case next.epoch < seen || t != nil && next.epoch < t.epoch:
			continue
		case t == nil || next.epoch > t.epoch:
			t = next
		default:
			for g, u := range next.leaders {
				if _, ok := t.leaders[g]; !ok {
					t.leaders[g] = u
				}
			}
		}
		if t.complete() {
			break
		}
	}
	if t == nil {
		return
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	if t.epoch < r.seenEpoch {
		return
	}
	r.seenEpoch, r.table = t.epoch, t
}

// complete reports whether t names a leader for every group of its slots.
func (t *routeTable) complete() bool {
	for _, s := range t.slots {
		if t.leaders[s.GetGroup()] == "" {
			return false
		}
	}
	return true
}

// memberCount is how many members the routes name (at least 1).
func (r *router) memberCount() int {
	return max(1, len(r.members()))
}
