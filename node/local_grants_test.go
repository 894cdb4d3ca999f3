package node_test

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"connectrpc.com/connect"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/durationpb"

	"github.com/quorate/quorate/node/nodetest"
	quoratev1 "github.com/quorate/quorate/proto/quorate/v1"
)

// nodeMetric is node i's value of the metric family name (the series with
// labels lv, alternating name and value), 0 when absent.
func nodeMetric(t *testing.T, c *nodetest.Cluster, i int, name string, lv ...string) float64 {
	t.Helper()
	v, _ := seriesOf(t, c, i, name, lv...)
	return v
}

// seriesOf is node i's value of the first series of the metric family
// name with labels lv (alternating name and value; a counter's or a
// gauge's), and whether the node exports it.
func seriesOf(t *testing.T, c *nodetest.Cluster, i int, name string, lv ...string) (float64, bool) {
	t.Helper()
next:
	for _, m := range scrape(t, c, i)[name].GetMetric() {
		l := labelsOf(m)
		for j := 0; j+1 < len(lv); j += 2 {
			if l[lv[j]] != lv[j+1] {
				continue next
			}
		}
		if m.GetCounter() != nil {
			return m.GetCounter().GetValue(), true
		}
		return m.GetGauge().GetValue(), true
	}
	return 0, false
}

// applyLocalPolicy applies a fixed window of limit units an hour whose
// keys nodes and clients may decide from grants of at most maxGrant.
func applyLocalPolicy(t *testing.T, ctx context.Context, c *nodetest.Cluster, name string, limit, maxGrant int64) {
	t.Helper()
	p := &quoratev1.Policy{Name: name, Algorithm: "fixed_window", Limit: limit, Period: durationpb.New(time.Hour),
		Local: &quoratev1.LocalDecisions{Mode: "grant", MaxGrant: proto.Int64(maxGrant), Ttl: durationpb.New(time.Minute)}}
	if _, err := c.Admin(0).ApplyPolicies(ctx, connect.NewRequest(&quoratev1.ApplyPoliciesRequest{Policies: []*quoratev1.Policy{p}})); err != nil {
		t.Fatal(err)
	}
	c.Eventually(t, 30*time.Second, "every node has the policy", func() error {
		for i := range c.Len() {
			if _, err := c.Admin(i).GetPolicy(ctx, connect.NewRequest(&quoratev1.GetPolicyRequest{Name: name})); err != nil {
				return err
			}
		}
		return nil
	})
}

