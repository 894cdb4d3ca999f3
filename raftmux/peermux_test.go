package raftmux

import (
	"context"
	"net"
	"testing"
	"time"

	"github.com/hashicorp/raft"
	"github.com/quorate/quorate/peermux"
)

// TestOverPeerMux runs groups over hubs whose connections are peermux
// channels, as a Quorate node wires them.
func TestOverPeerMux(t *testing.T) {
	const groups = 4
	tc := &testCluster{t: t, net: newTestNet(t)}
	for range 3 {
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		m := peermux.New(ln, peermux.NewDialer(ln.Addr(), nil), nil, nil, peermux.Options{})
		go m.Serve()
		t.Cleanup(func() { _ = m.Close() })
		l, err := m.Listener(peermux.ChannelRaft)
		if err != nil {
			t.Fatal(err)
		}
		sl, err := m.Listener(peermux.ChannelRaftSnapshot)
		if err != nil {
			t.Fatal(err)
		}
		dial := func(ch uint64) Dial {
			return func(ctx context.Context, a raft.ServerAddress) (net.Conn, error) {
				return m.Dial(ctx, string(a), ch)
			}
		}
		h, err := New(Options{
			Dial: dial(peermux.ChannelRaft), DialSnapshot: dial(peermux.ChannelRaftSnapshot),
			Listener: l, SnapshotListener: sl, Timeout: 2 * time.Second,
		})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = h.Close() })
		tc.hubs = append(tc.hubs, h)
		tc.addrs = append(tc.addrs, raft.ServerAddress(ln.Addr().String()))
	}
	tc.reps = make([][]*replica, groups)
	for g := range groups {
		tc.reps[g] = make([]*replica, 3)
		for i := range 3 {
			tc.start(uint32(g), i, nil, true)
		}
	}
	applyEverywhere(tc, allGroups(groups), 10, 10)
}
