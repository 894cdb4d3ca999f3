package policyfile

import (
	"errors"
	"os"
	"testing"

	"google.golang.org/protobuf/proto"

	"github.com/quorate/quorate/node"
	quoratev1 "github.com/quorate/quorate/proto/quorate/v1"
)

// FuzzPolicyFile feeds random bytes to the policy file parser. It must never
// panic; it must answer either policies or a *Error; and whatever
// it accepts must be what the server accepts and stores: every policy
// converts (node.PolicyFromAPI) to an admission.Policy that Validate passes,
// and survives the trip to the wire and back (node.PolicyToAPI, proto
// encoding, node.PolicyFromAPI) unchanged. Run it with
//
//	go test ./cmd/quorate/ -run '^$' -fuzz FuzzPolicyFile
//
// A plain go test runs the seeds only.
func FuzzPolicyFile(f *testing.F) {
	example, err := os.ReadFile("../examples/policies.yaml")
	if err != nil {
		f.Fatal(err)
	}
	for _, seed := range []string{
		string(example),
		// Good files with every field, defaults and nulls.
		"policies:\n  - name: a\n    algorithm: token_bucket\n    limit: 60\n    period: 1m\n    burst: 20\n    max_cost: 10\n" +
			"    on_unavailable: local\n    shadow: true\n    dedupe_retention: 0s\n",
		"policies:\n  - name: q\n    algorithm: quota\n    limit: 1000\n    calendar: year\n    burst: ~\n    shadow: false\n",
		"policies:\n  - {name: w, algorithm: fixed_window, limit: 3, period: 2s}\n  - {name: s, algorithm: sliding_window, limit: 9, period: 1500ms}\n",
		"policies:\n  - &p {name: l, algorithm: sliding_log, limit: 5, period: 15m}\n",
		"policies:\n  - name: c\n    algorithm: concurrency\n    limit: 2\n    lease_ttl: 2m\n",
		"policies:\n  - {name: c, algorithm: concurrency, limit: 10000, lease_ttl: 24h, burst: 10000, max_cost: 1}\n" +
			"  - {name: d, algorithm: concurrency, limit: 1, lease_ttl: ~, dedupe_retention: 1s}\n",
		// Broken ones.
		"",
		"policies: [\n",
		"policies:\n  - name: a\n---\npolicies: []\n",
		"policies:\n  - name: a\n    algorithm: quota\n    limit: 5\n    calendar: fortnight\n",
		"policies:\n  - name: a\n    algorithm: token_bucket\n    limit: 5\n    period: 1m\n    calendar: day\n",
		"policies:\n  - name: a\n    algorithm: token_bucket\n    limit: 5\n    period: 1m\n    shadow: yes\n",
		"policies:\n  - name: c\n    algorithm: concurrency\n    limit: 2\n    lease_ttl: 500ms\n",
		"policies:\n  - name: c\n    algorithm: concurrency\n    limit: 2\n    period: 1m\n",
		"policies:\n  - name: a\n    algorithm: token_bucket\n    limit: 5\n    period: 1m\n    lease_ttl: 2m\n",
		"policies:\n  - name: a\n    algorithm: token_bucket\n    limit: 9223372036854775807\n    period: 2562047h\n",
		"policies:\n  - name: a\n    algorithm: token_bucket\n    limit: 5\n    period: -1m\n",
		"policies:\n  - *x\n",
		"a: &a [*a]\n",
		"policies:\n  - name: a\n    limit: !!int 0x10\n    period: !!str 1s\n    ? [k]\n    : v\n",
		"\xff\xfe policies:\n\t- name: \x00\n",
	} {
		f.Add([]byte(seed))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		policies, err := Parse("fuzz.yaml", data)
		if err != nil {
			var pe *Error
			if !errors.As(err, &pe) {
				t.Fatalf("error %v (%T) is not a *Error", err, err)
			}
			if policies != nil {
				t.Fatalf("got policies and an error %v", err)
			}
			return
		}
		if len(policies) == 0 {
			t.Fatal("accepted a file without policies")
		}
		names := make(map[string]bool)
		for i, p := range policies {
			ap := node.PolicyFromAPI(p)
			if err := ap.Validate(); err != nil {
				t.Fatalf("policies[%d] %+v was accepted, but Validate says %v", i, ap, err)
			}
			if names[ap.Name] {
				t.Fatalf("policies[%d]: duplicate name %q was accepted", i, ap.Name)
			}
			names[ap.Name] = true
			if p.GetVersion() != 0 {
				t.Fatalf("policies[%d] has version %d; a file's policies have none", i, p.GetVersion())
			}
			wire := node.PolicyToAPI(ap, 0)
			if !proto.Equal(wire, p) {
				t.Fatalf("policies[%d]: PolicyToAPI(PolicyFromAPI(p)) = %v, want %v", i, wire, p)
			}
			b, err := proto.Marshal(wire)
			if err != nil {
				t.Fatal(err)
			}
			var sent quoratev1.Policy
			if err := proto.Unmarshal(b, &sent); err != nil {
				t.Fatal(err)
			}
			if back := node.PolicyFromAPI(&sent); back != ap {
				t.Fatalf("policies[%d] did not survive the wire: %+v, want %+v", i, back, ap)
			}
		}
	})
}
