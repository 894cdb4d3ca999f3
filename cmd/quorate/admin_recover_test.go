package main

import (
	"bytes"
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/quorate/quorate/node"
	"github.com/quorate/quorate/node/nodetest"
)

// runRecover runs `quorate admin recover` with stdin as its input.
func runRecover(stdin string, args ...string) (string, error) {
	var out, errOut bytes.Buffer
	root := newRootCmd(&out, &errOut)
	root.SetIn(strings.NewReader(stdin))
	root.SetArgs(append([]string{"admin", "recover"}, args...))
	err := root.ExecuteContext(context.Background())
	return out.String() + errOut.String(), err
}

// admin recover refuses a running node's directory and one that is not a
// node's; on a stopped node's it says what can be lost, asks, changes
// nothing when not told yes, and with --yes leaves a node that starts
// alone as the only voter of its groups.
func TestAdminRecover(t *testing.T) {
	c := nodetest.NewClusterWith(t, nodetest.Options{Nodes: 1, Configure: func(_ int, cfg *node.Config) { cfg.DataGroups = 2 }})
	dir := c.Config(0).DataDir

	out, err := runRecover("", "--data-dir", dir, "--yes")
	if !errors.Is(err, node.ErrNodeRunning) || !strings.Contains(err.Error(), "stop the node first") {
		t.Fatalf("on a running node: %v\n%s", err, out)
	}
	if _, err := runRecover("", "--data-dir", t.TempDir(), "--yes"); !errors.Is(err, node.ErrNotNodeDir) {
		t.Fatalf("on an empty directory: %v", err)
	}
	if _, err := runRecover(""); err == nil || !strings.Contains(err.Error(), "--data-dir") {
		t.Fatalf("without --data-dir: %v", err)
	}

	c.Stop(0)
	out, err = runRecover("no\n", "--data-dir", dir)
	if !errors.Is(err, node.ErrRecoveryDeclined) {
		t.Fatalf("answered no: %v\n%s", err, out)
	}
	for _, want := range []string{"meta group", "data group 1", "data group 2", "What can be lost", "Type yes"} {
		if !strings.Contains(out, want) {
			t.Errorf("the plan does not say %q:\n%s", want, out)
		}
	}
	out, err = runRecover("yes\n", "--data-dir", dir)
	if err != nil || !strings.Contains(out, "Recovered: node node1 is the only voter of 3 group(s)") {
		t.Fatalf("answered yes: %v\n%s", err, out)
	}

	c.Config(0).Bootstrap = false
	c.Start(0)
	c.Eventually(t, 30*time.Second, "the node leads every group", func() error {
		st := c.Node(0).Status()
		if st.GetRole() != "leader" {
			return errors.New("not the meta leader")
		}
		led := 0
		for _, g := range st.GetGroups() {
			if g.GetId() != 0 && g.GetRole() == "leader" {
				led++
			}
		}
		if led != 2 {
			return errors.New("not every data group led")
		}
		return nil
	})
}
