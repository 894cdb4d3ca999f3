package nodetest

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"connectrpc.com/connect"

	"github.com/quorate/quorate/certs"
	"github.com/quorate/quorate/node"
	quoratev1 "github.com/quorate/quorate/proto/quorate/v1"
	"github.com/quorate/quorate/proto/quorate/v1/quoratev1connect"
)

// Cluster is a set of in-process nodes. Node i (0-based) has ID "node<i+1>";
// node 0 bootstraps the cluster and the others join it. Methods are safe for
// concurrent use, but starting or stopping the same node from two
// goroutines at once is a test bug.
type Cluster struct {
	tb      testing.TB
	mu      sync.Mutex // guards member.node, cancel and done
	members []*member
	logs    *testLog
	client  *http.Client
	ca      *certs.DevCA // with Options.TLS
}

type member struct {
	cfg    node.Config
	node   *node.Node
	cancel context.CancelFunc
	done   chan error // Run's result
}

// Options change how NewClusterWith builds a cluster.
type Options struct {
	// Nodes is the number of nodes; 0 means 3.
	Nodes int
	// Configure, if set, may change each node's config before it starts.
	Configure func(i int, cfg *node.Config)
	// Token, if set, is sent as a bearer token by the cluster's own clients
	// (Admission, Admin, Lease, and the readiness checks): a caller with
	// both roles when the nodes have an access file.
	Token string
	// TLS starts the nodes with TLS on both ports, with certificates from a
	// development CA in the test's temporary directory (Cluster.CA); the
	// cluster's clients trust it and present its admin certificate.
	TLS bool

	_ struct{}
}

// NewCluster starts an n-node cluster and waits until it is ready (a leader
// is elected and every node is registered). The cluster is closed when the
// test ends.
func NewCluster(tb testing.TB, n int) *Cluster {
	tb.Helper()
	return NewClusterWith(tb, Options{Nodes: n})
}

// NewClusterWith is NewCluster with options.
func NewClusterWith(tb testing.TB, opts Options) *Cluster {
	tb.Helper()
	if opts.Nodes == 0 {
		opts.Nodes = 3
	}
	dir := tb.TempDir()
	var transport http.RoundTripper = &http.Transport{MaxIdleConnsPerHost: 256}
	if opts.Token != "" {
		transport = BearerTransport(transport, opts.Token)
	}
	c := &Cluster{tb: tb, logs: &testLog{w: tb.Output()}, client: &http.Client{Transport: transport}}
	tb.Cleanup(c.closeAll)
	if opts.TLS {
		c.useTLS(tb, filepath.Join(dir, "tls"), opts.Nodes)
	}
	for i := range opts.Nodes {
		cfg := node.DefaultConfig()
		cfg.ID = fmt.Sprintf("node%d", i+1)
		cfg.DataDir = filepath.Join(dir, cfg.ID)
		cfg.APIAddr = "127.0.0.1:0"
		cfg.RaftAddr = "127.0.0.1:0"
		cfg.HeartbeatTimeout = 500 * time.Millisecond
		cfg.ElectionTimeout = 500 * time.Millisecond
		cfg.LeaderLeaseTimeout = 250 * time.Millisecond
		cfg.LogOutput = c.logs
		cfg.LogLevel = "warn"
		cfg.Observer = new(Observer)
		if c.ca != nil {
			kp := c.ca.Nodes[cfg.ID]
			cfg.TLSCertFile, cfg.TLSKeyFile, cfg.TLSCAFile = kp.CertFile, kp.KeyFile, c.ca.CAFile
		}
		if i == 0 {
			cfg.Bootstrap = true
		} else {
			cfg.Join = c.members[0].cfg.APIAddr
			if a := c.members[0].cfg.AdminAddr; a != "" {
				cfg.Join = a // admin calls, Join among them, are served there
			}
		}
		if opts.Configure != nil {
			opts.Configure(i, &cfg)
		}
		c.members = append(c.members, &member{cfg: cfg})
		c.Start(i)
	}
	c.WaitReady(tb)
	return c
}

// BearerTransport returns a RoundTripper that sends token as a bearer token
// on every request through next.
func BearerTransport(next http.RoundTripper, token string) http.RoundTripper {
	return bearer{next: next, header: "Bearer " + token}
}

type bearer struct {
	next   http.RoundTripper
	header string
}

func (b bearer) RoundTrip(r *http.Request) (*http.Response, error) {
	r = r.Clone(r.Context())
	r.Header.Set("Authorization", b.header)
	return b.next.RoundTrip(r)
}

func (b bearer) CloseIdleConnections() {
	if c, ok := b.next.(interface{ CloseIdleConnections() }); ok {
		c.CloseIdleConnections()
	}
}

