package node_test

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"connectrpc.com/connect"
	"google.golang.org/protobuf/proto"

	"github.com/quorate/quorate/fsm"
	"github.com/quorate/quorate/node"
	"github.com/quorate/quorate/node/nodetest"
	raftcmdv1 "github.com/quorate/quorate/proto/quorate/raftcmd/v1"
	quoratev1 "github.com/quorate/quorate/proto/quorate/v1"
	"github.com/quorate/quorate/proto/quorate/v1/quoratev1connect"
	"github.com/quorate/quorate/shard"
)

// foreignPeer is a PeerService client as any process that reaches a node's
// peer port can make one, with none of the node's code (foreignTransport).
func foreignPeer(t *testing.T, peerAddr, cluster string) quoratev1connect.PeerServiceClient {
	return quoratev1connect.NewPeerServiceClient(&http.Client{Transport: foreignTransport(t, peerAddr, cluster)}, "http://"+peerAddr)
}

// foreignTransport makes connections to the peer port at peerAddr: a TCP
// connection, the mux header naming the forwarding channel with the
// cluster's ID (which admin status shows to anyone), then cleartext HTTP/2.
func foreignTransport(t *testing.T, peerAddr, cluster string) *http.Transport {
	var protocols http.Protocols
	protocols.SetUnencryptedHTTP2(true)
	tr := &http.Transport{Protocols: &protocols, DialContext: func(ctx context.Context, _, _ string) (net.Conn, error) {
		var d net.Dialer
		c, err := d.DialContext(ctx, "tcp", peerAddr)
		if err != nil {
			return nil, err
		}
		if _, err := c.Write(node.ForwardingHeader(cluster)); err != nil {
			c.Close()
			return nil, err
		}
		return c, nil
	}}
	t.Cleanup(tr.CloseIdleConnections)
	return tr
}

// foreignPeers returns a foreign client of every member's peer port, as
// the cluster's status lists them.
func foreignPeers(t *testing.T, c *nodetest.Cluster) []quoratev1connect.PeerServiceClient {
	t.Helper()
	var out []quoratev1connect.PeerServiceClient
	c.Eventually(t, 10*time.Second, "every member's raft address", func() error {
		ctx, cancel := context.WithTimeout(context.Background(), 3*time.Second)
		defer cancel()
		resp, err := c.Admin(0).ClusterStatus(ctx, connect.NewRequest(&quoratev1.ClusterStatusRequest{}))
		if err != nil {
			return err
		}
		out = out[:0]
		for _, m := range resp.Msg.GetMembers() {
			if m.GetRaftAddr() == "" {
				return fmt.Errorf("member %s has no raft address", m.GetId())
			}
			out = append(out, foreignPeer(t, m.GetRaftAddr(), resp.Msg.GetClusterId()))
		}
		if len(out) != c.Len() {
			return fmt.Errorf("%d members", len(out))
		}
		return nil
	})
	return out
}

// notLeader reports whether err is a node's "I do not lead that group".
func notLeader(err error) bool {
	var ce *connect.Error
	if !errors.As(err, &ce) || ce.Code() != connect.CodeUnavailable {
		return false
	}
	for _, d := range ce.Details() {
		if v, derr := d.Value(); derr == nil {
			if _, ok := v.(*quoratev1.NotLeader); ok {
				return true
			}
		}
	}
	return false
}

// applyForeign sends env for group through every peer in turn until the
// group's leader answers, and returns its answer.
func applyForeign(t *testing.T, peers []quoratev1connect.PeerServiceClient, group uint32, env *raftcmdv1.Envelope) error {
	t.Helper()
	body, err := proto.Marshal(env)
	if err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(20 * time.Second)
	for i := 0; ; i++ {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		_, err := peers[i%len(peers)].ApplyToGroup(ctx, connect.NewRequest(&quoratev1.ApplyToGroupRequest{Group: group, Envelope: body}))
		cancel()
		if !notLeader(err) || time.Now().After(deadline) {
			return err
		}
	}
}

// fieldViolation is the field a Connect error's FieldViolation names.
func fieldViolation(err error) string {
	var ce *connect.Error
	if errors.As(err, &ce) {
		for _, d := range ce.Details() {
			if v, derr := d.Value(); derr == nil {
				if fv, ok := v.(*quoratev1.FieldViolation); ok {
					return fv.GetField()
				}
			}
		}
	}
	return ""
}

