package jepsen

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"connectrpc.com/connect"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/durationpb"

	quoratev1 "github.com/quorate/quorate/proto/quorate/v1"
)

// fastElections makes a partitioned cluster elect within about a second.
var fastElections = []string{"--heartbeat-timeout", "500ms", "--election-timeout", "500ms", "--leader-lease-timeout", "250ms"}

// startNetCluster starts 3 real nodes whose network is cut by mode,
// skipping the test when nftables mode cannot work here.
func startNetCluster(t *testing.T, mode string) *Cluster {
	t.Helper()
	return startTestCluster(t, ClusterOptions{Net: mode})
}

// startTestCluster starts 3 real nodes (with opts' network mode, spares and
// TLS) electing fast, and applies the test policy.
func startTestCluster(t *testing.T, opts ClusterOptions) *Cluster {
	t.Helper()
	mode := opts.Net
	if testing.Short() {
		t.Skip("starts a real 3-node cluster")
	}
	if mode == NetNftables {
		if os.Geteuid() != 0 {
			t.Skip("nftables mode needs root")
		}
		if err := probeNftables(); err != nil {
			t.Skipf("nftables mode does not work here: %v", err)
		}
	}
	dir := t.TempDir()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	opts.Nodes, opts.WorkDir, opts.ExtraArgs = 3, dir, fastElections
	c, err := StartCluster(ctx, opts)
	if err != nil {
		t.Fatalf("StartCluster: %v", err)
	}
	t.Cleanup(func() {
		stopStart := time.Now()
		c.Stop()
		t.Logf("stopped in %v", time.Since(stopStart))
		if t.Failed() {
			for _, n := range c.Nodes {
				b, _ := os.ReadFile(n.LogPath)
				t.Logf("%s log:\n%s", n.ID, tail(string(b), 40))
			}
			b, _ := os.ReadFile(filepath.Join(dir, "network.log"))
			t.Logf("network.log:\n%s", b)
		}
	})
	if mode != "" && c.NetMode() != mode {
		t.Fatalf("NetMode %q, want %q", c.NetMode(), mode)
	}
	applyTestPolicy(t, c)
	return c
}

func tail(s string, lines int) string {
	l := strings.Split(s, "\n")
	return strings.Join(l[max(0, len(l)-lines):], "\n")
}

const netPolicy = "net-test"

func applyTestPolicy(t *testing.T, c *Cluster) {
	t.Helper()
	req := &quoratev1.ApplyPoliciesRequest{Policies: []*quoratev1.Policy{{Name: netPolicy, Algorithm: "token_bucket",
		Limit: 1000, Burst: proto.Int64(1000), Period: durationpb.New(time.Hour), DedupeRetention: durationpb.New(time.Hour)}}}
	eventually(t, 20*time.Second, "policy applied", func() error {
		ctx, cancel := context.WithTimeout(context.Background(), 3*time.Second)
		defer cancel()
		_, err := c.Admin(0).ApplyPolicies(ctx, connect.NewRequest(req))
		return err
	})
}

