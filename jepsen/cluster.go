package jepsen

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"connectrpc.com/connect"

	"github.com/quorate/quorate/certs"
	quoratev1 "github.com/quorate/quorate/proto/quorate/v1"
	"github.com/quorate/quorate/proto/quorate/v1/quoratev1connect"
)

const modulePath = "github.com/quorate/quorate"

// ClusterOptions configures StartCluster.
type ClusterOptions struct {
	Nodes      int           // number of nodes; default 3
	ModuleRoot string        // directory of Quorate's go.mod; found from the working directory when empty
	Binary     string        // prebuilt quorate binary; built into WorkDir when empty
	WorkDir    string        // data dirs and the binary; required
	LogDir     string        // node log files; default WorkDir
	ReadyWait  time.Duration // how long to wait for the cluster to form; default 30s
	ExtraArgs  []string      // appended to every `quorate serve`
	BuildTags  string        // -tags for building the binary, e.g. quorate_planted_bug
	// Net is how Partition cuts the network: "nftables" (nodes in a private
	// network namespace, on 127.0.0.11, .12, …; needs root), "proxy" (a
	// userspace TCP proxy per pair of nodes), or "" / "auto": nftables when
	// running as root and a namespace with nftables rules can be set up,
	// else proxy (LogDir/network.log says why).
	Net string
	// Spare reserves addresses (and network paths) for this many more
	// nodes, started later by AddNode; they are in Nodes from the start but
	// not members until added.
	Spare int
	// TLS serves both ports of every node with TLS: StartCluster makes a
	// throwaway CA in WorkDir/tls with a certificate per node, and the
	// harness's clients verify the nodes against it (CheckTLS checks).
	TLS bool
}

// Node is one quorate serve process.
type Node struct {
	ID       string
	APIAddr  string
	RaftAddr string
	DataDir  string
	LogPath  string

	mu        sync.Mutex
	state     nodeState
	cmd       *exec.Cmd
	done      chan struct{}
	paused    bool
	offset    time.Duration // clock offset, kept across restarts
	clockFile string        // --debug-clock-file: offset's home
	binary    string        // this node's binary when not the cluster's (SetNodeBinary)
	args      []string      // appended to this node's `quorate serve` (SetNodeBinary)
}

// Cluster is a set of running node processes.
type Cluster struct {
	// Nodes is every node slot, spares (ClusterOptions.Spare) included; it
	// never changes after StartCluster, so an index names one node for the
	// cluster's life. Live says which are members.
	Nodes  []*Node
	binary string
	opts   ClusterOptions
	http   *http.Client
	tls    *clusterTLS // nil: plaintext

	membersMu sync.Mutex            // serializes AddNode and Retire
	live      atomic.Pointer[[]int] // indexes of the members, ascending
	turn      atomic.Uint64         // nextMember's

	net     network
	netMode string

	netLogMu   sync.Mutex
	netLogPath string
}

// FindModuleRoot walks up from dir to the directory whose go.mod declares Quorate's module.
func FindModuleRoot(dir string) (string, error) {
	dir, err := filepath.Abs(dir)
	if err != nil {
		return "", err
	}
	for {
		if f, err := os.Open(filepath.Join(dir, "go.mod")); err == nil {
			sc := bufio.NewScanner(f)
			for sc.Scan() {
				if strings.TrimSpace(sc.Text()) == "module "+modulePath {
					f.Close()
					return dir, nil
				}
			}
			f.Close()
		}
		parent := filepath.Dir(dir)
		if parent == dir {
			return "", errors.New("jepsen: module root of " + modulePath + " not found")
		}
		dir = parent
	}
}

// BuildBinary builds ./cmd/quorate from root into out, with the given build
// tags (none when empty).
func BuildBinary(ctx context.Context, root, out, tags string) error {
	cmd := exec.CommandContext(ctx, "go", "build", "-tags", tags, "-o", out, "./cmd/quorate")
	cmd.Dir = root
	if b, err := cmd.CombinedOutput(); err != nil {
		return fmt.Errorf("jepsen: go build: %v\n%s", err, b)
	}
	return nil
}

// reservePort listens on a free loopback port; its address is the
// caller's once it closes the listener. Holding every reserved listener
// open until all the ports are picked keeps the system from handing one
// port out twice (a port closed at once can be the next one picked).
func reservePort() (net.Listener, error) {
	return net.Listen("tcp", "127.0.0.1:0")
}

