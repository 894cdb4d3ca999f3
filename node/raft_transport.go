package node

import (
	"context"
	"errors"
	"io"
	"net"
	"sync"
	"sync/atomic"
	"time"

	"github.com/hashicorp/go-hclog"
	"github.com/hashicorp/raft"

	"github.com/quorate/quorate/fsm"
	"github.com/quorate/quorate/peermux"
	"github.com/quorate/quorate/raftmux"
	"github.com/quorate/quorate/shard"
)

// A group's Raft traffic goes over one of two transports. The node's
// raftmux.Hub (peer port channels ChannelRaft and ChannelRaftSnapshot)
// carries every group's RPCs to a peer on one shared connection; the
// group's own peer port channel (its GroupID) carries a raft.NetworkTransport,
// the only transport of binaries below fsm.FeatureRaftMux. A node accepts
// both, and both reach the same raft instance. It sends over the hub to a
// peer only when its own feature level and the level the peer registered in
// the meta group are both FeatureRaftMux or above; to any other peer — one
// of an older binary, one held back by --max-feature-level, one not yet
// registered — it sends over the group's channel.

// muxPeersTTL is how long a node trusts its list of the peers it sends to
// over the hub before reading the meta group's registry again.
const muxPeersTTL = time.Second

// raftMux is the node's hub and the choice of peers it serves.
type raftMux struct {
	hub     *raftmux.Hub
	enabled bool                   // this node's feature level allows it
	meta    *atomic.Pointer[group] // the meta replica once open
	peers   atomic.Pointer[muxPeers]
}

// muxPeers are the Raft addresses registered at FeatureRaftMux or above.
type muxPeers struct {
	at    time.Time
	addrs map[raft.ServerAddress]bool
}

// newRaftMux starts the node's hub on the peer port. Heartbeats (and their
// answers) linger up to hb/20 for others to share their write: a quiet
// leader (quiet.go) heartbeats a peer every hb/4 to hb/2, so a heartbeat's
// round trip, grown by up to hb/10, still ends well within the followers'
// hb and the leader's lease.
func newRaftMux(m *peermux.Mux, level uint32, hb time.Duration, meta *atomic.Pointer[group], hlog hclog.Logger) (*raftMux, error) {
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
	return &raftMux{hub: hub, enabled: level >= fsm.FeatureRaftMux, meta: meta}, nil
}

// sendsTo reports whether RPCs to the node at addr go over the hub.
func (r *raftMux) sendsTo(addr raft.ServerAddress) bool {
	if !r.enabled {
		return false
	}
	p := r.peers.Load()
	if p == nil || time.Since(p.at) > muxPeersTTL {
		p = &muxPeers{at: time.Now(), addrs: make(map[raft.ServerAddress]bool)}
		if g := r.meta.Load(); g != nil {
			for _, n := range g.fsm.Nodes() {
				if n.FeatureLevel >= fsm.FeatureRaftMux {
					p.addrs[raft.ServerAddress(n.RaftAddr)] = true
				}
			}
		}
		r.peers.Store(p)
	}
	return p.addrs[addr]
}

// newGroupTransport returns group id's transport: the hub's for peers that
// speak it, net (over the group's own channel) for the others.
func (r *raftMux) newGroupTransport(id shard.GroupID, net *raft.NetworkTransport) (*groupTransport, error) {
	mt, err := r.hub.Transport(uint32(id), net.LocalAddr())
	if err != nil {
		return nil, err
	}
	t := &groupTransport{r: r, mux: mt, net: net, stop: make(chan struct{})}
	t.wg.Add(1)
	go t.forward()
	return t, nil
}

// groupTransport is one group's raft.Transport: see raftMux.
type groupTransport struct {
	r    *raftMux
	mux  *raftmux.Transport
	net  *raft.NetworkTransport
	stop chan struct{}
	once sync.Once
	wg   sync.WaitGroup
}

var (
	_ raft.Transport   = (*groupTransport)(nil)
	_ raft.WithClose   = (*groupTransport)(nil)
	_ raft.WithPreVote = (*groupTransport)(nil)
)

// forward hands the RPCs arriving over the group's own channel to raft,
// which reads the hub transport's consumer.
func (t *groupTransport) forward() {
	defer t.wg.Done()
	for {
		select {
		case rpc := <-t.net.Consumer():
			if !t.mux.Deliver(rpc, t.stop) {
				rpc.Respond(nil, raft.ErrTransportShutdown)
			}
		case <-t.stop:
			return
		}
	}
}

