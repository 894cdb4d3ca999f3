package main

import (
	"bytes"
	"context"
	"encoding/json"
	"maps"
	"slices"
	"strings"
	"testing"
	"time"

	"go.yaml.in/yaml/v3"
	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/proto"

	"github.com/quorate/quorate/node/nodetest"
	quoratev1 "github.com/quorate/quorate/proto/quorate/v1"
)

// runCLIStdin is runCLI with stdin.
func runCLIStdin(tb testing.TB, stdin string, args ...string) (stdout, stderr string, err error) {
	tb.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	var out, errOut bytes.Buffer
	root := newRootCmd(&out, &errOut)
	root.SetIn(strings.NewReader(stdin))
	root.SetArgs(args)
	err = root.ExecuteContext(ctx)
	return out.String(), errOut.String(), err
}

// listPolicies returns the cluster's policies by name.
func listPolicies(t *testing.T, server string) map[string]*quoratev1.Policy {
	t.Helper()
	var listed quoratev1.ListPoliciesResponse
	mustRunJSON(t, &listed, "policy", "list", "--server", server, "-o", "json")
	out := make(map[string]*quoratev1.Policy)
	for _, p := range listed.GetPolicies() {
		out[p.GetName()] = p
	}
	return out
}

// What policy list and get print with -o yaml, policy apply -f - accepts
// unchanged, and applying it changes nothing; --dry-run shows a change and
// applies nothing. (Every read goes to one node, whose replica the list and
// get read: a later read of it sees what an earlier one saw.)
func TestPolicyYAMLRoundTripAndDryRun(t *testing.T) {
	c := nodetest.NewCluster(t, 3)
	server := c.APIURL(0)
	if _, errOut, err := runCLI(t, "policy", "apply", "-f", "../../examples/policies.yaml", "--server", server); err != nil {
		t.Fatalf("apply: %v\n%s", err, errOut)
	}
	// A changed policy, so that versions differ from 1.
	changed := "policies:\n  - name: api-free\n    algorithm: token_bucket\n    limit: 120\n    period: 1m\n    burst: 20\n    max_cost: 10\n    on_unavailable: allow\n"
	if _, errOut, err := runCLIStdin(t, changed, "policy", "apply", "-f", "-", "--server", server); err != nil {
		t.Fatalf("apply a change: %v\n%s", err, errOut)
	}
	before := listPolicies(t, server)
	if before["api-free"].GetVersion() != 2 {
		t.Fatalf("api-free: %v, want version 2", before["api-free"])
	}

	listYAML, errOut, err := runCLI(t, "policy", "list", "--server", server, "-o", "yaml")
	if err != nil {
		t.Fatalf("list -o yaml: %v\n%s", err, errOut)
	}
	if !strings.HasPrefix(listYAML, "policies:\n  - name: ") || !strings.Contains(listYAML, "name: api-free # version 2\n") ||
		!strings.Contains(listYAML, "    period: 1m\n") {
		t.Errorf("list -o yaml is not a policy file with versions as comments:\n%s", listYAML)
	}
	getYAML, errOut, err := runCLI(t, "policy", "get", "reports-monthly", "--server", server, "-o", "yaml")
	if err != nil || !strings.HasPrefix(getYAML, "policies:\n  - name: reports-monthly # version 1\n") {
		t.Fatalf("get -o yaml: %v\n%s%s", err, getYAML, errOut)
	}
	for name, file := range map[string]string{"list": listYAML, "get": getYAML} {
		// The dry run of the file changes nothing.
		plan, errOut, err := runCLIStdin(t, file, "policy", "apply", "-f", "-", "--dry-run", "--server", server)
		if err != nil || strings.Contains(plan, "~ ") || strings.Contains(plan, "+ ") || !strings.Contains(plan, "0 to add, 0 to change") {
			t.Errorf("dry run of the %s output: %v\n%s%s", name, err, plan, errOut)
		}
		var applied quoratev1.ApplyPoliciesResponse
		out, errOut, err := runCLIStdin(t, file, "policy", "apply", "-f", "-", "--server", server, "-o", "json")
		if err != nil {
			t.Fatalf("apply -f - of the %s output: %v\n%s\n%s", name, err, errOut, file)
		}
		if err := protojson.Unmarshal([]byte(out), &applied); err != nil {
			t.Fatal(err)
		}
		for _, p := range applied.GetPolicies() {
			if !proto.Equal(p, before[p.GetName()]) {
				t.Errorf("applying the %s output changed %s: %v, was %v", name, p.GetName(), p, before[p.GetName()])
			}
		}
	}
	if after := listPolicies(t, server); len(after) != len(before) {
		t.Errorf("%d policies after the round trips, want %d", len(after), len(before))
	}

	// A dry run of a change and an addition: shown, not applied.
	edited := strings.Replace(getYAML, "limit: 1000", "limit: 2000", 1) +
		"  - name: brand-new\n    algorithm: fixed_window\n    limit: 5\n    period: 1s\n"
	plan, errOut, err := runCLIStdin(t, edited, "policy", "apply", "-f", "-", "--dry-run", "--server", server)
	if err != nil {
		t.Fatalf("dry run: %v\n%s", err, errOut)
	}
	for _, want := range []string{
		"~ reports-monthly  (version 1 → 2)\n    limit: 1000 → 2000\n    burst: 1000 → 2000\n    max_cost: 1000 → 2000\n",
		"+ brand-new  (new, version 1)\n    algorithm: fixed_window\n    limit: 5\n    period: 1s\n",
		"1 to add, 1 to change, 0 unchanged; nothing applied",
	} {
		if !strings.Contains(plan, want) {
			t.Errorf("dry run output lacks %q:\n%s", want, plan)
		}
	}
	planYAML, _, err := runCLIStdin(t, edited, "policy", "apply", "-f", "-", "--dry-run", "--server", server, "-o", "yaml")
	if err != nil || !strings.Contains(planYAML, "name: reports-monthly # version 2\n") || !strings.Contains(planYAML, "name: brand-new # version 1\n") {
		t.Errorf("dry run -o yaml: %v\n%s", err, planYAML)
	}
	after := listPolicies(t, server)
	if _, ok := after["brand-new"]; ok || !proto.Equal(after["reports-monthly"], before["reports-monthly"]) {
		t.Errorf("the dry run applied something: %v", after)
	}

	// Another command's -o yaml has the fields of its -o json.
	asJSON, _, err1 := runCLI(t, "admin", "status", "--server", server, "-o", "json")
	asYAML, _, err2 := runCLI(t, "admin", "status", "--server", server, "-o", "yaml")
	var j, y map[string]any
	if err1 != nil || err2 != nil || json.Unmarshal([]byte(asJSON), &j) != nil || yaml.Unmarshal([]byte(asYAML), &y) != nil {
		t.Fatalf("admin status -o json, yaml: %v, %v\n%s\n%s", err1, err2, asJSON, asYAML)
	}
	if len(j) == 0 || !slices.Equal(slices.Sorted(maps.Keys(j)), slices.Sorted(maps.Keys(y))) {
		t.Errorf("admin status: -o yaml fields %v, -o json fields %v", slices.Sorted(maps.Keys(y)), slices.Sorted(maps.Keys(j)))
	}
}

// Every client command's -o yaml is its -o json as YAML: the same fields.
func TestOutputYAMLMatchesJSON(t *testing.T) {
	got, err := jsonToYAML([]byte(`{"allowed":true,"limit":"20","retryAfter":"0.5s","checks":[{"policy":"a"}],"empty":[],"obj":{}}`))
	if err != nil {
		t.Fatal(err)
	}
	want := "allowed: true\nlimit: \"20\"\nretryAfter: 0.5s\nchecks:\n  - policy: a\nempty: []\nobj: {}\n"
	if got != want {
		t.Errorf("jsonToYAML:\n%s\nwant\n%s", got, want)
	}
}
