package node_test

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"connectrpc.com/connect"
	"google.golang.org/protobuf/types/known/durationpb"

	"github.com/quorate/quorate/node/nodetest"
	raftcmdv1 "github.com/quorate/quorate/proto/quorate/raftcmd/v1"
	quoratev1 "github.com/quorate/quorate/proto/quorate/v1"
)

// admitID asks node i for one unit of key under policy with a request ID.
func admitID(ctx context.Context, c *nodetest.Cluster, i int, policy, key, caller, id string) (*quoratev1.AdmitResponse, error) {
	resp, err := c.Admission(i).Admit(ctx, connect.NewRequest(&quoratev1.AdmitRequest{
		Policy: policy, Key: key, Caller: caller, RequestId: id,
	}))
	if err != nil {
		return nil, err
	}
	return resp.Msg, nil
}

// remainingAfterOneMore spends one more unit (no request ID) and returns the
// remaining count before it, i.e. what the bucket held.
func remainingAfterOneMore(tb testing.TB, ctx context.Context, c *nodetest.Cluster, i int, policy, key string) int64 {
	tb.Helper()
	resp, err := admit(ctx, c, i, policy, key, 0)
	if err != nil {
		tb.Fatal(err)
	}
	if !resp.GetAllowed() {
		tb.Fatalf("probe admit denied: %v", resp)
	}
	return resp.GetRemaining() + 1
}

func sameDecision(a, b *quoratev1.AdmitResponse) bool {
	return a.GetAllowed() == b.GetAllowed() && a.GetRemaining() == b.GetRemaining() && a.GetLimit() == b.GetLimit() &&
		a.GetPolicyVersion() == b.GetPolicyVersion() && a.GetDecidedAt().AsTime().Equal(b.GetDecidedAt().AsTime()) &&
		a.GetRetryAfter().AsDuration() == b.GetRetryAfter().AsDuration()
}

// A retry of an admitted request, on any node, returns the same decision with
// duplicate=true; a retry of a denied one returns denied; neither spends.
func TestRetriesAreAnsweredOnceOnEveryNode(t *testing.T) {
	c := nodetest.NewCluster(t, 3)
	applyPolicy(t, c, "once", 2, 366*24*time.Hour, 2)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()

	first, err := admitID(ctx, c, 0, "once", "k", "svc", "req-1")
	if err != nil {
		t.Fatal(err)
	}
	if !first.GetAllowed() || first.GetDuplicate() || first.GetRemaining() != 1 {
		t.Fatalf("first: %v", first)
	}
	for i := range c.Len() {
		again, err := admitID(ctx, c, i, "once", "k", "svc", "req-1")
		if err != nil {
			t.Fatal(err)
		}
		if !again.GetDuplicate() || !sameDecision(first, again) {
			t.Fatalf("retry on node%d: %v, want %v with duplicate", i+1, again, first)
		}
	}
	// Spend the last unit, then a denied request and its retries.
	if _, err := admitID(ctx, c, 1, "once", "k", "svc", "req-2"); err != nil {
		t.Fatal(err)
	}
	denied, err := admitID(ctx, c, 2, "once", "k", "svc", "req-3")
	if err != nil || denied.GetAllowed() || denied.GetDuplicate() {
		t.Fatalf("third request: %v, %v; want a fresh denial", denied, err)
	}
	for i := range c.Len() {
		again, err := admitID(ctx, c, i, "once", "k", "svc", "req-3")
		if err != nil {
			t.Fatal(err)
		}
		if again.GetAllowed() || !again.GetDuplicate() || !sameDecision(denied, again) {
			t.Fatalf("retry of the denial on node%d: %v", i+1, again)
		}
	}
	// Another caller's req-1 is another request: decided afresh (denied now).
	other, err := admitID(ctx, c, 0, "once", "k", "other-svc", "req-1")
	if err != nil || other.GetDuplicate() || other.GetAllowed() {
		t.Fatalf("other caller: %v, %v", other, err)
	}
	// The same ID with another payload is refused and names request_id.
	cost := int64(2)
	_, err = c.Admission(1).Admit(ctx, connect.NewRequest(&quoratev1.AdmitRequest{
		Policy: "once", Key: "k", Cost: &cost, Caller: "svc", RequestId: "req-1"}))
	if connect.CodeOf(err) != connect.CodeInvalidArgument || fieldOf(err) != "request_id" {
		t.Fatalf("reused request_id: %v (field %q)", err, fieldOf(err))
	}
}

// killOnce returns a hook that kills the node it runs on the first time it
// sees an Admit with request ID id, and a channel closed once it has.
func killOnce(c *nodetest.Cluster, i int, id string) (func(*raftcmdv1.Envelope), <-chan struct{}) {
	var once sync.Once
	killed := make(chan struct{})
	return func(env *raftcmdv1.Envelope) {
		// The node writes the request's key into the request ID.
		if rid := env.GetAdmit().GetRequestId(); rid != id && !strings.HasPrefix(rid, id+"\x00") {
			return
		}
		once.Do(func() {
			c.Kill(i)
			close(killed)
		})
	}, killed
}