// StartCluster builds the binary (unless given), starts the nodes and waits until
// node 0 reports a leader and every member answering.
func StartCluster(ctx context.Context, opts ClusterOptions) (*Cluster, error) {
	if opts.Nodes == 0 {
		opts.Nodes = 3
	}
	if opts.WorkDir == "" {
		return nil, errors.New("jepsen: WorkDir required")
	}
	if opts.LogDir == "" {
		opts.LogDir = opts.WorkDir
	}
	if opts.ReadyWait == 0 {
		opts.ReadyWait = 30 * time.Second
	}
	if err := os.MkdirAll(opts.LogDir, 0o755); err != nil {
		return nil, err
	}
	c := &Cluster{opts: opts, binary: opts.Binary, netLogPath: filepath.Join(opts.LogDir, "network.log")}
	if err := c.setUpNetwork(); err != nil {
		return nil, err
	}
	if c.binary == "" {
		root := opts.ModuleRoot
		if root == "" {
			var err error
			if root, err = FindModuleRoot("."); err != nil {
				return nil, err
			}
		}
		c.binary = filepath.Join(opts.WorkDir, "quorate")
		if err := BuildBinary(ctx, root, c.binary, opts.BuildTags); err != nil {
			c.net.close()
			return nil, err
		}
	}
	var members []int
	for i := range opts.Nodes + opts.Spare {
		api, raftAddr := c.net.addrs(i)
		id := fmt.Sprintf("n%d", i+1)
		n := &Node{ID: id, APIAddr: api, RaftAddr: raftAddr,
			DataDir: filepath.Join(opts.WorkDir, id), LogPath: filepath.Join(opts.LogDir, id+".log"),
			clockFile: filepath.Join(opts.WorkDir, id+".clock")}
		if i < opts.Nodes {
			n.state = nodeMember
			members = append(members, i)
		}
		c.Nodes = append(c.Nodes, n)
	}
	c.live.Store(&members)
	if opts.TLS {
		if err := c.setUpTLS(); err != nil {
			c.net.close()
			return nil, err
		}
	}
	var harness *certs.Source
	if c.tls != nil {
		harness = c.tls.src
	}
	c.http = newHTTPClient(c.net.dialContext, harness)
	for _, i := range members {
		if err := c.start(i); err != nil {
			c.Stop()
			return nil, err
		}
		if i == 0 { // the others join through node 0's API, so it must be serving first
			if err := c.waitReady(ctx, []int{0}, 1, opts.ReadyWait); err != nil {
				c.Stop()
				return nil, err
			}
		}
	}
	if err := c.WaitReady(ctx); err != nil {
		c.Stop()
		return nil, fmt.Errorf("%w%s", err, c.logTails(30))
	}
	return c, nil
}

// logTails returns the last lines of every node's log, for an error that
// would otherwise leave no trace once the work directory is gone.
func (c *Cluster) logTails(lines int) string {
	var b strings.Builder
	for _, n := range c.Nodes {
		data, err := os.ReadFile(n.LogPath)
		if err != nil {
			continue // a spare never started
		}
		all := strings.Split(strings.TrimRight(string(data), "\n"), "\n")
		fmt.Fprintf(&b, "\n--- %s log (last %d lines):\n%s", n.ID, lines, strings.Join(all[max(0, len(all)-lines):], "\n"))
	}
	return b.String()
}

// start starts node i's process: node 0 with --bootstrap, the others with
// --join pointing at a member (both ignored by a node that has state). A
// retired node is never started again.
func (c *Cluster) start(i int) error {
	n := c.Nodes[i]
	args := []string{"serve", "--id", n.ID, "--data-dir", n.DataDir,
		"--api-addr", n.APIAddr, "--raft-addr", n.RaftAddr}
	if i == 0 {
		args = append(args, "--bootstrap")
	} else {
		args = append(args, "--join", c.Nodes[c.joinVia(i)].APIAddr)
	}
	n.mu.Lock()
	err := writeClockFile(n.clockFile, n.offset)
	retired := n.state == nodeRetired
	binary, nodeArgs := c.binary, n.args
	if n.binary != "" {
		binary = n.binary
	}
	n.mu.Unlock()
	if retired {
		return fmt.Errorf("jepsen: %s was removed from the cluster: not restarting it", n.ID)
	}
	if err != nil {
		return err
	}
	args = append(args, "--debug-clock-file", n.clockFile)
	args = append(args, c.tlsArgs(n)...)
	args = append(args, c.opts.ExtraArgs...)
	args = append(args, nodeArgs...)
	logf, err := os.OpenFile(n.LogPath, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return err
	}
	fmt.Fprintf(logf, "=== jepsen: %s start %s\n", time.Now().Format(time.RFC3339Nano), strings.Join(args, " "))
	cmd := c.net.command(i, binary, args)
	cmd.Stdout, cmd.Stderr = logf, logf
	if err := cmd.Start(); err != nil {
		logf.Close()
		return fmt.Errorf("jepsen: start %s: %w", n.ID, err)
	}
	done := make(chan struct{})
	go func() {
		_ = cmd.Wait()
		logf.Close()
		close(done)
	}()
	n.mu.Lock()
	n.cmd, n.done, n.paused = cmd, done, false
	n.mu.Unlock()
	return nil
}