func (t *groupTransport) via(target raft.ServerAddress) raft.Transport {
	if t.r.sendsTo(target) {
		return t.mux
	}
	return t.net
}

// Consumer returns the RPCs of both transports.
func (t *groupTransport) Consumer() <-chan raft.RPC { return t.mux.Consumer() }

// LocalAddr returns the node's Raft address.
func (t *groupTransport) LocalAddr() raft.ServerAddress { return t.net.LocalAddr() }

// AppendEntriesPipeline opens a pipeline over the transport target gets. A
// pipeline over the group's channel fails its next send once target is
// to be reached over the hub, so raft opens the next one there.
func (t *groupTransport) AppendEntriesPipeline(id raft.ServerID, target raft.ServerAddress) (raft.AppendPipeline, error) {
	if t.r.sendsTo(target) {
		return t.mux.AppendEntriesPipeline(id, target)
	}
	p, err := t.net.AppendEntriesPipeline(id, target)
	if err != nil {
		return nil, err
	}
	return &netPipeline{AppendPipeline: p, t: t, target: target}, nil
}

// errTransportSwitched ends a pipeline over a group's channel to a peer now
// reached over the hub.
var errTransportSwitched = errors.New("node: the peer is now reached over the shared Raft connection")

type netPipeline struct {
	raft.AppendPipeline
	t      *groupTransport
	target raft.ServerAddress
}

func (p *netPipeline) AppendEntries(args *raft.AppendEntriesRequest, resp *raft.AppendEntriesResponse) (raft.AppendFuture, error) {
	if p.t.r.sendsTo(p.target) {
		return nil, errTransportSwitched
	}
	return p.AppendPipeline.AppendEntries(args, resp)
}

// AppendEntries sends an AppendEntries request to target.
func (t *groupTransport) AppendEntries(id raft.ServerID, target raft.ServerAddress, args *raft.AppendEntriesRequest, resp *raft.AppendEntriesResponse) error {
	return t.via(target).AppendEntries(id, target, args, resp)
}

// RequestVote sends a RequestVote request to target.
func (t *groupTransport) RequestVote(id raft.ServerID, target raft.ServerAddress, args *raft.RequestVoteRequest, resp *raft.RequestVoteResponse) error {
	return t.via(target).RequestVote(id, target, args, resp)
}

// RequestPreVote sends a RequestPreVote request to target.
func (t *groupTransport) RequestPreVote(id raft.ServerID, target raft.ServerAddress, args *raft.RequestPreVoteRequest, resp *raft.RequestPreVoteResponse) error {
	if t.r.sendsTo(target) {
		return t.mux.RequestPreVote(id, target, args, resp)
	}
	return t.net.RequestPreVote(id, target, args, resp)
}

// InstallSnapshot sends a snapshot to target.
func (t *groupTransport) InstallSnapshot(id raft.ServerID, target raft.ServerAddress, args *raft.InstallSnapshotRequest, resp *raft.InstallSnapshotResponse, data io.Reader) error {
	return t.via(target).InstallSnapshot(id, target, args, resp, data)
}

// TimeoutNow asks target to start an election.
func (t *groupTransport) TimeoutNow(id raft.ServerID, target raft.ServerAddress, args *raft.TimeoutNowRequest, resp *raft.TimeoutNowResponse) error {
	return t.via(target).TimeoutNow(id, target, args, resp)
}

// EncodePeer encodes addr as both transports do.
func (t *groupTransport) EncodePeer(id raft.ServerID, addr raft.ServerAddress) []byte {
	return t.net.EncodePeer(id, addr)
}

// DecodePeer decodes what EncodePeer encoded.
func (t *groupTransport) DecodePeer(b []byte) raft.ServerAddress { return t.net.DecodePeer(b) }

// SetHeartbeatHandler sets raft's heartbeat handler on both transports.
func (t *groupTransport) SetHeartbeatHandler(cb func(rpc raft.RPC)) {
	t.net.SetHeartbeatHandler(cb)
	t.mux.SetHeartbeatHandler(cb)
}

// Close closes both transports and stops forwarding.
func (t *groupTransport) Close() error {
	var err error
	t.once.Do(func() {
		close(t.stop)
		err = errors.Join(t.net.Close(), t.mux.Close())
		t.wg.Wait()
	})
	return err
}
