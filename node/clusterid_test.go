package node_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"connectrpc.com/connect"

	"github.com/quorate/quorate/node"
	"github.com/quorate/quorate/node/nodetest"
	quoratev1 "github.com/quorate/quorate/proto/quorate/v1"
)

// clusterIDs returns each running node's recorded cluster ID, failing when
// they differ or one has none yet.
func clusterIDOf(c *nodetest.Cluster) (string, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	id := ""
	for i := range c.Len() {
		if !c.Running(i) {
			continue
		}
		st, err := c.Admin(i).NodeStatus(ctx, connect.NewRequest(&quoratev1.NodeStatusRequest{}))
		if err != nil {
			return "", err
		}
		got := st.Msg.GetNode().GetClusterId()
		if got == "" || id != "" && got != id {
			return "", fmt.Errorf("node %d has cluster ID %q, another %q", i, got, id)
		}
		id = got
	}
	cs, err := c.Admin(0).ClusterStatus(ctx, connect.NewRequest(&quoratev1.ClusterStatusRequest{}))
	if err != nil {
		return "", err
	}
	if cs.Msg.GetClusterId() != id {
		return "", fmt.Errorf("cluster status shows cluster ID %q, nodes %q", cs.Msg.GetClusterId(), id)
	}
	return id, nil
}

// syncBuffer is a log sink the test reads while nodes write to it.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

// A new cluster started on the node IDs and addresses of an old one whose
// node3 still runs neither takes the old cluster's state nor lets node3 in:
// node3's connections are refused, and the log names both cluster IDs.
func TestNewClusterOnOldAddressesIsNotJoinedByOldNode(t *testing.T) {
	a := nodetest.NewCluster(t, 3)
	applyPolicy(t, a, "from-a", 1000, time.Second, 1000)
	var idA string
	a.Eventually(t, 20*time.Second, "cluster A's ID on every node", func() (err error) {
		idA, err = clusterIDOf(a)
		return err
	})
	// node3 of A stays; nodes 1 and 2 of A go away, their data with them.
	a.Kill(0)
	a.Kill(1)

	logB := &syncBuffer{}
	b := nodetest.NewClusterWith(t, nodetest.Options{Nodes: 2, Configure: func(i int, cfg *node.Config) {
		cfg.APIAddr, cfg.RaftAddr = a.Config(i).APIAddr, a.Config(i).RaftAddr
		cfg.LogOutput = io.MultiWriter(cfg.LogOutput, logB)
	}})
	var idB string
	b.Eventually(t, 20*time.Second, "cluster B's ID on every node", func() (err error) {
		idB, err = clusterIDOf(b)
		return err
	})
	if idB == idA {
		t.Fatalf("cluster B has cluster A's ID %s", idA)
	}
	// node3 of A keeps asking B's nodes for votes: refused, and logged.
	b.Eventually(t, 30*time.Second, "a refusal of node3 naming both cluster IDs", func() error {
		for _, l := range strings.Split(logB.String(), "\n") {
			if strings.Contains(l, "refused a peer connection") && strings.Contains(l, idA) && strings.Contains(l, idB) {
				return nil
			}
		}
		return fmt.Errorf("no such log line yet")
	})
	// B serves with its own state only: A's policy is unknown there.
	applyPolicy(t, b, "from-b", 1000, time.Second, 1000)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	for i := range b.Len() {
		if _, err := b.Admin(i).GetPolicy(ctx, connect.NewRequest(&quoratev1.GetPolicyRequest{Name: "from-a"})); connect.CodeOf(err) != connect.CodeNotFound {
			t.Fatalf("node %d of B: cluster A's policy: %v, want not_found", i, err)
		}
		if _, err := admit(ctx, b, i, "from-b", "k", 1); err != nil {
			t.Fatalf("node %d of B: %v", i, err)
		}
		st, err := b.Admin(i).ClusterStatus(ctx, connect.NewRequest(&quoratev1.ClusterStatusRequest{}))
		if err != nil {
			t.Fatal(err)
		}
		if len(st.Msg.GetMembers()) != 2 {
			t.Fatalf("node %d of B sees members %v", i, st.Msg.GetMembers())
		}
	}
	// A node that recorded cluster A's ID cannot join B.
	_, err := b.Admin(1).Join(ctx, connect.NewRequest(&quoratev1.JoinRequest{
		Id: "node3", RaftAddr: a.Config(2).RaftAddr, ApiAddr: a.Config(2).APIAddr, FeatureLevel: node.FeatureLevel(), ClusterId: idA}))
	if connect.CodeOf(err) != connect.CodeFailedPrecondition || !strings.Contains(err.Error(), idA) || !strings.Contains(err.Error(), idB) {
		t.Fatalf("join of a node of cluster A: %v, want failed_precondition naming both cluster IDs", err)
	}
	// node3 of A is still in A, and knows nothing of B.
	st := a.Node(2).Status()
	if st.GetClusterId() != idA {
		t.Fatalf("node3 of A has cluster ID %q, want %q", st.GetClusterId(), idA)
	}
	if _, err := a.Admin(2).GetPolicy(ctx, connect.NewRequest(&quoratev1.GetPolicyRequest{Name: "from-b"})); connect.CodeOf(err) != connect.CodeNotFound {
		t.Fatalf("node3 of A: cluster B's policy: %v, want not_found", err)
	}
}

// A data directory whose cluster-id file holds no cluster ID is refused at
// start as a configuration error naming the file.
func TestClusterIDFileWithoutAnIDIsRefused(t *testing.T) {
	cfg := node.DefaultConfig()
	cfg.ID, cfg.DataDir, cfg.Bootstrap = "node1", t.TempDir(), true
	cfg.APIAddr, cfg.RaftAddr = "127.0.0.1:0", "127.0.0.1:0"
	cfg.LogOutput = io.Discard
	n, err := node.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	if err := n.Close(); err != nil {
		t.Fatal(err)
	}
	file := filepath.Join(cfg.DataDir, "cluster-id")
	if err := os.WriteFile(file, []byte("not-an-id\n"), 0o640); err != nil {
		t.Fatal(err)
	}
	n, err = node.New(cfg)
	if err == nil {
		n.Close()
		t.Fatal("a node started with a cluster-id file that holds no cluster ID")
	}
	if !errors.Is(err, node.ErrInvalidConfig) || !strings.Contains(err.Error(), file) || !strings.Contains(err.Error(), `"not-an-id"`) {
		t.Fatalf("got %v, want an invalid configuration naming %s and what it holds", err, file)
	}
}