// Len is the number of nodes, running or not.
func (c *Cluster) Len() int { return len(c.members) }

// Node returns node i, or nil while it is stopped.
func (c *Cluster) Node(i int) *node.Node {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.members[i].node
}

// Running reports whether node i is running.
func (c *Cluster) Running(i int) bool { return c.Node(i) != nil }

// APIURL is node i's API base URL, http://127.0.0.1:port (https:// with
// Options.TLS); it stays the same across restarts.
func (c *Cluster) APIURL(i int) string {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.ca != nil {
		return "https://" + c.members[i].cfg.APIAddr
	}
	return "http://" + c.members[i].cfg.APIAddr
}

// CA is the development CA of a cluster started with Options.TLS (nil
// without): its directory also holds the admin and client callers'
// certificates, and certs.IssueDevCert issues more.
func (c *Cluster) CA() *certs.DevCA { return c.ca }

// HTTPClient is the HTTP client the cluster's service clients use: with
// Options.TLS it trusts the cluster's CA and presents its admin
// certificate.
func (c *Cluster) HTTPClient() *http.Client { return c.client }

// useTLS creates the cluster's development CA in dir, with a certificate
// for each of n nodes, and makes c.client trust it.
func (c *Cluster) useTLS(tb testing.TB, dir string, n int) {
	tb.Helper()
	ids := make([]string, n)
	for i := range ids {
		ids[i] = fmt.Sprintf("node%d", i+1)
	}
	ca, err := certs.NewDevCA(dir, ids, nil)
	if err != nil {
		tb.Fatalf("nodetest: development CA: %v", err)
	}
	src, err := certs.NewSource(certs.Options{CertFile: ca.Admin.CertFile, KeyFile: ca.Admin.KeyFile, CAFile: ca.CAFile, Interval: -1})
	if err != nil {
		tb.Fatalf("nodetest: client TLS files: %v", err)
	}
	cfg, err := src.ClientConfig(certs.ClientOptions{ServerName: "127.0.0.1"})
	if err != nil {
		tb.Fatalf("nodetest: client TLS config: %v", err)
	}
	c.ca = ca
	c.client = &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: 256, TLSClientConfig: cfg, ForceAttemptHTTP2: true}}
}

// Admission returns a client of node i's AdmissionService.
func (c *Cluster) Admission(i int) quoratev1connect.AdmissionServiceClient {
	return quoratev1connect.NewAdmissionServiceClient(c.client, c.APIURL(i))
}

// Admin returns a client of node i's AdminService: on its admin listener
// when it has one (node.Config.AdminAddr), else on its API port.
func (c *Cluster) Admin(i int) quoratev1connect.AdminServiceClient {
	return quoratev1connect.NewAdminServiceClient(c.client, c.AdminURL(i))
}

// AdminURL is the base URL of node i's admin API: its admin listener when
// it has one, else its API port.
func (c *Cluster) AdminURL(i int) string {
	c.mu.Lock()
	a := c.members[i].cfg.AdminAddr
	c.mu.Unlock()
	if a == "" {
		return c.APIURL(i)
	}
	if c.ca != nil {
		return "https://" + a
	}
	return "http://" + a
}

// Config returns node i's config, to change before the next Start (its
// addresses are the ones it bound on its first start).
func (c *Cluster) Config(i int) *node.Config { return &c.members[i].cfg }

// Lease returns a client of node i's LeaseService.
func (c *Cluster) Lease(i int) quoratev1connect.LeaseServiceClient {
	return quoratev1connect.NewLeaseServiceClient(c.client, c.APIURL(i))
}

