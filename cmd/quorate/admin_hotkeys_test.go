package main

import (
	"fmt"
	"strings"
	"testing"

	"github.com/quorate/quorate/node/nodetest"
	quoratev1 "github.com/quorate/quorate/proto/quorate/v1"
)

func TestWriteHotKeysAddsUpMembers(t *testing.T) {
	group := func(id uint32, hot ...*quoratev1.HotKey) *quoratev1.GroupState {
		return &quoratev1.GroupState{Id: id, HotKeys: hot}
	}
	s := &quoratev1.ClusterStatusResponse{Members: []*quoratev1.MemberStatus{
		{Id: "n1", Status: &quoratev1.NodeState{Groups: []*quoratev1.GroupState{
			group(1, &quoratev1.HotKey{Policy: "api", Key: "user 42", Count: 30, GrantHolders: 2, GrantedUnspent: 40}, &quoratev1.HotKey{Policy: "api", Key: "b", Count: 5, Error: 2}),
		}}},
		// n2 led group 1 before n1, and leads group 2; its replica of
		// group 1's grants lags n1's (the larger figures are shown).
		{Id: "n2", Status: &quoratev1.NodeState{Groups: []*quoratev1.GroupState{
			group(1, &quoratev1.HotKey{Policy: "api", Key: "user 42", Count: 12, GrantHolders: 1, GrantedUnspent: 10}),
			group(2, &quoratev1.HotKey{Policy: "login", Key: "ip-1", Count: 7}),
		}}},
		{Id: "n3", Error: "unreachable"},
	}}
	var b strings.Builder
	if err := writeHotKeys(&b, s); err != nil {
		t.Fatal(err)
	}
	lines := strings.Split(strings.TrimSpace(b.String()), "\n")
	if len(lines) != 5 || !strings.HasPrefix(lines[0], "hot keys") {
		t.Fatalf("output:\n%s", b.String())
	}
	for i, want := range [][]string{{"GROUP", "POLICY", "KEY", "DECISIONS", "ERROR", "GRANTS", "GRANTED"}, {"1", "api", `"user 42"`, "42", "0", "2", "40"}, {"2", "login", `"ip-1"`, "7", "0", "-", "-"}, {"1", "api", `"b"`, "5", "2", "-", "-"}} {
		if got := strings.Fields(lines[i+1]); strings.Join(got, " ") != strings.Join(want, " ") {
			t.Errorf("line %d: %q, want %q", i+1, got, want)
		}
	}
	b.Reset()
	if err := writeHotKeys(&b, &quoratev1.ClusterStatusResponse{}); err != nil || b.Len() != 0 {
		t.Fatalf("no hot keys: %q, %v", b.String(), err)
	}
}

// A pair that holds grants is listed after the heaviest pairs even when no
// decision on it was counted (its group's leader is new since it was hot);
// one with neither is not there to list.
func TestWriteHotKeysListsGrantedPairs(t *testing.T) {
	var hot []*quoratev1.HotKey
	for i := range hotKeysListed + 2 {
		hot = append(hot, &quoratev1.HotKey{Policy: "api", Key: fmt.Sprintf("k%02d", i), Count: uint64(100 - i)})
	}
	hot = append(hot, &quoratev1.HotKey{Policy: "search", Key: "granted", GrantHolders: 1, GrantedUnspent: 400})
	s := &quoratev1.ClusterStatusResponse{Members: []*quoratev1.MemberStatus{
		{Id: "n1", Status: &quoratev1.NodeState{Groups: []*quoratev1.GroupState{{Id: 1, HotKeys: hot}}}},
	}}
	var b strings.Builder
	if err := writeHotKeys(&b, s); err != nil {
		t.Fatal(err)
	}
	lines := strings.Split(strings.TrimSpace(b.String()), "\n")
	if len(lines) != 2+hotKeysListed+1 {
		t.Fatalf("%d lines, want the header, %d heaviest pairs and the granted one:\n%s", len(lines), hotKeysListed, b.String())
	}
	if got, want := strings.Fields(lines[len(lines)-1]), []string{"1", "search", `"granted"`, "0", "0", "1", "400"}; strings.Join(got, " ") != strings.Join(want, " ") {
		t.Fatalf("last line %q, want %q", got, want)
	}
	if strings.Contains(b.String(), `"k10"`) {
		t.Fatalf("a pair past the heaviest without grants is listed:\n%s", b.String())
	}
}

// admin status lists a key admitted through every node as the hottest, with
// every decision counted once, on whichever node the admits arrived; and
// the per-policy counts in its JSON.
func TestAdminStatusShowsHotKeys(t *testing.T) {
	c := nodetest.NewCluster(t, 3)
	leader := c.Leader(t)
	if _, _, err := runCLI(t, "policy", "apply", "-f", "../../examples/policies.yaml", "--server", c.APIURL(leader)); err != nil {
		t.Fatal(err)
	}
	for i := range 6 {
		key := "tenant-hot"
		if i == 5 {
			key = "tenant-cold"
		}
		if _, stderr, err := runCLI(t, "admit", "--server", c.APIURL(i%3), "--policy", "api-free", "--key", key); err != nil {
			t.Fatalf("admit via node%d: %v\n%s", i%3+1, err, stderr)
		}
	}
	out, _, err := runCLI(t, "admin", "status", "--server", c.APIURL((leader+1)%3))
	if err != nil {
		t.Fatal(err)
	}
	_, section, ok := strings.Cut(out, "\nhot keys")
	if !ok {
		t.Fatalf("no hot keys section:\n%s", out)
	}
	lines := strings.Split(section, "\n")
	if len(lines) < 4 || strings.Join(strings.Fields(lines[2]), " ") != `0 api-free "tenant-hot" 5 0 - -` ||
		strings.Join(strings.Fields(lines[3]), " ") != `0 api-free "tenant-cold" 1 0 - -` {
		t.Errorf("hot keys section:\n%s", section)
	}
	var st quoratev1.ClusterStatusResponse
	mustRunJSON(t, &st, "admin", "status", "--server", c.APIURL(leader), "-o", "json")
	var decided uint64
	for _, m := range st.GetMembers() {
		for _, d := range m.GetStatus().GetPolicyDecisions() {
			if d.GetPolicy() == "api-free" {
				decided += d.GetDecisions()
			}
		}
	}
	if decided != 6 {
		t.Errorf("api-free decisions %d in the JSON, want 6", decided)
	}
}