// The outcome of an admit is unknown to its caller when the leader dies
// after proposing it, or after applying it but before answering. A retry
// with the same request ID against the new leader spends exactly once in
// total, whichever way the first attempt went.
func TestUnknownOutcomeRetriedWithSameIDSpendsOnce(t *testing.T) {
	for _, tc := range []struct {
		name        string
		afterApply  bool // else after propose
		viaFollower bool // else straight to the leader
	}{
		{"crash after propose, call to leader", false, false},
		{"crash after apply, call to leader", true, false},
		{"crash after apply, call via follower", true, true},
		{"crash after propose, call via follower", false, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := nodetest.NewCluster(t, 3)
			const budget = 10
			applyPolicy(t, c, "paid", budget, 366*24*time.Hour, budget)
			leader := c.Leader(t)
			hook, killed := killOnce(c, leader, "charge-42")
			if tc.afterApply {
				c.Observer(leader).SetApplied(hook)
			} else {
				c.Observer(leader).SetProposed(hook)
			}
			ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			defer cancel()

			target := leader
			if tc.viaFollower {
				target = (leader + 1) % c.Len()
			}
			first, err := admitID(ctx, c, target, "paid", "acct", "billing", "charge-42")
			<-killed
			switch {
			case err == nil:
				// A follower that saw the leader fail mid-call retried with
				// the same request ID on the new leader by itself.
				if !tc.viaFollower {
					t.Fatalf("the leader died while deciding, yet answered: %v", first)
				}
				t.Logf("answered through the follower's own retry: duplicate=%v", first.GetDuplicate())
			case tc.viaFollower && connect.CodeOf(err) != connect.CodeUnavailable:
				t.Fatalf("via follower: %v, want an answer or Unavailable", err)
			default:
				t.Logf("first attempt failed as expected: %v (outcome unknown detail: %v)", err, outcomeUnknown(err))
			}

			// Retry with the same ID on the survivors until it is answered.
			var retry *quoratev1.AdmitResponse
			c.Eventually(t, 20*time.Second, "a retry answered by the new leader", func() error {
				for i := range c.Len() {
					if i == leader {
						continue
					}
					retry, err = admitID(ctx, c, i, "paid", "acct", "billing", "charge-42")
					if err == nil {
						return nil
					}
				}
				return err
			})
			if !retry.GetAllowed() {
				t.Fatalf("retry: %v", retry)
			}
			if tc.afterApply && !retry.GetDuplicate() {
				t.Fatalf("the first attempt was applied before the crash, but the retry was decided afresh: %v", retry)
			}
			if first != nil && !sameDecision(first, retry) {
				t.Fatalf("retry %v differs from the first answer %v", retry, first)
			}
			survivor := (leader + 2) % c.Len()
			if got := remainingAfterOneMore(t, ctx, c, survivor, "paid", "acct"); got != budget-1 {
				t.Fatalf("bucket holds %d after one charge retried; want %d (exactly one spend)", got, budget-1)
			}
		})
	}
}

// Request-ID entries survive a full crash and restart of the cluster: the
// retry after restart is still answered with the first decision.
func TestDedupeSurvivesFullRestart(t *testing.T) {
	c := nodetest.NewCluster(t, 3)
	applyPolicy(t, c, "durable", 5, 366*24*time.Hour, 5)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	first, err := admitID(ctx, c, 1, "durable", "k", "svc", "before-crash")
	if err != nil {
		t.Fatal(err)
	}
	for i := range c.Len() {
		c.Kill(i)
	}
	for i := range c.Len() {
		c.Start(i)
	}
	c.WaitReady(t)
	again, err := admitID(ctx, c, 2, "durable", "k", "svc", "before-crash")
	if err != nil {
		t.Fatal(err)
	}
	if !again.GetDuplicate() || !sameDecision(first, again) {
		t.Fatalf("after restart: %v, want %v with duplicate", again, first)
	}
	if got := remainingAfterOneMore(t, ctx, c, 0, "durable", "k"); got != 4 {
		t.Fatalf("bucket holds %d, want 4", got)
	}
}