// Start starts node i from its data directory, on the same addresses it had
// before (the first start picks free ports).
func (c *Cluster) Start(i int) {
	c.tb.Helper()
	c.mu.Lock()
	defer c.mu.Unlock()
	m := c.members[i]
	if m.node != nil {
		c.tb.Fatalf("nodetest: node %d is already running", i)
	}
	n, err := node.New(m.cfg)
	if err != nil {
		c.tb.Fatalf("nodetest: starting node %d: %v", i, err)
	}
	m.cfg.APIAddr, m.cfg.RaftAddr = n.APIAddr(), n.RaftAddr()
	if a := n.AdminAddr(); a != "" {
		m.cfg.AdminAddr = a
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	m.node, m.cancel, m.done = n, cancel, done
	go func() { done <- n.Run(ctx) }()
}

// Stop stops node i gracefully (as on SIGTERM) and waits until it has.
func (c *Cluster) Stop(i int) {
	c.tb.Helper()
	n, cancel, done := c.take(i)
	if n == nil {
		return
	}
	cancel()
	if err := <-done; err != nil {
		c.tb.Errorf("nodetest: node %d stopped with %v", i, err)
	}
}

// take marks node i stopped and returns what is needed to stop it.
func (c *Cluster) take(i int) (*node.Node, context.CancelFunc, chan error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	m := c.members[i]
	n, cancel, done := m.node, m.cancel, m.done
	m.node, m.cancel, m.done = nil, nil, nil
	return n, cancel, done
}

// Kill stops node i at once, as a crash would: no leadership hand-off, no
// waiting for requests in flight. Its data directory stays.
func (c *Cluster) Kill(i int) {
	c.tb.Helper()
	n, cancel, done := c.take(i)
	if n == nil {
		return
	}
	if err := n.Close(); err != nil {
		c.tb.Logf("nodetest: closing node %d: %v", i, err)
	}
	cancel()
	<-done
}

func (c *Cluster) closeAll() {
	for i := range c.members {
		c.Kill(i)
	}
	c.logs.stop()
	c.client.CloseIdleConnections()
}

// WaitReady waits until every running node sees the same leader, has
// registered itself, and knows the API address of every running member.
func (c *Cluster) WaitReady(tb testing.TB) {
	tb.Helper()
	c.Eventually(tb, 30*time.Second, "cluster ready", func() error {
		if err := c.registriesComplete(); err != nil {
			return err
		}
		leader := ""
		for i := range c.members {
			n := c.Node(i)
			if n == nil {
				continue
			}
			select {
			case <-n.Registered():
			default:
				return fmt.Errorf("node %d not registered", i)
			}
			st := n.Status()
			if st.GetLeaderId() == "" {
				return fmt.Errorf("node %d knows no leader", i)
			}
			if leader != "" && st.GetLeaderId() != leader {
				return fmt.Errorf("node %d sees leader %s, another sees %s", i, st.GetLeaderId(), leader)
			}
			leader = st.GetLeaderId()
		}
		return nil
	})
}

// registriesComplete checks that each running node's replica of the
// registry holds the API address of every member of its configuration.
func (c *Cluster) registriesComplete() error {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	for i := range c.members {
		if !c.Running(i) {
			continue
		}
		st, err := c.Admin(i).ClusterStatus(ctx, connect.NewRequest(&quoratev1.ClusterStatusRequest{}))
		if err != nil {
			return fmt.Errorf("node %d: cluster status: %w", i, err)
		}
		for _, m := range st.Msg.GetMembers() {
			if m.GetApiAddr() == "" {
				return fmt.Errorf("node %d does not know member %s's API address yet", i, m.GetId())
			}
		}
	}
	return nil
}

// Leader waits until a running node is leader and every running node agrees,
// and returns its index.
func (c *Cluster) Leader(tb testing.TB) int {
	tb.Helper()
	idx := -1
	c.Eventually(tb, 30*time.Second, "a leader", func() error {
		idx = -1
		var leaderID string
		for i := range c.members {
			n := c.Node(i)
			if n == nil {
				continue
			}
			st := n.Status()
			if st.GetRole() == "leader" {
				idx = i
			}
			if leaderID == "" {
				leaderID = st.GetLeaderId()
			} else if st.GetLeaderId() != leaderID {
				return errors.New("nodes disagree on the leader")
			}
		}
		if idx < 0 {
			return errors.New("no running node is leader")
		}
		if leaderID != c.members[idx].cfg.ID {
			return fmt.Errorf("nodes see %q as leader, %q says it leads", leaderID, c.members[idx].cfg.ID)
		}
		return nil
	})
	return idx
}

// Eventually polls cond until it returns nil or timeout passes, then fails
// the test with cond's last error.
func (c *Cluster) Eventually(tb testing.TB, timeout time.Duration, what string, cond func() error) {
	tb.Helper()
	Eventually(tb, timeout, what, cond)
}

// Eventually polls cond every few milliseconds until it returns nil, or
// fails tb with cond's last error once timeout has passed.
func Eventually(tb testing.TB, timeout time.Duration, what string, cond func() error) {
	tb.Helper()
	deadline := time.Now().Add(timeout)
	wait := time.Millisecond
	for {
		err := cond()
		if err == nil {
			return
		}
		if time.Now().After(deadline) {
			tb.Fatalf("nodetest: waiting for %s: %v", what, err)
		}
		t := time.NewTimer(wait)
		<-t.C
		wait = min(2*wait, 50*time.Millisecond)
	}
}

// testLog passes node logs to the test's output until the cluster is closed,
// then drops them (raft may log while shutting down).
type testLog struct {
	mu      sync.Mutex
	w       io.Writer
	stopped bool
}

func (l *testLog) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.stopped {
		return len(p), nil
	}
	return l.w.Write(p)
}

func (l *testLog) stop() {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.stopped = true
}
