package main

import (
	"strconv"
	"strings"
	"testing"

	"github.com/quorate/quorate/node/nodetest"
	quoratev1 "github.com/quorate/quorate/proto/quorate/v1"
)

// admin status shows, per node, the data calls it forwarded to another
// node's leader: an admit sent to a follower counts there, one sent to the
// leader counts nowhere.
func TestAdminStatusShowsForwardedCalls(t *testing.T) {
	c := nodetest.NewCluster(t, 3)
	leader := c.Leader(t)
	if _, _, err := runCLI(t, "policy", "apply", "-f", "../../examples/policies.yaml", "--server", c.APIURL(leader)); err != nil {
		t.Fatal(err)
	}
	follower := (leader + 1) % c.Len()
	for _, i := range []int{leader, follower, follower} {
		if _, stderr, err := runCLI(t, "admit", "--server", c.APIURL(i), "--policy", "api-free", "--key", "tenant-fwd"); err != nil {
			t.Fatalf("admit via node%d: %v\n%s", i+1, err, stderr)
		}
	}
	out, _, err := runCLI(t, "admin", "status", "--server", c.APIURL(leader))
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(out, "FORWARDED") {
		t.Errorf("no FORWARDED column:\n%s", out)
	}
	var st quoratev1.ClusterStatusResponse
	mustRunJSON(t, &st, "admin", "status", "--server", c.APIURL(leader), "-o", "json")
	forwarded := map[string]uint64{}
	for _, m := range st.GetMembers() {
		forwarded[m.GetId()] = m.GetStatus().GetForwardedCalls()
	}
	leaderID, followerID := "node"+strconv.Itoa(leader+1), "node"+strconv.Itoa(follower+1)
	if forwarded[leaderID] != 0 || forwarded[followerID] != 2 {
		t.Errorf("forwarded calls %v, want 0 on the leader %s and 2 on %s:\n%s", forwarded, leaderID, followerID, out)
	}
}