// admitMany sends n Admits of (policy, key), without request IDs, to node
// i over the API from workers callers at once, and returns how many were
// allowed.
func admitMany(t *testing.T, ctx context.Context, c *nodetest.Cluster, i int, policy, key string, n, workers int) int64 {
	t.Helper()
	var next, allowed atomic.Int64
	var wg sync.WaitGroup
	errs := make(chan error, workers)
	for range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for next.Add(1) <= int64(n) {
				r, err := c.Admission(i).Admit(ctx, connect.NewRequest(&quoratev1.AdmitRequest{Policy: policy, Key: key}))
				if err != nil {
					errs <- err
					return
				}
				if r.Msg.GetAllowed() {
					allowed.Add(1)
				}
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
	return allowed.Load()
}

// A node answering plain API callers (no Go client, no grants of their
// own) takes a grant for a hot key of a policy with local decisions and
// decides most of its admits from it, in memory; a cold key stays strict.
func TestNodeHoldsGrantsForHotKeys(t *testing.T) {
	c := nodetest.NewCluster(t, 3)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	applyLocalPolicy(t, ctx, c, "hot", 1_000_000, 500)

	const n = 3000
	if got := admitMany(t, ctx, c, 0, "hot", "k", n, 8); got != n {
		t.Fatalf("%d of %d admits allowed", got, n)
	}
	local := nodeMetric(t, c, 0, "quorate_node_local_decisions_total")
	if local < 0.9*n {
		t.Fatalf("node 0 decided %v of %d admits of a hot key from its grants; want at least 90%%", local, n)
	}
	if held := nodeMetric(t, c, 0, "quorate_node_grants_held"); held != 1 {
		t.Fatalf("node 0 holds %v grants, want 1", held)
	}
	// The cluster's status, asked of another node, shows it per node.
	st, err := c.Admin(1).ClusterStatus(ctx, connect.NewRequest(&quoratev1.ClusterStatusRequest{}))
	if err != nil {
		t.Fatal(err)
	}
	for _, m := range st.Msg.GetMembers() {
		g := m.GetStatus().GetNodeGrants()
		if m.GetId() == c.Node(0).ID() && (float64(g.GetLocalDecisions()) < 0.9*n || g.GetHeld() != 1 || g.GetUnitsGranted() == 0) {
			t.Fatalf("node 0's status: %v", g)
		}
		if m.GetId() != c.Node(0).ID() && g.GetLocalDecisions() != 0 {
			t.Fatalf("%s's status: %v", m.GetId(), g)
		}
	}
	// The other nodes answered nothing: they hold nothing.
	if held := nodeMetric(t, c, 1, "quorate_node_grants_held"); held != 0 {
		t.Fatalf("node 1 holds %v grants, want 0", held)
	}
	// A key asked once a second or so is not hot: no grant for it.
	for k := range 3 {
		admitMany(t, ctx, c, 0, "hot", fmt.Sprint("cold-", k), 1, 1)
	}
	if held := nodeMetric(t, c, 0, "quorate_node_grants_held"); held != 1 {
		t.Fatalf("node 0 holds %v grants after cold keys, want 1", held)
	}
}

// Grants held by nodes are spent in the key's log: admits at every node,
// each deciding from its own grant, never allow more than the limit; a
// node that stops gives back what its grant holds unspent, so the key then
// has exactly the limit less what was allowed.
func TestNodeGrantsExact(t *testing.T) {
	c := nodetest.NewCluster(t, 3)
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	const limit = 2000
	applyLocalPolicy(t, ctx, c, "exact", limit, 300)

	var allowed atomic.Int64
	var wg sync.WaitGroup
	for i := range c.Len() {
		wg.Add(1)
		go func() {
			defer wg.Done()
			allowed.Add(admitMany(t, ctx, c, i, "exact", "k", 1200, 4))
		}()
	}
	wg.Wait()
	got := allowed.Load()
	if got > limit {
		t.Fatalf("%d admits allowed of a key limited to %d", got, limit)
	}
	var local float64
	for i := range c.Len() {
		local += nodeMetric(t, c, i, "quorate_node_local_decisions_total")
	}
	if local == 0 {
		t.Fatal("no node decided from a grant")
	}
	// A node decides locally no more units than it was granted.
	for i := range c.Len() {
		decided, granted := nodeMetric(t, c, i, "quorate_node_local_decisions_total"), nodeMetric(t, c, i, "quorate_node_grant_units_total", "fate", "granted")
		if decided > granted {
			t.Errorf("node %d decided %v admits of one unit from grants of %v units", i, decided, granted)
		}
	}
	// A node that stops gives back what its grant holds unspent: admits
	// through node 0 alone on another key, then node 0 stops; the key then
	// has exactly the limit less what was allowed.
	sent := admitMany(t, ctx, c, 0, "exact", "k2", 1000, 4)
	if nodeMetric(t, c, 0, "quorate_node_grants_held") == 0 {
		t.Fatal("node 0 holds no grant for k2")
	}
	c.Stop(0)
	peek, err := c.Admission(1).Peek(ctx, connect.NewRequest(&quoratev1.PeekRequest{Policy: "exact", Key: "k2"}))
	if err != nil {
		t.Fatal(err)
	}
	if left := peek.Msg.GetRemaining(); left != limit-sent {
		t.Fatalf("k2 has %d units left after %d of %d allowed and node 0 stopped, want %d: its grant's unspent units were not given back",
			left, sent, limit, limit-sent)
	}
}

// What a request ID means for a request a node decides from its grant: a
// repeat at that node gets the first answer (a duplicate, spending
// nothing); a repeat asking something else is refused as the cluster
// refuses it; a request marked strict is decided through the log, so a
// repeat at any node gets its first answer. AdmitBatch items are decided
// from the grant too.
func TestNodeGrantRequestIDs(t *testing.T) {
	c := nodetest.NewCluster(t, 3)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	applyLocalPolicy(t, ctx, c, "ids", 1_000_000, 500)
	admitMany(t, ctx, c, 0, "ids", "k", 200, 4) // hot, and a grant held
	if nodeMetric(t, c, 0, "quorate_node_grants_held") != 1 {
		t.Fatal("node 0 holds no grant for the hot key")
	}

	admit := func(i int, m *quoratev1.AdmitRequest) (*quoratev1.AdmitResponse, error) {
		r, err := c.Admission(i).Admit(ctx, connect.NewRequest(m))
		if err != nil {
			return nil, err
		}
		return r.Msg, nil
	}
	before := nodeMetric(t, c, 0, "quorate_node_local_decisions_total")
	first, err := admit(0, &quoratev1.AdmitRequest{Policy: "ids", Key: "k", RequestId: "r1", Caller: "gw"})
	if err != nil || !first.GetAllowed() || first.GetDuplicate() {
		t.Fatalf("first: %v, %v", first, err)
	}
	if got := nodeMetric(t, c, 0, "quorate_node_local_decisions_total"); got != before+1 {
		t.Fatalf("local decisions %v → %v: the request was not decided from the grant", before, got)
	}
	again, err := admit(0, &quoratev1.AdmitRequest{Policy: "ids", Key: "k", RequestId: "r1", Caller: "gw"})
	if err != nil || !again.GetDuplicate() || again.GetRemaining() != first.GetRemaining() || !again.GetDecidedAt().AsTime().Equal(first.GetDecidedAt().AsTime()) {
		t.Fatalf("repeat at the same node: %v, %v; want the first answer %v as a duplicate", again, err, first)
	}
	if got := nodeMetric(t, c, 0, "quorate_node_local_decisions_total"); got != before+1 {
		t.Fatalf("local decisions %v after the repeat, want %v: the repeat spent again", got, before+1)
	}
	if d := nodeMetric(t, c, 0, "quorate_node_local_duplicates_total"); d != 1 {
		t.Fatalf("duplicates %v, want 1", d)
	}
	two := int64(2)
	_, err = admit(0, &quoratev1.AdmitRequest{Policy: "ids", Key: "k", RequestId: "r1", Caller: "gw", Cost: &two})
	if connect.CodeOf(err) != connect.CodeInvalidArgument || !strings.Contains(err.Error(), "request_id") {
		t.Fatalf("repeat with another cost: %v; want invalid_argument on request_id", err)
	}

	// A refund of it is refused by name: the key's log has no record.
	_, err = c.Admission(0).Refund(ctx, connect.NewRequest(&quoratev1.RefundRequest{RequestId: "r1", Caller: "gw", Key: "k"}))
	if connect.CodeOf(err) != connect.CodeFailedPrecondition || !strings.Contains(err.Error(), "budget lease") {
		t.Fatalf("refund of a request decided from the node's grant: %v; want failed_precondition naming the budget lease", err)
	}

	// Strict: decided through the log, whose record answers a repeat at
	// another node.
	s1, err := admit(0, &quoratev1.AdmitRequest{Policy: "ids", Key: "k", RequestId: "s1", Caller: "gw", Strict: true})
	if err != nil || !s1.GetAllowed() {
		t.Fatalf("strict: %v, %v", s1, err)
	}
	if got := nodeMetric(t, c, 0, "quorate_node_local_decisions_total"); got != before+1 {
		t.Fatalf("a strict request was decided from the grant (local decisions %v)", got)
	}
	s2, err := admit(1, &quoratev1.AdmitRequest{Policy: "ids", Key: "k", RequestId: "s1", Caller: "gw", Strict: true})
	if err != nil || !s2.GetDuplicate() || s2.GetRemaining() != s1.GetRemaining() {
		t.Fatalf("strict repeat at another node: %v, %v; want the first answer %v", s2, err, s1)
	}

	// AdmitBatch: items on the hot key from the grant.
	var reqs []*quoratev1.AdmitRequest
	for range 50 {
		reqs = append(reqs, &quoratev1.AdmitRequest{Policy: "ids", Key: "k"})
	}
	b, err := c.Admission(0).AdmitBatch(ctx, connect.NewRequest(&quoratev1.AdmitBatchRequest{Requests: reqs}))
	if err != nil {
		t.Fatal(err)
	}
	for i, r := range b.Msg.GetResults() {
		if !r.GetResponse().GetAllowed() {
			t.Fatalf("batch item %d: %v", i, r)
		}
	}
	if got := nodeMetric(t, c, 0, "quorate_node_local_decisions_total"); got < before+1+40 {
		t.Fatalf("local decisions %v after a batch of 50 on the hot key, want at least %v", got, before+1+40)
	}
}