// A process that reaches the peer port sends slot-migration commands that
// do not fit the cluster's state, while a real slot move from group 1 to
// group 2 is copying: each is refused with a clear code, and nothing
// changes — group 2's time is not moved past the clock, an exhausted
// 10/hour bucket stays exhausted, no slot is frozen or unfrozen, the move's
// import is not dropped. The move then completes, with every unit spent
// before it still spent.
func TestHostilePeerMigrationCommandsRefused(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	c, moving, keys := migrationCluster(t, ctx, 40)
	peers := foreignPeers(t, c)
	sm := waitGroups(t, c, 2)
	g2Slots := shard.SlotRange{Start: moving.End, End: shard.SlotCount}
	hourlyKey := keysOf(g2Slots, 1)[0]
	applyPolicy(t, c, "hourly", 10, time.Hour, 10)
	if r, err := admit(ctx, c, 0, "hourly", hourlyKey, 10); err != nil || !r.GetAllowed() {
		t.Fatalf("spending the hourly bucket: %v %v", r, err)
	}
	wantRemaining(t, c, 1, "hourly", hourlyKey, 0)

	// The move's first import chunk, once applied, waits for the cases to
	// run: the step stays copying at one attempt, its chunk 1 next.
	reached, release := make(chan struct{}, 1), make(chan struct{})
	var once sync.Once
	unblock := func() { once.Do(func() { close(release) }) }
	defer unblock()
	for i := range c.Len() {
		c.Observer(i).SetApplied(func(env *raftcmdv1.Envelope) {
			if imp := env.GetImportSlots(); imp != nil && imp.GetSeq() == 0 {
				select {
				case reached <- struct{}{}:
				default:
				}
				<-release
			}
		})
	}
	p := startPlan(t, c, func(ctx context.Context) (*connect.Response[quoratev1.PlanResponse], error) {
		return c.Admin(0).MoveSlots(ctx, connect.NewRequest(&quoratev1.MoveSlotsRequest{From: 1, To: 2, Start: uint32(moving.Start), End: uint32(moving.End)}))
	})
	select {
	case <-reached:
	case <-ctx.Done():
		t.Fatal("the move's first chunk was never applied")
	}
	st, err := planNow(ctx, c, 0, p.GetId())
	if err != nil {
		t.Fatal(err)
	}
	attempt := st.GetSteps()[0].GetAttempt()
	mig := fsm.MigrationID(p.GetId(), 0)
	if ph := st.GetSteps()[0].GetPhase(); ph != "copying" || attempt == 0 {
		t.Fatalf("step %s at attempt %d, want copying", ph, attempt)
	}
	frozenInStatus(t, c, 1, fmt.Sprintf("[%d,%d) plan %d step 0 running", moving.Start, moving.End, p.GetId()))

	tenYears := time.Now().Add(10 * 365 * 24 * time.Hour).UnixNano()
	unplanned := fsm.MigrationID(p.GetId()+1000, 0)
	rogue := fsm.MigrationID(p.GetId()+1001, 0)
	env := func(body any) *raftcmdv1.Envelope {
		e := &raftcmdv1.Envelope{}
		switch b := body.(type) {
		case *raftcmdv1.ImportSlots:
			e.Body = &raftcmdv1.Envelope_ImportSlots{ImportSlots: b}
		case *raftcmdv1.FreezeSlots:
			e.Body = &raftcmdv1.Envelope_FreezeSlots{FreezeSlots: b}
		case *raftcmdv1.UnfreezeSlots:
			e.Body = &raftcmdv1.Envelope_UnfreezeSlots{UnfreezeSlots: b}
		case *raftcmdv1.DropImport:
			e.Body = &raftcmdv1.Envelope_DropImport{DropImport: b}
		}
		return e
	}
	cases := []struct {
		name   string
		group  uint32
		env    *raftcmdv1.Envelope           // ApplyToGroup, or
		export *quoratev1.ExportSlotsRequest // ExportSlots
		code   connect.Code
		field  string
	}{
		{name: "import for a migration no plan knows, 10 years ahead", group: 2, code: connect.CodeFailedPrecondition,
			env: env(&raftcmdv1.ImportSlots{Migration: unplanned, Attempt: 1, Start: uint32(moving.Start), End: uint32(moving.End),
				Last: true, SourceNowUnixNano: tenYears, MapEpoch: sm.GetEpoch(), State: &raftcmdv1.SlotState{}})},
		{name: "next chunk of the planned move, 10 years ahead", group: 2, code: connect.CodeInvalidArgument, field: "source_now_unix_nano",
			env: env(&raftcmdv1.ImportSlots{Migration: mig, Attempt: attempt, Start: uint32(moving.Start), End: uint32(moving.End), Seq: 1,
				SourceNowUnixNano: tenYears, MapEpoch: sm.GetEpoch(), State: &raftcmdv1.SlotState{}})},
		{name: "freeze of a whole group", group: 2, code: connect.CodeFailedPrecondition,
			env: env(&raftcmdv1.FreezeSlots{Migration: rogue, Start: uint32(g2Slots.Start), End: uint32(g2Slots.End)})},
		{name: "export of that freeze", code: connect.CodeFailedPrecondition,
			export: &quoratev1.ExportSlotsRequest{Group: 2, Migration: rogue, Start: uint32(g2Slots.Start), End: uint32(g2Slots.End)}},
		{name: "export of the move's slots under a migration no plan knows", code: connect.CodeFailedPrecondition,
			export: &quoratev1.ExportSlotsRequest{Group: 1, Migration: unplanned, Start: uint32(moving.Start), End: uint32(moving.End)}},
		{name: "unfreeze of the running move", group: 1, code: connect.CodeFailedPrecondition,
			env: env(&raftcmdv1.UnfreezeSlots{Migration: mig})},
		{name: "drop of the running move's import", group: 2, code: connect.CodeFailedPrecondition,
			env: env(&raftcmdv1.DropImport{Migration: mig, Start: uint32(moving.Start), End: uint32(moving.End)})},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			var err error
			if tc.env != nil {
				err = applyForeign(t, peers, tc.group, tc.env)
			} else {
				ctx, cancel := context.WithTimeout(ctx, 5*time.Second)
				_, err = peers[0].ExportSlots(ctx, connect.NewRequest(tc.export))
				cancel()
			}
			if connect.CodeOf(err) != tc.code || fieldViolation(err) != tc.field {
				t.Errorf("answer %v (field %q), want %v (field %q)", err, fieldViolation(err), tc.code, tc.field)
			} else {
				t.Logf("refused: %v", err)
			}
			unchanged(t, c, moving, mig, attempt, unplanned, rogue)
		})
	}
	wantRemaining(t, c, 2, "hourly", hourlyKey, 0)

	unblock()
	waitPlan(t, c, 0, p.GetId(), "done", 90*time.Second)
	for _, k := range keys[:10] {
		wantRemaining(t, c, 1, "p", k, 1_000_000-1)
	}
	wantRemaining(t, c, 0, "hourly", hourlyKey, 0)
	frozenInStatus(t, c, 1, "")
}