// Once retention has passed in logged time, the leader reclaims request-ID
// entries (and refilled buckets) without any traffic, on every replica: the
// group's memory returns to baseline. A retry after that is a new request.
func TestDedupeEntriesExpireWithoutTraffic(t *testing.T) {
	c := nodetest.NewCluster(t, 3)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	_, err := c.Admin(0).ApplyPolicies(ctx, connect.NewRequest(&quoratev1.ApplyPoliciesRequest{Policies: []*quoratev1.Policy{{
		Name: "short", Algorithm: "token_bucket", Limit: 100, Period: durationpb.New(time.Second),
		DedupeRetention: durationpb.New(time.Second),
	}}}))
	if err != nil {
		t.Fatal(err)
	}
	for i := range 50 {
		if _, err := admitID(ctx, c, i%3, "short", fmt.Sprintf("k%d", i%5), "svc", fmt.Sprintf("r%d", i)); err != nil {
			t.Fatal(err)
		}
	}
	st, err := c.Admin(0).NodeStatus(ctx, connect.NewRequest(&quoratev1.NodeStatusRequest{}))
	if err != nil {
		t.Fatal(err)
	}
	if st.Msg.GetNode().GetDedupeEntries() == 0 || st.Msg.GetNode().GetDedupeBytes() == 0 {
		t.Fatalf("no dedupe entries held right after 50 admits: %v", st.Msg.GetNode())
	}
	c.Eventually(t, 20*time.Second, "every replica back to no entries and no buckets", func() error {
		for i := range c.Len() {
			n := c.Node(i).Status()
			if n.GetDedupeEntries() != 0 || n.GetDedupeBytes() != 0 || n.GetBuckets() != 0 {
				return fmt.Errorf("node%d holds %d entries (%d bytes), %d buckets", i+1, n.GetDedupeEntries(), n.GetDedupeBytes(), n.GetBuckets())
			}
		}
		return nil
	})
	again, err := admitID(ctx, c, 0, "short", "k0", "svc", "r0")
	if err != nil || again.GetDuplicate() {
		t.Fatalf("a retry after retention: %v, %v; want a fresh decision", again, err)
	}
}

// With no quorum, a node that knows nothing was proposed answers Unavailable
// without the OutcomeUnknown detail: retrying is safe even without a request
// ID.
func TestUnavailableSaysWhetherTheOutcomeIsKnown(t *testing.T) {
	c := nodetest.NewCluster(t, 3)
	applyPolicy(t, c, "q", 5, time.Hour, 5)
	leader := c.Leader(t)
	follower := (leader + 1) % c.Len()
	c.Kill(leader)
	c.Kill((leader + 2) % c.Len())
	c.Eventually(t, 10*time.Second, "the survivor to know no leader", func() error {
		if id := c.Node(follower).Status().GetLeaderId(); id != "" {
			return fmt.Errorf("still sees leader %q", id)
		}
		return nil
	})
	ctx, cancel := context.WithTimeout(context.Background(), 300*time.Millisecond)
	defer cancel()
	_, err := admitID(ctx, c, follower, "q", "k", "svc", "no-quorum")
	if connect.CodeOf(err) != connect.CodeUnavailable && connect.CodeOf(err) != connect.CodeDeadlineExceeded {
		t.Fatalf("no leader: %v, want Unavailable", err)
	}
	if outcomeUnknown(err) {
		t.Fatalf("no leader: %v carries OutcomeUnknown, but nothing was proposed", err)
	}
}

// A leader that proposed and then lost its quorum cannot know whether the
// entry will commit: it answers Unavailable with OutcomeUnknown — even when,
// holding a request ID, it kept retrying and later attempts found no leader
// at all. The next request, never proposed, gets Unavailable without it.
func TestLeaderThatLosesQuorumAfterProposingSaysOutcomeUnknown(t *testing.T) {
	c := nodetest.NewCluster(t, 3)
	applyPolicy(t, c, "q", 5, time.Hour, 5)
	leader := c.Leader(t)
	// A first request with an ID, while the quorum holds: the leader's
	// once-a-term barrier before its first request ID (keyed IDs) is
	// behind it, so the next one is proposed at once.
	warm, cancelWarm := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancelWarm()
	if _, err := admitID(warm, c, leader, "q", "k", "svc", "warm-up"); err != nil {
		t.Fatal(err)
	}
	c.Kill((leader + 1) % c.Len())
	c.Kill((leader + 2) % c.Len())
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Second)
	defer cancel()
	_, err := admitID(ctx, c, leader, "q", "k", "svc", "lost-quorum")
	if connect.CodeOf(err) != connect.CodeUnavailable || !outcomeUnknown(err) {
		t.Fatalf("proposed, then quorum lost: %v, want Unavailable with OutcomeUnknown", err)
	}
	ctx2, cancel2 := context.WithTimeout(context.Background(), 500*time.Millisecond)
	defer cancel2()
	_, err = admitID(ctx2, c, leader, "q", "k", "", "")
	// The node's answer at its deadline, or (on a loaded machine) the
	// client's own deadline first; never OutcomeUnknown.
	if code := connect.CodeOf(err); code != connect.CodeUnavailable && code != connect.CodeDeadlineExceeded || outcomeUnknown(err) {
		t.Fatalf("no leader any more: %v, want Unavailable without OutcomeUnknown", err)
	}
}
