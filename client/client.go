package client

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"strings"
	"sync"
	"time"

	"connectrpc.com/connect"

	"github.com/quorate/quorate/proto/quorate/v1/quoratev1connect"
)

// Config configures a Client. Only Servers is required.
type Config struct {
	// Servers are base URLs of any nodes of the cluster, e.g.
	// "https://10.0.0.5:7450"; a bare host:port means http. The client
	// learns every other member from them.
	Servers []string
	// HTTPClient sends the calls (set its Transport for TLS); nil means a
	// client of its own.
	HTTPClient *http.Client
	// Token, if set, is sent as a bearer token on every call.
	Token string
	// Caller is the namespace of request IDs (AdmitRequest.caller), e.g.
	// the calling service's name.
	Caller string
	// Timeout is each call's deadline when its context has none; 0 means
	// 2s. It also bounds each routes and policy call of the background.
	Timeout time.Duration
	// InitialBackoff and MaxBackoff bound the jittered exponential wait
	// between attempts; 0 means 20ms and 500ms.
	InitialBackoff, MaxBackoff time.Duration
	// LocalShare is the share of a policy's limit that this process admits
	// on its own when the policy's on_unavailable is local and the cluster
	// cannot decide, in (0, 1]; 0 means 1/(number of members known). The
	// local bucket admits at least one unit.
	LocalShare float64
	// Policies are the policies this client may need to apply on_unavailable
	// while the cluster is down, or to decide from budget leases, for a
	// client that cannot read them from the cluster (AdmissionService.
	// Policies, which answers a caller the policies its access entry lets
	// it use); policies the cluster answers replace them when newer.
	Policies []Policy
	// Logger gets the retry chatter (at Debug) and a warning for each
	// policy the client decides under but cannot read (Stats.
	// PoliciesUnknown); nil means slog.Default().
	Logger *slog.Logger
	// OnRetry, if set, is called for every failed attempt that will be
	// retried.
	OnRetry func(RetryInfo)
	// DisableRouting sends the calls to Servers in turn (the next one for
	// each attempt, whatever its key) and never asks for the routes: the
	// node that gets a call forwards it to its key's group leader.
	DisableRouting bool
	// DisableCoalescing sends each Admit as its own Admit call, never
	// sharing an AdmitBatch call with others in flight to the same node.
	DisableCoalescing bool
	// NoPolicyFetch: the client never asks the cluster for policies (no
	// Policies call at New, nor when an answer shows a newer version);
	// on_unavailable and budget leases apply only to the policies in
	// Policies.
	// For short-lived clients that make a call or two, such as the quorate
	// CLI's.
	NoPolicyFetch bool
	// DisableGrants: Admit never decides from budget leases, even for a
	// policy whose local.mode is grant; every request is a call.
	DisableGrants bool
}

// Client is a connection to a Quorate cluster; safe for concurrent use.
type Client struct {
	cfg    Config
	http   *http.Client
	opts   []connect.ClientOption
	routes *router
	fb     *fallback
	// grants are the budget leases held (nil with DisableGrants).
	grants *grants
	// retries counts the attempts retried, by procedure (Collector).
	retries retryCounts

	ctx    context.Context // ends with Close: background work stops
	cancel context.CancelFunc
	wg     sync.WaitGroup

	mu       sync.Mutex
	conns    map[string]*conn
	batchers map[string]*batcher
	leases   map[*Lease]struct{}
	closed   bool
}

// conn is the Connect clients of one server.
type conn struct {
	admission quoratev1connect.AdmissionServiceClient
	admin     quoratev1connect.AdminServiceClient
	lease     quoratev1connect.LeaseServiceClient
}

