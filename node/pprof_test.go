package node_test

import (
	"bytes"
	"errors"
	"io"
	"net/http"
	"strings"
	"testing"

	"github.com/quorate/quorate/node"
	"github.com/quorate/quorate/node/nodetest"
)

// --pprof-addr serves the process's runtime profiles on loopback; it is
// refused on any other address.
func TestPprofEndpoint(t *testing.T) {
	c := nodetest.NewClusterWith(t, nodetest.Options{Nodes: 1, Configure: func(_ int, cfg *node.Config) {
		cfg.PprofAddr = "127.0.0.1:0"
	}})
	base := "http://" + c.Node(0).PprofAddr() + "/debug/pprof/"
	get := func(path string) []byte {
		t.Helper()
		resp, err := http.Get(base + path)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, err := io.ReadAll(resp.Body)
		if err != nil || resp.StatusCode != http.StatusOK {
			t.Fatalf("GET %s: HTTP %d, %v: %s", path, resp.StatusCode, err, b)
		}
		return b
	}
	if b := get("heap?debug=1"); !bytes.Contains(b, []byte("heap profile")) {
		t.Fatalf("heap profile: %.200s", b)
	}
	if b := get("goroutine?debug=1"); !bytes.Contains(b, []byte("goroutine profile")) {
		t.Fatalf("goroutine profile: %.200s", b)
	}
	if b := get("profile?seconds=1"); len(b) < 2 || b[0] != 0x1f || b[1] != 0x8b {
		t.Fatalf("CPU profile is not gzipped protobuf: % x", b[:min(len(b), 8)])
	}

	cfg := node.DefaultConfig()
	cfg.ID, cfg.DataDir, cfg.Bootstrap, cfg.PprofAddr = "n1", t.TempDir(), true, "0.0.0.0:6060"
	if err := cfg.Validate(); !errors.Is(err, node.ErrInvalidConfig) || !strings.Contains(err.Error(), "--pprof-addr:") {
		t.Fatalf("Validate with a non-loopback --pprof-addr: %v", err)
	}
}
