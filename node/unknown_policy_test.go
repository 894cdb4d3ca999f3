package node_test

import (
	"context"
	"fmt"
	"maps"
	"testing"
	"time"

	"connectrpc.com/connect"

	"github.com/quorate/quorate/node/nodetest"
	quoratev1 "github.com/quorate/quorate/proto/quorate/v1"
)

// logPos is where a group's log stands: its term and commit index.
type logPos struct{ term, index uint64 }

// logIndexes returns each group's highest term and commit index over the
// running nodes, by group ID.
func logIndexes(c *nodetest.Cluster) map[uint32]logPos {
	out := map[uint32]logPos{}
	for i := range c.Len() {
		if n := c.Node(i); n != nil {
			for _, g := range n.Status().GetGroups() {
				p := out[g.GetId()]
				out[g.GetId()] = logPos{max(p.term, g.GetTerm()), max(p.index, g.GetCommitIndex())}
			}
		}
	}
	return out
}

// stableIndexes waits until no group's log grows for a while and returns
// the indexes.
func stableIndexes(t *testing.T, c *nodetest.Cluster) map[uint32]logPos {
	t.Helper()
	var last map[uint32]logPos
	var since time.Time
	c.Eventually(t, 20*time.Second, "logs at rest", func() error {
		now := logIndexes(c)
		if !maps.Equal(now, last) {
			last, since = now, time.Now()
		}
		if time.Since(since) < time.Second {
			return fmt.Errorf("logs moved %v ago: %v", time.Since(since), now)
		}
		return nil
	})
	return last
}

// Requests naming a policy the cluster does not have are answered
// not_found without a log entry in any group, whichever node they reach
// (forwarded one by one or in AdmitBatch calls), with or without a request
// ID. (A leader's first such request in a term may write one barrier.)
func TestUnknownPolicyWritesNoEntries(t *testing.T) {
	c := newMultiGroupCluster(t)
	applyBucket(t, c, "p", 1000)
	applyConcurrency(t, c, "slots", 2, time.Hour)
	for i := range 32 {
		admitOnce(t, c, i%c.Len(), "p", fmt.Sprintf("warm-%d", i), "")
	}
	round := func(t *testing.T, tag string) {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		for i := range 48 {
			key := fmt.Sprintf("key-%d", i)
			req := &quoratev1.AdmitRequest{Policy: "nope", Key: key}
			if i%2 == 1 {
				req.Caller, req.RequestId = "c", fmt.Sprintf("%s-%d", tag, i)
			}
			if i%3 == 2 {
				req.Key = "{t}" + key
				req.Also = []*quoratev1.Check{{Policy: "p", Key: "{t}other"}}
			}
			_, err := c.Admission(i%c.Len()).Admit(ctx, connect.NewRequest(req))
			if connect.CodeOf(err) != connect.CodeNotFound {
				t.Fatalf("Admit(%v) = %v; want not_found", req, err)
			}
		}
		for i := range c.Len() {
			_, err := c.Admission(i).Peek(ctx, connect.NewRequest(&quoratev1.PeekRequest{Policy: "nope", Key: "k"}))
			if connect.CodeOf(err) != connect.CodeNotFound {
				t.Fatalf("Peek = %v; want not_found", err)
			}
			_, err = c.Lease(i).AcquireLease(ctx, connect.NewRequest(&quoratev1.AcquireLeaseRequest{Policy: "nope", Key: "k", Caller: "c", RequestId: tag}))
			if connect.CodeOf(err) != connect.CodeNotFound {
				t.Fatalf("AcquireLease = %v; want not_found", err)
			}
			_, err = c.Admission(i).Reserve(ctx, connect.NewRequest(&quoratev1.ReserveRequest{Policy: "nope", Key: "k", Estimate: 1}))
			if connect.CodeOf(err) != connect.CodeNotFound {
				t.Fatalf("Reserve = %v; want not_found", err)
			}
		}
	}
	// A leader change (the group loop balances leaders) writes entries of
	// its own, and a leader's first such request in its term may write a
	// barrier: measure a round after a warm-up round in the same terms.
	for try := 0; ; try++ {
		terms := logIndexes(c)
		round(t, fmt.Sprintf("warm-%d", try))
		before := stableIndexes(t, c)
		round(t, fmt.Sprintf("round-%d", try))
		after := logIndexes(c)
		termChanged := false
		for g, p := range after {
			termChanged = termChanged || p.term != terms[g].term
		}
		if !termChanged || try == 4 {
			if !maps.Equal(before, after) {
				t.Fatalf("requests for an unknown policy wrote entries: groups at {term index} %v before, %v after", before, after)
			}
			break
		}
	}

	// A known policy still works everywhere, and so does one just applied.
	admitOnce(t, c, 1, "p", "after", "")
	applyBucket(t, c, "fresh", 5)
	for i := range c.Len() {
		if r := admitOnce(t, c, i, "fresh", fmt.Sprintf("f-%d", i), ""); !r.GetAllowed() {
			t.Fatalf("admit under a fresh policy on node %d: %v", i, r)
		}
	}
}
