package devcluster

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"sync"
	"time"

	"github.com/quorate/quorate/node"
	quoratev1 "github.com/quorate/quorate/proto/quorate/v1"
)

// Config is the cluster to run: the fields of `quorate dev`'s flags, which
// the CLI validates.
type Config struct {
	// Dir holds the nodes' state (Dir/node1, ...), the record of the
	// cluster and, with TLS, its CA.
	Dir string
	// Nodes is the number of nodes (1 to 9); a restarted cluster may grow.
	Nodes int
	// Groups is the number of data groups of a new cluster (0: every key
	// in the meta group). A restart keeps the cluster's: Start refuses
	// another value when GroupsGiven.
	Groups      int
	GroupsGiven bool
	// APIPort and RaftPort are node1's ports; node i uses port+i-1.
	APIPort, RaftPort int
	// LogLevel is the nodes' log level; Logs, which several nodes share
	// (Start serializes their writes), takes their logs and Start's
	// warnings.
	LogLevel string
	Logs     io.Writer
	// Heartbeat is the nodes' Raft heartbeat and election timeout; the
	// leader lease is at most it.
	Heartbeat time.Duration
	// ReadyTimeout bounds Ready, from Start.
	ReadyTimeout time.Duration
	// TLS serves TLS on every port (mutual TLS between nodes) with a
	// throwaway CA in Dir/tls.
	TLS bool
	// PprofAddr is node1's profiling endpoint, which profiles every node
	// of the process ("": none).
	PprofAddr string
	// MemoryLimit is the soft memory limit of the process (the nodes'
	// node.Config.MemoryLimit; the caller applies it to the runtime).
	MemoryLimit int64
	// EnvoyConfig, EnvoyHeaders and EnvoyDedupe configure every node's
	// Envoy rate-limit service, as serve's flags do.
	EnvoyConfig               []string
	EnvoyHeaders, EnvoyDedupe bool
}

// nodeID names node i (from 1).
func nodeID(i int) string { return fmt.Sprintf("node%d", i) }

// nodeConfig is the configuration of node i (from 1), joining join.
func (cfg Config) nodeConfig(i int, logs io.Writer, join string, t *TLSFiles) node.Config {
	c := node.DefaultConfig()
	c.ID = nodeID(i)
	c.DataDir = filepath.Join(cfg.Dir, c.ID)
	c.APIAddr = fmt.Sprintf("127.0.0.1:%d", cfg.APIPort+i-1)
	c.RaftAddr = fmt.Sprintf("127.0.0.1:%d", cfg.RaftPort+i-1)
	c.Bootstrap = i == 1
	c.Join = join
	c.LogOutput = logs
	c.LogLevel = cfg.LogLevel
	c.HeartbeatTimeout, c.ElectionTimeout = cfg.Heartbeat, cfg.Heartbeat
	c.LeaderLeaseTimeout = min(c.LeaderLeaseTimeout, cfg.Heartbeat)
	c.DataGroups, c.ExpectNodes = cfg.Groups, cfg.Nodes
	c.MemoryLimit = cfg.MemoryLimit // one process: one limit for every node
	c.EnvoyConfig, c.EnvoyHeaders, c.EnvoyDedupeRequestID = cfg.EnvoyConfig, cfg.EnvoyHeaders, cfg.EnvoyDedupe
	if i == 1 {
		c.PprofAddr = cfg.PprofAddr // one process: one endpoint profiles every node
	}
	if t != nil {
		kp := t.nodes[c.ID]
		c.TLSCertFile, c.TLSKeyFile, c.TLSCAFile = kp.CertFile, kp.KeyFile, t.CA
	}
	return c
}

