package node_test

import (
	"context"
	"fmt"
	"maps"
	"testing"
	"time"

	"connectrpc.com/connect"

	"github.com/quorate/quorate/node"
	"github.com/quorate/quorate/node/nodetest"
	quoratev1 "github.com/quorate/quorate/proto/quorate/v1"
)

// admitBatchOn sends one AdmitBatch to node i, retrying the whole call
// while it fails as a call (every request carries a request ID, so a retry
// spends nothing twice).
func admitBatchOn(t *testing.T, c *nodetest.Cluster, i int, reqs []*quoratev1.AdmitRequest) []*quoratev1.AdmitBatchResult {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	resp, err := c.Admission(i).AdmitBatch(ctx, connect.NewRequest(&quoratev1.AdmitBatchRequest{Requests: reqs}))
	if err != nil {
		t.Fatalf("AdmitBatch on node %d: %v", i, err)
	}
	if got := len(resp.Msg.GetResults()); got != len(reqs) {
		t.Fatalf("%d results for %d requests", got, len(reqs))
	}
	return resp.Msg.GetResults()
}

// A batch sent to any node, over keys of every data group, is decided
// exactly as the same Admits one by one would be: each key's budget is
// spent once per request, never beyond it; retries within a batch are
// answered as duplicates; bad requests fail alone, naming their field.
// groupTerms is the highest Raft term of each group that c's running nodes
// know.
func groupTerms(c *nodetest.Cluster) map[uint32]uint64 {
	terms := map[uint32]uint64{}
	for i := range c.Len() {
		if !c.Running(i) {
			continue
		}
		for _, g := range c.Node(i).Status().GetGroups() {
			terms[g.GetId()] = max(terms[g.GetId()], g.GetTerm())
		}
	}
	return terms
}

func TestAdmitBatchAcrossGroups(t *testing.T) {
	c := newMultiGroupCluster(t)
	const capacity = 5
	applyBucket(t, c, "p", capacity)

	const keys, perKey = 40, 7 // 7 requests per key against a budget of 5
	for via := range c.Len() {
		var reqs []*quoratev1.AdmitRequest
		for r := range perKey {
			for k := range keys {
				reqs = append(reqs, &quoratev1.AdmitRequest{Policy: "p", Key: fmt.Sprintf("via%d-key-%d", via, k),
					Caller: "batch", RequestId: fmt.Sprintf("v%d-k%d-r%d", via, k, r)})
			}
		}
		// A retry of the first request, an unknown policy, a bad cost.
		reqs = append(reqs,
			&quoratev1.AdmitRequest{Policy: "p", Key: fmt.Sprintf("via%d-key-0", via), Caller: "batch", RequestId: fmt.Sprintf("v%d-k0-r0", via)},
			&quoratev1.AdmitRequest{Policy: "nope", Key: "x", Caller: "batch", RequestId: fmt.Sprintf("v%d-nope", via)},
			&quoratev1.AdmitRequest{Policy: "p", Key: "x", Cost: ptr(int64(-1))},
		)
		termsBefore := groupTerms(c)
		res := admitBatchOn(t, c, via, reqs)
		// A leader change during the call makes the node retry requests whose
		// outcome it could not know, with their request IDs: those that had
		// been applied come back as duplicates, rightly. Without one, none may.
		leaderChanged := !maps.Equal(termsBefore, groupTerms(c))

		allowed := map[string]int{}
		duplicates := 0
		for i, r := range res[:keys*perKey] {
			if e := r.GetError(); e != nil {
				t.Fatalf("via node %d: request %d (%s): %s: %s", via, i, reqs[i].GetKey(), e.GetCode(), e.GetMessage())
			}
			a := r.GetResponse()
			if a.GetDuplicate() {
				duplicates++
			}
			if a.GetAllowed() {
				allowed[reqs[i].GetKey()]++
			}
		}
		for k := range keys {
			key := fmt.Sprintf("via%d-key-%d", via, k)
			if allowed[key] != capacity {
				t.Errorf("via node %d: %s admitted %d times, want exactly the budget %d", via, key, allowed[key], capacity)
			}
		}
		if duplicates != 0 && !leaderChanged {
			t.Errorf("via node %d: %d duplicates among distinct request IDs, with no leader change", via, duplicates)
		} else if duplicates != 0 {
			t.Logf("via node %d: %d duplicates after a leader change (retried with their request IDs)", via, duplicates)
		}
		retry, first := res[keys*perKey].GetResponse(), res[0].GetResponse()
		if !retry.GetDuplicate() || retry.GetAllowed() != first.GetAllowed() || retry.GetRemaining() != first.GetRemaining() {
			t.Errorf("via node %d: retry in the same batch answered %v, want the first answer %v as a duplicate", via, retry, first)
		}
		if e := res[keys*perKey+1].GetError(); e.GetCode() != connect.CodeNotFound.String() {
			t.Errorf("via node %d: unknown policy: %v, want not_found", via, res[keys*perKey+1])
		}
		if e := res[keys*perKey+2].GetError(); e.GetCode() != connect.CodeInvalidArgument.String() || e.GetField() != "cost" {
			t.Errorf("via node %d: bad cost: %v, want invalid_argument on field cost", via, res[keys*perKey+2])
		}
		// The budget is spent in the keys' groups for everyone to see.
		if r := admitOnce(t, c, (via+1)%c.Len(), "p", fmt.Sprintf("via%d-key-3", via), fmt.Sprintf("after-%d", via)); r.GetAllowed() {
			t.Errorf("via node %d: a key whose budget the batch spent still admits: %v", via, r)
		}
	}
}

