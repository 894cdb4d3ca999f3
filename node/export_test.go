package node

import (
	"slices"

	"github.com/hashicorp/raft"

	"github.com/quorate/quorate/shard"
)

// GroupOf returns the data group key routes to by n's replica of the shard
// map; ok is false without a map.
func GroupOf(n *Node, key string) (group uint32, ok bool) {
	r, ok := n.meta.FSM.Route(key)
	return uint32(r.Group), ok
}

// ForwardDials is how many connections n opened over the peer mux's
// forwarding channel (the only channel n dials with Mux.Dial).
func ForwardDials(n *Node) int64 { return n.mux.Stats().Dials }

// DropPeerConnections closes n's idle connections to other nodes, so the next
// request to one dials anew.
func DropPeerConnections(n *Node) {
	n.apiPorts.Close()
	n.peerPorts.Close()
}

// MinFeatureLevel is the lowest feature level n's meta replica records.
func MinFeatureLevel(n *Node) uint32 { return n.meta.FSM.MinFeatureLevel() }

// GroupVoters returns the voters of data group gid in n's replica's Raft
// configuration (nil when n hosts no replica of it).
func GroupVoters(n *Node, gid uint32) []string {
	g := n.engine.DataGroup(shard.GroupID(gid))
	if g == nil {
		return nil
	}
	f := g.Raft.GetConfiguration()
	if f.Error() != nil {
		return nil
	}
	var out []string
	for _, s := range f.Configuration().Servers {
		if s.Suffrage == raft.Voter {
			out = append(out, string(s.ID))
		}
	}
	slices.Sort(out)
	return out
}

// GroupStateCounts returns the buckets, semaphores and request-ID entries
// n's replica of data group gid holds (ok false when it hosts none).
func GroupStateCounts(n *Node, gid uint32) (buckets, sems, dedupe int, ok bool) {
	g := n.engine.DataGroup(shard.GroupID(gid))
	if g == nil {
		return 0, 0, 0, false
	}
	return g.FSM.BucketCount(), g.FSM.SemaphoreCount(), g.FSM.DedupeLen(), true
}

// SlotOf is key's slot.
func SlotOf(key string) uint32 { return uint32(shard.SlotOf(key)) }

// SetSharedSegmentBytes sets the size of the segment files of the shared
// log of cfg's node.
func SetSharedSegmentBytes(cfg *Config, n int) { cfg.sharedSegmentBytes = n }

// TransferMetaLeadership makes n, which leads the meta group, hand its
// leadership to another voter and waits for that.
func TransferMetaLeadership(n *Node) error {
	return n.meta.Raft.LeadershipTransfer().Error()
}