// eventually polls cond until it returns nil, failing the test with its
// last error after d.
func eventually(t *testing.T, d time.Duration, what string, cond func() error) {
	t.Helper()
	deadline := time.Now().Add(d)
	for {
		err := cond()
		if err == nil {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("after %v, no %s: %v", d, what, err)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

var requestSeq atomic.Int64

// admit asks node i once for one unit under a fresh request ID.
func admit(c *Cluster, i int, timeout time.Duration) (*quoratev1.AdmitResponse, error) {
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	resp, err := c.Admission(i).Admit(ctx, connect.NewRequest(&quoratev1.AdmitRequest{Policy: netPolicy, Key: "k",
		Caller: "net-test", RequestId: fmt.Sprintf("net-%d", requestSeq.Add(1))}))
	if err != nil {
		return nil, err
	}
	if !resp.Msg.GetAllowed() {
		return nil, fmt.Errorf("denied: %v", resp.Msg)
	}
	return resp.Msg, nil
}

// agreedLeader returns the leader every node in nodes names, asking each
// for its own view (NodeStatus: it waits for no other node).
func agreedLeader(c *Cluster, nodes ...int) (string, error) {
	leader := ""
	for _, i := range nodes {
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		resp, err := c.Admin(i).NodeStatus(ctx, connect.NewRequest(&quoratev1.NodeStatusRequest{}))
		cancel()
		if err != nil {
			return "", fmt.Errorf("%s: %w", c.Nodes[i].ID, err)
		}
		switch l := resp.Msg.GetNode().GetLeaderId(); {
		case l == "":
			return "", fmt.Errorf("%s knows no leader", c.Nodes[i].ID)
		case leader != "" && l != leader:
			return "", fmt.Errorf("%s sees %s, another node %s", c.Nodes[i].ID, l, leader)
		default:
			leader = l
		}
	}
	return leader, nil
}

// whole checks every node's ClusterStatus names the same leader, with every
// member answering.
func whole(c *Cluster) error {
	leader := ""
	for i, n := range c.Nodes {
		st, err := c.Status(context.Background(), i)
		if err != nil {
			return fmt.Errorf("%s: %w", n.ID, err)
		}
		if st.GetLeaderId() == "" || leader != "" && st.GetLeaderId() != leader {
			return fmt.Errorf("%s sees leader %q, another node %q", n.ID, st.GetLeaderId(), leader)
		}
		leader = st.GetLeaderId()
		for _, m := range st.GetMembers() {
			if m.GetStatus() == nil {
				return fmt.Errorf("%s cannot reach %s: %s", n.ID, m.GetId(), m.GetError())
			}
		}
	}
	return nil
}

func indexOf(c *Cluster, id string) int {
	for i, n := range c.Nodes {
		if n.ID == id {
			return i
		}
	}
	return -1
}

func TestPartitionIsolatesTheLeader(t *testing.T) {
	for _, mode := range []string{NetNftables, NetProxy} {
		t.Run(mode, func(t *testing.T) {
			start := time.Now()
			c := startNetCluster(t, mode)
			if mode == NetNftables {
				checkNodeProcesses(t, c)
			}
			var oldLeader string
			eventually(t, 20*time.Second, "agreed leader", func() (err error) {
				oldLeader, err = agreedLeader(c, 0, 1, 2)
				return err
			})
			old := indexOf(c, oldLeader)
			var majority []int
			for i := range c.Nodes {
				if i != old {
					majority = append(majority, i)
				}
			}

			t.Logf("started: %v", time.Since(start))
			if err := c.Partition(IsolateGrudge(3, old)); err != nil {
				t.Fatal(err)
			}
			eventually(t, 15*time.Second, "new leader in the majority", func() error {
				l, err := agreedLeader(c, majority...)
				if err == nil && l == oldLeader {
					err = fmt.Errorf("the majority still follows the isolated %s", l)
				}
				return err
			})
			eventually(t, 10*time.Second, "admit through the majority", func() error {
				_, err := admit(c, majority[0], 3*time.Second)
				return err
			})
			t.Logf("new leader, admitted: %v", time.Since(start))
			if resp, err := admit(c, old, time.Second); err == nil {
				t.Fatalf("the isolated old leader admitted: %v", resp)
			} else {
				t.Logf("isolated %s answered: %v", oldLeader, err)
			}
			if _, err := admit(c, majority[1], 5*time.Second); err != nil {
				t.Fatalf("admit through the majority's other node: %v", err)
			}

			if err := c.HealNetwork(); err != nil {
				t.Fatal(err)
			}
			t.Logf("healing: %v", time.Since(start))
			eventually(t, 20*time.Second, "one leader for all after healing", func() error { return whole(c) })
			t.Logf("healed: %v", time.Since(start))
			eventually(t, 10*time.Second, "admit through the old leader after healing", func() error {
				_, err := admit(c, old, 3*time.Second)
				return err
			})
			t.Logf("%s mode: %v", mode, time.Since(start))
		})
	}
}

// checkNodeProcesses checks that each node's process is the quorate binary
// itself (ip netns exec execs it), so kill -9 and SIGSTOP reach the node.
func checkNodeProcesses(t *testing.T, c *Cluster) {
	t.Helper()
	for i, n := range c.Nodes {
		n.mu.Lock()
		pid := n.cmd.Process.Pid
		n.mu.Unlock()
		exe, err := os.Readlink(fmt.Sprintf("/proc/%d/exe", pid))
		if err != nil || exe != c.binary {
			t.Errorf("node %d: process %d runs %q (%v), want %s", i, pid, exe, err, c.binary)
		}
	}
}

// With the proxy, a one-way cut is one-way: the leader's messages no longer
// reach the follower, which loses its leader and asks for votes; those
// requests still reach the leader, which turns them down. The leader keeps
// its quorum through the third node.
func TestPartitionOneWayFromTheLeader(t *testing.T) {
	start := time.Now()
	c := startNetCluster(t, NetProxy)
	var leaderID string
	eventually(t, 20*time.Second, "agreed leader", func() (err error) {
		leaderID, err = agreedLeader(c, 0, 1, 2)
		return err
	})
	leader := indexOf(c, leaderID)
	cut, third := (leader+1)%3, (leader+2)%3
	logStart := fileSize(c.Nodes[leader].LogPath)

	if err := c.Partition(OneWayGrudge(leader, cut)); err != nil {
		t.Fatal(err)
	}
	eventually(t, 15*time.Second, "the cut follower losing its leader", func() error {
		st, err := c.Status(context.Background(), cut)
		if err != nil {
			return err
		}
		if st.GetLeaderId() != "" {
			return fmt.Errorf("%s still follows %s", c.Nodes[cut].ID, st.GetLeaderId())
		}
		return nil
	})
	eventually(t, 15*time.Second, "the leader hearing the cut follower's vote requests", func() error {
		b, err := os.ReadFile(c.Nodes[leader].LogPath)
		if err != nil {
			return err
		}
		for _, line := range strings.Split(string(b[min(logStart, int64(len(b))):]), "\n") {
			if strings.Contains(line, "since we have a leader") && strings.Contains(line, "from="+c.Nodes[cut].RaftAddr) {
				return nil
			}
		}
		return errors.New("no vote request from the cut follower in the leader's log")
	})
	if l, err := agreedLeader(c, leader, third); err != nil || l != leaderID {
		t.Fatalf("leader and third node: %q, %v; want %s kept", l, err, leaderID)
	}
	if _, err := admit(c, third, 5*time.Second); err != nil {
		t.Fatalf("admit through the third node: %v", err)
	}

	if err := c.HealNetwork(); err != nil {
		t.Fatal(err)
	}
	eventually(t, 20*time.Second, "one leader for all after healing", func() error { return whole(c) })
	t.Logf("took %v", time.Since(start))
}

func fileSize(path string) int64 {
	fi, err := os.Stat(path)
	if err != nil {
		return 0
	}
	return fi.Size()
}