// The call itself is refused only when empty or larger than the maximum.
func TestAdmitBatchSizeLimits(t *testing.T) {
	c := nodetest.NewCluster(t, 3)
	applyBucket(t, c, "p", 5)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	for _, n := range []int{0, node.MaxAdmitBatch + 1} {
		reqs := make([]*quoratev1.AdmitRequest, n)
		for i := range reqs {
			reqs[i] = &quoratev1.AdmitRequest{Policy: "p", Key: "k"}
		}
		_, err := c.Admission(0).AdmitBatch(ctx, connect.NewRequest(&quoratev1.AdmitBatchRequest{Requests: reqs}))
		wantCode(t, fmt.Sprintf("batch of %d", n), err, connect.CodeInvalidArgument, "requests")
	}
}

// A batch sent to the leader of a single group goes into its log in a few
// entries (group commit), not one per request.
func TestAdmitBatchSharesEntries(t *testing.T) {
	c := nodetest.NewCluster(t, 3)
	applyBucket(t, c, "p", 1_000)
	leader := c.Leader(t)
	admitOnce(t, c, leader, "p", "warm", "warm") // policy in place, nothing else pending
	before := c.Node(leader).Status().GetLastAppliedIndex()
	var reqs []*quoratev1.AdmitRequest
	for i := range 400 {
		reqs = append(reqs, &quoratev1.AdmitRequest{Policy: "p", Key: fmt.Sprintf("k%d", i%50), Caller: "t", RequestId: fmt.Sprintf("share-%d", i)})
	}
	for i, r := range admitBatchOn(t, c, leader, reqs) {
		if !r.GetResponse().GetAllowed() {
			t.Fatalf("request %d: %v", i, r)
		}
	}
	// 400 requests fit in one entry; allow a few more for entries the node
	// writes on its own meanwhile (expiry).
	if entries := c.Node(leader).Status().GetLastAppliedIndex() - before; entries > 4 {
		t.Fatalf("400 requests took %d log entries, want them batched into a few", entries)
	}
}

// A batch right after a policy is applied is decided under it in every
// group: a group that has not copied the policy yet catches up with the
// meta group first instead of answering not_found.
func TestAdmitBatchRightAfterPolicyApplied(t *testing.T) {
	c := newMultiGroupCluster(t)
	for round := range 3 {
		name := fmt.Sprintf("fresh-%d", round)
		applyBucket(t, c, name, 5)
		var reqs []*quoratev1.AdmitRequest
		for k := range 64 {
			reqs = append(reqs, &quoratev1.AdmitRequest{Policy: name, Key: fmt.Sprintf("k%d", k), Caller: "t", RequestId: fmt.Sprintf("%s-%d", name, k)})
		}
		for i, r := range admitBatchOn(t, c, round%c.Len(), reqs) {
			if !r.GetResponse().GetAllowed() {
				t.Fatalf("round %d, request %d (%s): %v", round, i, reqs[i].GetKey(), r)
			}
		}
	}
}
