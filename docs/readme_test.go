package docs

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// maxREADMELines bounds README.md: what Quorate is, how to try it and a map
// of docs/, which holds the rest.
const maxREADMELines = 300

// TestREADMEIsShort keeps README.md a page a newcomer finishes.
func TestREADMEIsShort(t *testing.T) {
	b, err := os.ReadFile(filepath.Join(repoRoot, "README.md"))
	if err != nil {
		t.Fatal(err)
	}
	if n := strings.Count(string(b), "\n"); n > maxREADMELines {
		t.Errorf("README.md has %d lines, more than %d: move the detail to a document of docs/ and link it", n, maxREADMELines)
	}
}
