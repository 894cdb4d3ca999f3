package main

import (
	"strconv"
	"strings"
	"testing"

	"github.com/quorate/quorate/node/nodetest"
	quoratev1 "github.com/quorate/quorate/proto/quorate/v1"
)

// `admin audit` lists the admin changes a real cluster recorded, as a table
// or as JSON, in pages.
func TestAdminAudit(t *testing.T) {
	c := nodetest.NewCluster(t, 1)
	srv := c.APIURL(0)
	if out, _, err := runCLI(t, "admin", "audit", "--server", srv); err != nil || out != "no audit records\n" {
		t.Fatalf("audit of a new cluster: %q, %v", out, err)
	}
	if _, _, err := runCLI(t, "policy", "apply", "-f", "../../examples/policies.yaml", "--server", srv); err != nil {
		t.Fatal(err)
	}
	if _, _, err := runCLI(t, "policy", "delete", "api-free", "--server", srv); err != nil {
		t.Fatal(err)
	}
	out, _, err := runCLI(t, "admin", "audit", "--server", srv)
	if err != nil {
		t.Fatal(err)
	}
	lines := strings.Split(strings.TrimSuffix(out, "\n"), "\n")
	if len(lines) != 3 || !strings.HasPrefix(lines[0], "INDEX") ||
		!strings.Contains(lines[1], "policy apply") || !strings.Contains(lines[1], "api-free") ||
		!strings.Contains(lines[2], "policy delete") || !strings.Contains(lines[2], " - ") {
		t.Fatalf("audit:\n%s", out)
	}

	var page quoratev1.ListAuditResponse
	mustRunJSON(t, &page, "admin", "audit", "--server", srv, "--limit", "1", "-o", "json")
	if len(page.GetEntries()) != 1 || !page.GetMore() || page.GetEntries()[0].GetAction() != "policy apply" ||
		page.GetEntries()[0].GetSource() != "none" || page.GetEntries()[0].GetTime() == nil {
		t.Fatalf("first page: %v", &page)
	}
	first := page.GetEntries()[0]
	out, _, err = runCLI(t, "admin", "audit", "--server", srv, "--limit", "1")
	if err != nil || !strings.Contains(out, "more records follow: quorate admin audit --since ") {
		t.Fatalf("a page with more: %q, %v", out, err)
	}
	mustRunJSON(t, &page, "admin", "audit", "--server", srv, "--since", strconv.FormatUint(first.GetIndex(), 10), "-o", "json")
	if len(page.GetEntries()) != 1 || page.GetMore() || page.GetEntries()[0].GetAction() != "policy delete" ||
		page.GetEntries()[0].GetIndex() <= first.GetIndex() || page.GetEntries()[0].GetTime().AsTime().Before(first.GetTime().AsTime()) {
		t.Fatalf("second page: %v", &page)
	}
	_, _, err = runCLI(t, "admin", "audit", "--server", srv, "--limit", "1001")
	wantErrNaming(t, err, "--limit")
}