// Running reports whether node i's process is alive (paused counts as alive).
func (c *Cluster) Running(i int) bool {
	n := c.Nodes[i]
	n.mu.Lock()
	defer n.mu.Unlock()
	if n.done == nil {
		return false
	}
	select {
	case <-n.done:
		return false
	default:
		return true
	}
}

// SetNodeBinary makes node i run binary (the cluster's when empty), with
// args appended to its `quorate serve` from its next start on: a rolling
// upgrade stops a node (StopNode) and starts it again (Restart) on the new
// binary with the same data dir and ports.
func (c *Cluster) SetNodeBinary(i int, binary string, args ...string) {
	n := c.Nodes[i]
	n.mu.Lock()
	n.binary, n.args = binary, args
	n.mu.Unlock()
}

// Heal heals the network, resumes paused nodes and restarts dead ones.
func (c *Cluster) Heal() error {
	errs := []error{c.HealNetwork()}
	for _, i := range c.Live() {
		n := c.Nodes[i]
		n.mu.Lock()
		paused := n.paused
		n.mu.Unlock()
		if paused {
			errs = append(errs, c.Resume(i))
		}
		if !c.Running(i) {
			errs = append(errs, c.start(i))
		}
	}
	return errors.Join(errs...)
}

// Stop resumes paused nodes, sends SIGTERM to all and waits; stragglers get
// SIGKILL. Then it tears the network down (namespace or proxies).
func (c *Cluster) Stop() {
	defer c.closeNetwork()
	for i, n := range c.Nodes {
		if !c.Running(i) {
			continue
		}
		_ = c.signal(i, syscall.SIGCONT)
		_ = c.signal(i, syscall.SIGTERM)
		n.mu.Lock()
		n.paused = false
		n.mu.Unlock()
	}
	for i := range c.Nodes {
		if c.Running(i) && c.wait(i, 10*time.Second) != nil {
			_ = c.Kill(i)
		}
	}
}

// HTTPClient is the harness's client of the nodes' APIs (what Admission,
// Admin and Lease use). In nftables mode it is the only way in: the nodes
// live in their own network namespace.
func (c *Cluster) HTTPClient() *http.Client { return c.http }

// Admin returns an AdminService client for node i.
func (c *Cluster) Admin(i int) quoratev1connect.AdminServiceClient {
	return quoratev1connect.NewAdminServiceClient(c.http, c.url(i))
}

// Admission returns an AdmissionService client for node i.
func (c *Cluster) Admission(i int) quoratev1connect.AdmissionServiceClient {
	return quoratev1connect.NewAdmissionServiceClient(c.http, c.url(i))
}

// Status asks node i for the cluster status with a short deadline.
func (c *Cluster) Status(ctx context.Context, i int) (*quoratev1.ClusterStatusResponse, error) {
	ctx, cancel := context.WithTimeout(ctx, 2*time.Second)
	defer cancel()
	resp, err := c.Admin(i).ClusterStatus(ctx, connect.NewRequest(&quoratev1.ClusterStatusRequest{}))
	if err != nil {
		return nil, err
	}
	return resp.Msg, nil
}

// Leader returns the index of the leader as some member sees it.
func (c *Cluster) Leader(ctx context.Context) (int, error) {
	var lastErr error = errors.New("jepsen: no node knows a leader")
	for _, i := range c.Live() {
		st, err := c.Status(ctx, i)
		if err != nil {
			lastErr = err
			continue
		}
		for j, n := range c.Nodes {
			if st.GetLeaderId() != "" && n.ID == st.GetLeaderId() {
				return j, nil
			}
		}
	}
	return -1, lastErr
}

// WaitReady polls the members in turn until one reports a leader and every
// member (Live) answering.
func (c *Cluster) WaitReady(ctx context.Context) error {
	live := c.Live()
	return c.waitReady(ctx, live, len(live), c.opts.ReadyWait)
}

// waitReady polls the nodes via in turn until one reports a leader and
// want members, all answering.
func (c *Cluster) waitReady(ctx context.Context, via []int, want int, d time.Duration) error {
	deadline := time.Now().Add(d)
	var last string
	for poll := 0; ; poll++ {
		st, err := c.Status(ctx, via[poll%len(via)])
		if err != nil {
			last = err.Error()
		} else {
			answered := 0
			for _, m := range st.GetMembers() {
				if m.GetStatus() != nil {
					answered++
				}
			}
			if st.GetLeaderId() != "" && len(st.GetMembers()) == want && answered == want {
				return nil
			}
			last = fmt.Sprintf("leader=%q members=%d answered=%d", st.GetLeaderId(), len(st.GetMembers()), answered)
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("jepsen: cluster not ready after %v: %s", d, last)
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(100 * time.Millisecond):
		}
	}
}