// Cluster is a running cluster: its nodes, each in its own goroutine, until
// Stop; it notices when one stops on its own (Failed).
type Cluster struct {
	cfg       Config
	start     time.Time
	nodes     []*node.Node
	tls       *TLSFiles // nil without TLS
	hc        *http.Client
	logs      *Output // cfg.Logs, shared by the nodes
	restarted bool    // Dir held a cluster's state
	recorded  bool    // and the record of how it was created

	status   *quoratev1.ClusterStatusResponse // set by Ready
	policies []*quoratev1.Policy              // set by Ready

	ctx    context.Context // the nodes' Run context
	cancel context.CancelFunc
	wg     sync.WaitGroup
	failed chan struct{} // closed when a node stops before it was asked to

	mu      sync.Mutex
	errs    []error // errors of nodes asked to stop
	failErr error   // the first node that stopped on its own
}

// Start starts the nodes of cfg (a restart when cfg.Dir holds a cluster's
// state: then the cluster keeps its data groups, and Start refuses another
// cfg.Groups when cfg.GroupsGiven), which run until ctx ends or Stop. It
// does not wait for them to form a cluster: Ready does. On an error every
// node started is stopped.
func Start(ctx context.Context, cfg Config) (*Cluster, error) {
	c := &Cluster{cfg: cfg, start: time.Now(), failed: make(chan struct{}), hc: http.DefaultClient}
	c.restarted = dirHasEntries(filepath.Join(cfg.Dir, nodeID(1)))
	rec, recorded, err := readRecord(cfg.Dir)
	if err != nil {
		return nil, err
	}
	c.recorded = recorded
	if c.restarted && recorded {
		if cfg.GroupsGiven && cfg.Groups != rec.Groups {
			return nil, fmt.Errorf("dev: --groups %d: the cluster in %s was created with --groups %d, and a restarted cluster keeps "+
				"its data groups (see them with quorate admin status); restart it without --groups, or give another --dir "+
				"for a new cluster with %d groups", cfg.Groups, cfg.Dir, rec.Groups, cfg.Groups)
		}
		c.cfg.Groups = rec.Groups // every node, new ones too, gets the cluster's value
	}
	if cfg.TLS {
		ids := make([]string, cfg.Nodes)
		for i := range ids {
			ids[i] = nodeID(i + 1)
		}
		if c.tls, err = openTLS(filepath.Join(cfg.Dir, "tls"), ids); err != nil {
			return nil, err
		}
		if c.hc, err = c.tls.httpClient(); err != nil {
			return nil, err
		}
	}
	c.logs = &Output{to: cfg.Logs}
	c.ctx, c.cancel = context.WithCancel(ctx)
	for i := 1; i <= cfg.Nodes; i++ {
		join := ""
		if i > 1 {
			join = c.nodes[0].APIAddr()
		}
		nc := c.cfg.nodeConfig(i, c.logs, join, c.tls)
		if err := nc.Validate(); err != nil {
			return nil, errors.Join(fmt.Errorf("dev: %s: %w", nc.ID, err), c.Stop())
		}
		n, err := node.New(nc)
		if err != nil {
			return nil, errors.Join(fmt.Errorf("dev: starting %s (API %s, Raft %s; see --api-port, --raft-port, --dir): %w",
				nc.ID, nc.APIAddr, nc.RaftAddr, err), c.Stop())
		}
		c.nodes = append(c.nodes, n)
		c.run(nc.ID, n)
	}
	return c, nil
}

// run runs n until the cluster stops.
func (c *Cluster) run(id string, n *node.Node) {
	c.wg.Add(1)
	go func() {
		defer c.wg.Done()
		err := n.Run(c.ctx)
		c.mu.Lock()
		defer c.mu.Unlock()
		if c.ctx.Err() != nil {
			if err != nil {
				c.errs = append(c.errs, fmt.Errorf("dev: %s: %w", id, err))
			}
			return
		}
		if err == nil {
			err = errors.New("stopped unexpectedly")
		}
		if c.failErr == nil {
			c.failErr = fmt.Errorf("dev: %s: %w", id, err)
			close(c.failed)
		}
	}()
}