// unchanged fails the test unless, on every replica, group 2's time is not
// ahead of the clock, group 1 has at most the move's slots frozen (the
// leader has them) and group 2 none, group 2 records the move's import at attempt attempt with its first
// chunk applied, and no import of the foreign migrations.
func unchanged(t *testing.T, c *nodetest.Cluster, moving shard.SlotRange, mig, attempt uint64, foreign ...uint64) {
	t.Helper()
	now := time.Now().UnixNano()
	frozenHere := 0
	for i := range c.Len() {
		n := c.Node(i)
		if at, ok := node.GroupLastNow(n, 2); ok && at > now {
			t.Errorf("node %d: group 2's time is %v ahead of the clock", i, time.Duration(at-now))
		}
		// A follower of an idle group may not know yet that the freeze
		// committed: nothing frozen, or the move's slots only.
		switch f := node.GroupFrozen(n, 1); {
		case len(f) == 1 && f[mig] == moving:
			frozenHere++
		case len(f) != 0:
			t.Errorf("node %d: group 1 frozen %v, want only migration %d's %v", i, f, mig, moving)
		}
		if f := node.GroupFrozen(n, 2); len(f) != 0 {
			t.Errorf("node %d: group 2 frozen %v", i, f)
		}
		if st, ok := node.GroupImport(n, 2, mig); ok && (st.Attempt != attempt || st.NextSeq != 1 || st.Dropped || st.Range != moving) {
			t.Errorf("node %d: group 2's import of the move is %+v, want attempt %d, next chunk 1, not dropped", i, st, attempt)
		}
		for _, m := range foreign {
			if st, ok := node.GroupImport(n, 2, m); ok {
				t.Errorf("node %d: group 2 records an import of migration %d: %+v", i, m, st)
			}
		}
	}
	if frozenHere == 0 {
		t.Errorf("no replica of group 1 has the move's slots frozen")
	}
}