// New returns a Client of the cluster cfg.Servers belong to. It does not
// wait for the cluster: it asks for the routes in the background, and calls
// made meanwhile go to any server.
func New(cfg Config) (*Client, error) {
	if len(cfg.Servers) == 0 {
		return nil, ErrNoServers
	}
	servers := make([]string, 0, len(cfg.Servers))
	for i, s := range cfg.Servers {
		s = strings.TrimRight(strings.TrimSpace(s), "/")
		if s == "" {
			return nil, fmt.Errorf("client: Servers[%d] is empty", i)
		}
		if !strings.Contains(s, "://") {
			s = "http://" + s
		}
		servers = append(servers, s)
	}
	switch {
	case cfg.Timeout < 0:
		return nil, fmt.Errorf("client: Timeout must not be negative (got %v)", cfg.Timeout)
	case cfg.Timeout == 0:
		cfg.Timeout = 2 * time.Second
	}
	if cfg.InitialBackoff <= 0 {
		cfg.InitialBackoff = 20 * time.Millisecond
	}
	if cfg.MaxBackoff <= 0 {
		cfg.MaxBackoff = 500 * time.Millisecond
	}
	if cfg.MaxBackoff < cfg.InitialBackoff {
		return nil, fmt.Errorf("client: MaxBackoff (%v) is below InitialBackoff (%v)", cfg.MaxBackoff, cfg.InitialBackoff)
	}
	if cfg.LocalShare < 0 || cfg.LocalShare > 1 {
		return nil, fmt.Errorf("client: LocalShare must be in [0, 1] (got %v)", cfg.LocalShare)
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	for i, p := range cfg.Policies {
		if err := p.validate(); err != nil {
			return nil, fmt.Errorf("client: Policies[%d]: %w", i, err)
		}
	}
	c := &Client{cfg: cfg, http: cfg.HTTPClient, conns: map[string]*conn{}, batchers: map[string]*batcher{}, leases: map[*Lease]struct{}{}}
	if c.http == nil {
		c.http = &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: 64}}
	}
	// No gzip answers: an AdmitBatch's answer is large enough for the node
	// to compress it, and beside a cluster CPU is dearer than bytes (the
	// nodes ask none of each other either).
	c.opts = append(c.opts, connect.WithAcceptCompression("gzip", nil, nil))
	if cfg.Token != "" {
		c.opts = append(c.opts, connect.WithInterceptors(bearerInterceptor("Bearer "+cfg.Token)))
	}
	c.ctx, c.cancel = context.WithCancel(context.Background())
	c.routes = newRouter(c, servers)
	c.fb = newFallback(c, cfg.Policies)
	if !cfg.DisableGrants {
		c.grants = newGrants(c.grantSource())
	}
	c.routes.refresh()
	if !cfg.NoPolicyFetch {
		c.fb.refreshAll()
	}
	return c, nil
}

// Close stops the client's background work (route and policy refreshes,
// lease renewals: the context of every lease still held ends with
// ErrClosed) and waits for it. It first releases every budget lease
// (grant) held, giving back its unspent units, bounded by the shorter of
// Config.Timeout and a second. Calls made after Close fail with ErrClosed.
func (c *Client) Close() error {
	c.mu.Lock()
	if c.closed {
		c.mu.Unlock()
		return nil
	}
	c.closed = true
	leases := make([]*Lease, 0, len(c.leases))
	for l := range c.leases {
		leases = append(leases, l)
	}
	c.mu.Unlock()
	for _, l := range leases {
		l.stop(ErrClosed)
	}
	if c.grants != nil {
		c.grants.close()
	}
	c.cancel()
	c.wg.Wait()
	return nil
}

// ErrClosed is the error of a call made after Close, and the cause of a
// lease context ended by Close.
var ErrClosed = errors.New("client: closed")

// conn returns server's clients, made once.
func (c *Client) conn(server string) *conn {
	c.mu.Lock()
	defer c.mu.Unlock()
	cn, ok := c.conns[server]
	if !ok {
		cn = &conn{
			admission: quoratev1connect.NewAdmissionServiceClient(c.http, server, c.opts...),
			admin:     quoratev1connect.NewAdminServiceClient(c.http, server, c.opts...),
			lease:     quoratev1connect.NewLeaseServiceClient(c.http, server, c.opts...),
		}
		c.conns[server] = cn
	}
	return cn
}

func (c *Client) admission(server string) quoratev1connect.AdmissionServiceClient {
	return c.conn(server).admission
}

// begin gives ctx the default deadline when it has none, and fails once the
// client is closed.
func (c *Client) begin(ctx context.Context) (context.Context, context.CancelFunc, error) {
	return c.beginWaiting(ctx, 0)
}

// beginWaiting is begin for a call the server may hold for up to wait (an
// acquire with max_wait): a context without a deadline gets Config.Timeout
// plus wait.
func (c *Client) beginWaiting(ctx context.Context, wait time.Duration) (context.Context, context.CancelFunc, error) {
	c.mu.Lock()
	closed := c.closed
	c.mu.Unlock()
	if closed {
		return nil, nil, ErrClosed
	}
	if _, ok := ctx.Deadline(); ok {
		ctx, cancel := context.WithCancel(ctx)
		return ctx, cancel, nil
	}
	ctx, cancel := context.WithTimeout(ctx, c.cfg.Timeout+wait)
	return ctx, cancel, nil
}

// NewRequestID returns a fresh request ID: 128 random bits, in hex.
func NewRequestID() string {
	var b [16]byte
	_, _ = rand.Read(b[:]) // crypto/rand.Read never fails
	return hex.EncodeToString(b[:])
}

func bearerInterceptor(header string) connect.UnaryInterceptorFunc {
	return func(next connect.UnaryFunc) connect.UnaryFunc {
		return func(ctx context.Context, req connect.AnyRequest) (connect.AnyResponse, error) {
			req.Header().Set("Authorization", header)
			return next(ctx, req)
		}
	}
}