// Ready waits, until cfg.ReadyTimeout from Start, for a leader, every node
// and, with data groups, a leader of each; then it applies policies, or,
// given none, lists the policies the cluster already holds (a restart), and
// records how the cluster was created. It returns ctx's error when ctx ends
// first, and the failure of a node that stopped on its own.
func (c *Cluster) Ready(ctx context.Context, policies []*quoratev1.Policy) error {
	base := c.BaseURL()
	deadline := c.start.Add(c.cfg.ReadyTimeout)
	status, err := c.waitReady(ctx, base, deadline)
	if err == nil && len(policies) > 0 {
		policies, err = c.applyPolicies(ctx, base, policies, deadline)
	} else if err == nil {
		policies, err = c.listPolicies(ctx, base)
	}
	if err != nil {
		return err
	}
	c.status, c.policies = status, policies
	have := len(status.GetShardMap().GetGroups())
	switch {
	case !c.restarted:
		return writeRecord(c.cfg.Dir, record{Groups: c.cfg.Groups})
	case !c.recorded && status.GetShardMap() != nil:
		// State from a dev that kept no record: the map says.
		if c.cfg.GroupsGiven && have != c.cfg.Groups {
			fmt.Fprintf(c.logs, "quorate dev: warning: --groups %d is ignored: the cluster in %s has %d data groups, "+
				"which a restart keeps (give another --dir for a new cluster)\n", c.cfg.Groups, c.cfg.Dir, have)
		}
		return writeRecord(c.cfg.Dir, record{Groups: have})
	}
	return nil
}

// Logs is cfg.Logs as the nodes write to it, a line at a time: the
// caller's own lines go there too, so as not to cut into theirs.
func (c *Cluster) Logs() io.Writer { return c.logs }

// Nodes are the cluster's nodes, node1 first.
func (c *Cluster) Nodes() []*node.Node { return c.nodes }

// BaseURL is node1's API URL (https:// with TLS).
func (c *Cluster) BaseURL() string { return c.Scheme() + c.nodes[0].APIAddr() }

// Scheme is "https://" with TLS, else "http://".
func (c *Cluster) Scheme() string {
	if c.tls != nil {
		return "https://"
	}
	return "http://"
}

// TLS is the cluster's CA and certificates; nil without TLS.
func (c *Cluster) TLS() *TLSFiles { return c.tls }

// Restarted reports whether Start found the state of a cluster in Dir.
func (c *Cluster) Restarted() bool { return c.restarted }

// Status is the cluster's status when Ready found it ready.
func (c *Cluster) Status() *quoratev1.ClusterStatusResponse { return c.status }

// Policies are the policies the cluster holds after Ready, with their
// versions.
func (c *Cluster) Policies() []*quoratev1.Policy { return c.policies }

// Failed is closed when a node stops before Stop asked it to; Failure says
// which and why.
func (c *Cluster) Failed() <-chan struct{} { return c.failed }

// Failure returns the error of the first node that stopped on its own.
func (c *Cluster) Failure() error {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.failErr
}

// Stop stops every node, waits for them and returns their shutdown errors.
func (c *Cluster) Stop() error {
	c.cancel()
	c.wg.Wait()
	c.mu.Lock()
	defer c.mu.Unlock()
	return errors.Join(c.errs...)
}

func dirHasEntries(dir string) bool {
	entries, err := os.ReadDir(dir)
	return err == nil && len(entries) > 0
}

// Output is a writer that several goroutines share, each Write whole: the
// nodes logging a line at a time to one stream, or a command or process
// writing while its output is read. The zero value keeps what is written,
// for String; the cluster's logs pass on to Config.Logs instead.
type Output struct {
	mu sync.Mutex
	to io.Writer // where writes go; nil: into b
	b  bytes.Buffer
}

func (o *Output) Write(p []byte) (int, error) {
	o.mu.Lock()
	defer o.mu.Unlock()
	if o.to != nil {
		return o.to.Write(p)
	}
	return o.b.Write(p)
}

// String is what was kept so far.
func (o *Output) String() string {
	o.mu.Lock()
	defer o.mu.Unlock()
	return o.b.String()
}
