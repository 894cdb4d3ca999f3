package replica

import (
	"context"
	"net"
	"time"

	"github.com/hashicorp/go-hclog"
	"github.com/hashicorp/raft"

	"github.com/quorate/quorate/peermux"
	"github.com/quorate/quorate/raftmux"
)

// Every group's Raft traffic goes over the node's raftmux.Hub: one shared
// connection to each peer (peer port channel ChannelRaft) carries the RPCs
// of every group, and each InstallSnapshot has a connection of its own
// (ChannelRaftSnapshot). A group's raft.Transport is the hub's
// (raftmux.Transport) for the group's ID.

// NewHub starts the node's hub on the peer port. Heartbeats (and their
// answers) linger up to hb/20 for others to share their write: a quiet
// leader (quiet.go) heartbeats a peer every hb/4 to hb/2, so a heartbeat's
// round trip, grown by up to hb/10, still ends well within the followers'
// hb and the leader's lease.
func NewHub(m *peermux.Mux, hb time.Duration, hlog hclog.Logger) (*raftmux.Hub, error) {
	l, err := m.Listener(peermux.ChannelRaft)
	if err != nil {
		return nil, err
	}
	sl, err := m.Listener(peermux.ChannelRaftSnapshot)
	if err != nil {
		_ = l.Close()
		return nil, err
	}
	dial := func(ch uint64) raftmux.Dial {
		return func(ctx context.Context, a raft.ServerAddress) (net.Conn, error) {
			return m.Dial(ctx, string(a), ch)
		}
	}
	hub, err := raftmux.New(raftmux.Options{
		Dial: dial(peermux.ChannelRaft), DialSnapshot: dial(peermux.ChannelRaftSnapshot),
		Listener: l, SnapshotListener: sl, Timeout: peermux.RaftTimeout, Logger: hlog,
		FrameTimeout: m.IdleTimeout(), // the shared connection is exempt from it between frames only
		Linger:       max(hb/20, time.Millisecond),
	})
	if err != nil {
		_ = l.Close()
		_ = sl.Close()
		return nil, err
	}
	return hub, nil
}
