package node

import (
	"github.com/quorate/quorate/fsm"
)

// Registry is n's replica of the meta group's node registry, by ID.
func Registry(n *Node) map[string]fsm.Node {
	out := map[string]fsm.Node{}
	for _, m := range n.meta.FSM.Nodes() {
		out[m.ID] = m
	}
	return out
}

// MetaServerAddr is the Raft address of server id in n's meta group
// configuration ("" when it is not a member).
func MetaServerAddr(n *Node, id string) string {
	f := n.meta.Raft.GetConfiguration()
	if f.Error() != nil {
		return ""
	}
	for _, s := range f.Configuration().Servers {
		if string(s.ID) == id {
			return string(s.Address)
		}
	}
	return ""
}