// frozenInStatus waits until admin status, as node 0 answers it, lists
// group's frozen slots as want ("[start,end) plan P step S state", or ""
// for none).
func frozenInStatus(t *testing.T, c *nodetest.Cluster, group uint32, want string) {
	t.Helper()
	c.Eventually(t, 20*time.Second, fmt.Sprintf("status lists group %d frozen: %q", group, want), func() error {
		ctx, cancel := context.WithTimeout(context.Background(), 3*time.Second)
		defer cancel()
		resp, err := c.Admin(0).ClusterStatus(ctx, connect.NewRequest(&quoratev1.ClusterStatusRequest{}))
		if err != nil {
			return err
		}
		for _, m := range resp.Msg.GetMembers() {
			for _, g := range m.GetStatus().GetGroups() {
				if g.GetId() != group || g.GetRole() != "leader" {
					continue
				}
				var got []string
				for _, f := range g.GetFrozen() {
					got = append(got, fmt.Sprintf("[%d,%d) plan %d step %d %s", f.GetStart(), f.GetEnd(), f.GetPlan(), f.GetStep(), f.GetPlanState()))
				}
				if s := strings.Join(got, "; "); s != want {
					return fmt.Errorf("leader %s lists %q", m.GetId(), s)
				}
				return nil
			}
		}
		return fmt.Errorf("no leader of group %d in the status", group)
	})
}

// A slot move from a group whose time runs ahead of the target's leader's
// clock by more than fsm.MaxClockSkew fails, naming the clock skew, and
// rolls back: the slots stay with the source, state intact, and the
// target's time stays with its clock.
func TestSlotMoveFailsOnClockSkew(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	c, moving, keys := migrationCluster(t, ctx, 20)
	// Group 2 must have copied the policy before the clocks jump: the copy
	// is an entry the group stamps, and it would take the jump with it.
	c.Eventually(t, 30*time.Second, "group 2's copy of policy p", func() error {
		for i := range c.Len() {
			if !node.GroupHasPolicy(c.Node(i), 2, "p") {
				return fmt.Errorf("node %d's replica of group 2 has no copy yet", i)
			}
		}
		return nil
	})
	// Group 1 decides 10 minutes ahead, once: its time stays there.
	for i := range c.Len() {
		c.Node(i).SetClockOffset(10 * time.Minute)
	}
	if _, err := admit(ctx, c, 0, "p", keys[0], 0); err != nil {
		t.Fatal(err)
	}
	for i := range c.Len() {
		c.Node(i).SetClockOffset(0)
	}
	now := time.Now().UnixNano()
	for i := range c.Len() {
		if at, ok := node.GroupLastNow(c.Node(i), 2); ok && at > now {
			t.Fatalf("node %d: group 2's time is ahead of the clock before the move", i)
		}
	}
	p := startPlan(t, c, func(ctx context.Context) (*connect.Response[quoratev1.PlanResponse], error) {
		return c.Admin(1).MoveSlots(ctx, connect.NewRequest(&quoratev1.MoveSlotsRequest{From: 1, To: 2, Start: uint32(moving.Start), End: uint32(moving.End)}))
	})
	done := waitPlan(t, c, 0, p.GetId(), "failed", 60*time.Second)
	if !strings.Contains(done.GetError(), "clock skew") {
		t.Fatalf("plan error %q does not name the clock skew", done.GetError())
	}
	if ph := done.GetSteps()[0].GetPhase(); ph != "rolled back" {
		t.Fatalf("step phase %q", ph)
	}
	t.Logf("plan failed: %s", done.GetError())
	now = time.Now().UnixNano()
	for i := range c.Len() {
		if g, _ := node.GroupOf(c.Node(i), keys[1]); g != 1 {
			t.Fatalf("node %d routes the slots to group %d", i, g)
		}
		if at, ok := node.GroupLastNow(c.Node(i), 2); ok && at > now {
			t.Fatalf("node %d: group 2's time is %v ahead of the clock", i, time.Duration(at-now))
		}
	}
	// Group 1's ten minutes ahead refilled its buckets (about 2 units a
	// minute) before keys[0] spent one more; its time has not moved since.
	wantRemaining(t, c, 2, "p", keys[0], 1_000_000-1)
	if _, err := admit(ctx, c, 1, "p", keys[1], 0); err != nil {
		t.Fatalf("admit on a rolled-back slot: %v", err)
	}
	wantRemaining(t, c, 0, "p", keys[1], 1_000_000-1)
	c.Eventually(t, 10*time.Second, "the target drops the import", func() error {
		for i := range c.Len() {
			if b, _, d, ok := node.GroupStateCounts(c.Node(i), 2); ok && (b > 0 || d > 0) {
				return fmt.Errorf("node %d: group 2 holds %d buckets, %d request IDs of the rolled-back import", i, b, d)
			}
		}
		return nil
	})
}
