package main

import (
	"fmt"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/quorate/quorate/node/nodetest"
	quoratev1 "github.com/quorate/quorate/proto/quorate/v1"
)

// `admin audit` lists the admin changes a real cluster recorded, as a table
// or as JSON, in pages: a new cluster's first is its node's own
// registration.
func TestAdminAudit(t *testing.T) {
	c := nodetest.NewCluster(t, 1)
	srv := c.APIURL(0)
	var joined *quoratev1.AuditEntry
	nodetest.Eventually(t, 10*time.Second, "the node's registration in the audit trail", func() error {
		var page quoratev1.ListAuditResponse
		mustRunJSON(t, &page, "admin", "audit", "--server", srv, "-o", "json")
		if e := page.GetEntries(); len(e) == 1 && e[0].GetAction() == "node add" && e[0].GetCaller() == "node:node1" {
			joined = e[0]
			return nil
		}
		return fmt.Errorf("audit of a new cluster: %v", &page)
	})
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
	if len(lines) != 4 || !strings.HasPrefix(lines[0], "INDEX") || !strings.Contains(lines[1], "node add") ||
		!strings.Contains(lines[2], "policy apply") || !strings.Contains(lines[2], "api-free") ||
		!strings.Contains(lines[3], "policy delete") || !strings.Contains(lines[3], " - ") {
		t.Fatalf("audit:\n%s", out)
	}

	var page quoratev1.ListAuditResponse
	since := strconv.FormatUint(joined.GetIndex(), 10)
	mustRunJSON(t, &page, "admin", "audit", "--server", srv, "--since", since, "--limit", "1", "-o", "json")
	if len(page.GetEntries()) != 1 || !page.GetMore() || page.GetEntries()[0].GetAction() != "policy apply" ||
		page.GetEntries()[0].GetSource() != "none" || page.GetEntries()[0].GetTime() == nil {
		t.Fatalf("first page: %v", &page)
	}
	first := page.GetEntries()[0]
	out, _, err = runCLI(t, "admin", "audit", "--server", srv, "--since", since, "--limit", "1")
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
