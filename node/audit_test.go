package node_test

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"connectrpc.com/connect"

	"github.com/quorate/quorate/node"
	"github.com/quorate/quorate/node/nodetest"
	quoratev1 "github.com/quorate/quorate/proto/quorate/v1"
	"github.com/quorate/quorate/shard"
)

// The meta group records the operators' changes — a policy applied, a node
// drained and uncordoned, a slot move started and cancelled — and the
// plan's end, in log order with their log times; the control plane's own
// steps (copy attempts, rollback phases, groups formed) are not recorded.
// Four nodes, so that a drained node's replicas have somewhere to go.
func TestAuditListsAdminChanges(t *testing.T) {
	start := time.Now()
	c := nodetest.NewClusterWith(t, nodetest.Options{Nodes: 4, Configure: func(i int, cfg *node.Config) {
		cfg.DataGroups, cfg.ExpectNodes = 2, 3
		cfg.MigrationChunkBytes = 1024
		cfg.MigrationProgressInterval = time.Millisecond
	}})
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	sm := waitGroups(t, c, 2)
	applyLongBucket(t, c, "p", 1_000_000)
	end := shard.Slot(sm.GetGroups()[0].GetSlots())
	moving := shard.SlotRange{Start: end - 128, End: end}
	fillKeys(ctx, t, c, "p", keysOf(moving, 400))

	drained := c.Node(3).ID()
	c.Eventually(t, 20*time.Second, "drained", func() error {
		_, err := c.Admin(0).DrainNode(ctx, connect.NewRequest(&quoratev1.DrainNodeRequest{Id: drained}))
		return err
	})
	if _, err := c.Admin(1).UncordonNode(ctx, connect.NewRequest(&quoratev1.UncordonNodeRequest{Id: drained})); err != nil {
		t.Fatalf("uncordon: %v", err)
	}
	p := startCopyingMove(ctx, t, c, moving)
	if _, err := c.Admin(2).CancelPlan(ctx, connect.NewRequest(&quoratev1.CancelPlanRequest{Id: p.GetId()})); err != nil {
		t.Fatalf("CancelPlan: %v", err)
	}
	waitPlan(t, c, 0, p.GetId(), "cancelled", 60*time.Second)

	// Any node answers, after a read barrier: the plan's end is listed.
	resp, err := c.Admin(3).ListAudit(ctx, connect.NewRequest(&quoratev1.ListAuditRequest{Limit: 1000}))
	if err != nil {
		t.Fatalf("ListAudit: %v", err)
	}
	type rec struct{ caller, source, action, summary string }
	want := []rec{
		{"", "none", "policy apply", "p"},
		{"", "none", "shard map", "node drain " + drained + ": epoch "},
		{"", "none", "shard map", "node uncordon " + drained + ": epoch "},
		{"", "none", "plan start", fmt.Sprintf("plan %d (slots move): move 128 slots from group 1 to group 2", p.GetId())},
		{"", "none", "plan cancel", fmt.Sprintf("plan %d (slots move), cancelling", p.GetId())},
		{"node:", "node", "plan finish", fmt.Sprintf("plan %d (slots move) cancelled", p.GetId())},
	}
	var got []rec
	var prev *quoratev1.AuditEntry
	anonymousJoins := 0
	for _, e := range resp.Msg.GetEntries() {
		if prev != nil && (e.GetIndex() <= prev.GetIndex() || e.GetTime().AsTime().Before(prev.GetTime().AsTime())) {
			t.Errorf("record %v after %v", e, prev)
		}
		if at := e.GetTime().AsTime(); at.Before(start.Add(-time.Minute)) || at.After(time.Now().Add(time.Minute)) {
			t.Errorf("record %v: its log time is not this test's", e)
		}
		prev = e
		switch e.GetAction() {
		case "node add":
			// The nodes' registrations: a first join is an anonymous call
			// to --join's API port (the cluster is open), recorded as such
			// with the address it came from; a later one, over the peer
			// port, is the node's own.
			_, rest, _ := strings.Cut(e.GetSummary(), ": ")
			id, _, _ := strings.Cut(rest, " ")
			switch {
			case e.GetCaller() == "" && e.GetSource() == "none" && strings.HasPrefix(e.GetSummary(), "join from 127.0.0.1:"):
				anonymousJoins++
			case e.GetCaller() == "node:"+id && e.GetSource() == "node" && strings.HasPrefix(e.GetSummary(), "join: "):
			default:
				t.Errorf("registration %v: not by its real caller", e)
			}
			continue
		case "policy apply":
			if len(got) > 0 && got[len(got)-1].action == "policy apply" {
				continue // applyLongBucket retried an apply whose answer was lost
			}
		}
		caller := e.GetCaller()
		if strings.HasPrefix(caller, "node:") {
			caller = "node:"
		}
		got = append(got, rec{caller, e.GetSource(), e.GetAction(), e.GetSummary()})
	}
	if len(got) != len(want) {
		t.Fatalf("records %v, want %v", got, want)
	}
	// node1 bootstrapped; the registry's first registration, whichever
	// node's, is not recorded (no node was registered at the audit's
	// level before it).
	if anonymousJoins < c.Len()-2 {
		t.Errorf("%d first joins recorded as anonymous calls, want at least %d: %v", anonymousJoins, c.Len()-2, resp.Msg.GetEntries())
	}
	for i, w := range want {
		g := got[i]
		if g.caller != w.caller || g.source != w.source || g.action != w.action || !strings.HasPrefix(g.summary, w.summary) {
			t.Errorf("record %d: %+v, want %+v", i, g, w)
		}
	}

	// Pages follow the index.
	first, err := c.Admin(0).ListAudit(ctx, connect.NewRequest(&quoratev1.ListAuditRequest{Limit: 2}))
	if err != nil || len(first.Msg.GetEntries()) != 2 || !first.Msg.GetMore() {
		t.Fatalf("first page: %v, %v", first, err)
	}
	next, err := c.Admin(0).ListAudit(ctx, connect.NewRequest(&quoratev1.ListAuditRequest{Since: first.Msg.GetEntries()[1].GetIndex(), Limit: 1}))
	if err != nil || len(next.Msg.GetEntries()) != 1 || next.Msg.GetEntries()[0].GetIndex() != resp.Msg.GetEntries()[2].GetIndex() {
		t.Fatalf("second page: %v, %v", next, err)
	}
	_, err = c.Admin(0).ListAudit(ctx, connect.NewRequest(&quoratev1.ListAuditRequest{Limit: 1001}))
	if connect.CodeOf(err) != connect.CodeInvalidArgument {
		t.Fatalf("a page of 1001: %v, want invalid_argument", err)
	}
}
