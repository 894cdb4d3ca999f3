package node

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"connectrpc.com/connect"
	"github.com/hashicorp/raft"

	"github.com/quorate/quorate/envoyrls"
	"github.com/quorate/quorate/groupcommit"
	"github.com/quorate/quorate/node/internal/control"
	"github.com/quorate/quorate/node/internal/engine"
	"github.com/quorate/quorate/node/internal/local"
	"github.com/quorate/quorate/node/internal/replica"
	"github.com/quorate/quorate/peermux"
	quoratev1 "github.com/quorate/quorate/proto/quorate/v1"
	"github.com/quorate/quorate/proto/quorate/v1/quoratev1connect"
	"github.com/quorate/quorate/raftmux"
	"github.com/quorate/quorate/shard"
)

// Node is one Quorate process: it hosts a replica of the meta group and of
// each data group the shard map places on it, serves the API, and serves the
// peer port (every hosted group's Raft traffic and the forwarding channel).
// Create it with New, serve with Run; Close stops it at once.
type Node struct {
	cfg         Config
	log         *slog.Logger
	apiAddr     string           // advertised
	raftAddr    string           // advertised
	ln          edgeListeners    // the API and admin ports' (listeners.go)
	pprof       *pprofEndpoint   // with Config.PprofAddr; nil without (pprof.go)
	mux         *peermux.Mux     // the peer listener: every group's Raft traffic
	raftMux     *raftmux.Hub     // the groups' shared Raft connections over mux (replica.NewHub)
	meta        *replica.Replica // the meta group (with no data groups, it holds the data too)
	groups      *replica.Set
	saves       saveSessions        // a backup's pages in progress (admin_snapshot.go)
	shared      *replica.SharedLogs // the node's Raft log and stable store, shared by its replicas
	host        *replica.Host       // what the replicas share (package replica)
	hadState    bool
	server      *http.Server
	adminServer *http.Server  // with Config.AdminAddr; nil without
	fwdServer   *http.Server  // the forwarding channel's, with PeerService
	apiPorts    *engine.Peers // to other nodes' API ports
	peerPorts   *engine.Peers // to other nodes over the peer mux: forwarded requests
	fwdLn       net.Listener  // the peer mux's forwarding channel, served like the API
	waiters     *engine.Waiters
	engine      *engine.Engine      // the request engine (package engine)
	local       *local.Decider      // decisions from the grants the node holds for its callers (package local)
	controller  *control.Controller // the control plane (package control)
	auth        *edgeAuth           // who a request is from and what it may do (auth.go)
	envoy       *envoyrls.Service   // Envoy's rate-limit service; nil without Config.EnvoyConfig (envoy.go)
	health      *health             // the probes' answers (ready.go)
	statusPage  *statusPage         // GET /status (status_page.go)
	closeOnce   sync.Once
	closeErr    error
	tls         *edgeTLS // the TLS files, reloaded; nil in plaintext (tls.go)
	// metaReplica is n.meta once it is open, for the peer port's TLS
	// handshakes, which may run before (peerGate).
	metaReplica atomic.Pointer[replica.Replica]

	clockOffset atomic.Int64  // time.Duration added to the clock when stamping entries
	decisions   decisionStats // what it decided as a leader (decisions.go)
	metrics     *metrics      // the node's Prometheus registry (metrics.go)
	// stopping is set once Run begins to stop: the node is no longer
	// ready (ready.go), and peers' connections failing is expected (hclog.go).
	stopping atomic.Bool
	// bodyGuards are the servers' body guards, by serverKind (newServer).
	bodyGuards [servePeer + 1]*bodyGuard
}

// New opens the node's stores, binds its API and Raft listeners and starts
// its meta group replica (data group replicas open once Run follows the
// shard map). When DataDir holds no Raft state it bootstraps a new
// cluster (Config.Bootstrap) or waits to be added by Run's join. The node
// serves no API requests until Run.
func New(cfg Config) (_ *Node, err error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	level, _ := parseLevel(cfg.LogLevel)
	n := &Node{
		cfg: cfg,
		log: slog.New(slog.NewTextHandler(cfg.logOutput(), &slog.HandlerOptions{Level: level})).With("node", cfg.ID),
	}
	n.clockOffset.Store(int64(cfg.ClockOffset))
	n.metrics = newMetrics(n)
	n.metrics.reg.MustRegister(buildInfoGauge(Build()))
	defer func() {
		if err != nil {
			n.closeResources()
		}
	}()
	if err := claimDataDir(cfg.DataDir, cfg.ID); err != nil {
		return nil, err
	}
	n.shared = replica.NewSharedLogs(cfg.DataDir, cfg.sharedSegmentBytes, n.metrics.fsynced)
	if n.auth, err = newEdgeAuth(cfg, n.toConnectError); err != nil {
		return nil, err
	}
	if err := n.initEnvoy(); err != nil {
		return nil, err
	}
	var peerServerTLS, peerClientTLS *tls.Config
	if cfg.tlsEnabled() {
		if n.tls, err = openTLS(cfg, n.log); err != nil {
			return nil, err
		}
		gate := peerGate{self: cfg.ID, meta: &n.metaReplica}
		if peerServerTLS, peerClientTLS, err = n.tls.peerConfigs(gate.allow); err != nil {
			return nil, fmt.Errorf("%w: --tls-cert: %v", ErrInvalidConfig, err)
		}
	}

	if err := n.ln.open(cfg, n.log); err != nil {
		return nil, err
	}
	if cfg.PprofAddr != "" {
		ln, err := listen("pprof-addr", cfg.PprofAddr, cfg.apiConnLimits(), n.log)
		if err != nil {
			return nil, err
		}
		if n.pprof, err = newPprofEndpoint(ln, n.tls, n.auth); err != nil {
			ln.Close()
			return nil, err
		}
	}
	n.apiAddr = cfg.AdvertiseAPIAddr
	if n.apiAddr == "" {
		n.apiAddr = n.ln.api.Addr().String()
	}
	if err := checkAdvertisable(n.apiAddr); err != nil {
		return nil, fmt.Errorf("%w: --advertise-api-addr: %v", ErrInvalidConfig, err)
	}

	hlog := replica.NewRaftLogger(n.log, "raft", &n.stopping) // hclog.go
	var advertise net.Addr
	if cfg.AdvertiseRaftAddr != "" {
		if advertise, err = net.ResolveTCPAddr("tcp", cfg.AdvertiseRaftAddr); err != nil {
			return nil, fmt.Errorf("%w: --advertise-raft-addr: %v", ErrInvalidConfig, err)
		}
	}
	raftLn, err := net.Listen("tcp", cfg.RaftAddr)
	if err != nil {
		return nil, fmt.Errorf("node: --raft-addr: %w", err)
	}
	if a, ok := raftLn.Addr().(*net.TCPAddr); advertise == nil && (!ok || a.IP == nil || a.IP.IsUnspecified()) {
		raftLn.Close()
		return nil, fmt.Errorf("node: --raft-addr: %w", errRaftNotAdvertisable)
	}
	var peerSecret []byte
	if cfg.PeerSecretFile != "" {
		if peerSecret, err = readPeerSecret(cfg.PeerSecretFile); err != nil {
			raftLn.Close()
			return nil, fmt.Errorf("%w: --peer-secret-file: %w", ErrInvalidConfig, err)
		}
	}
	n.mux = peermux.New(raftLn, peermux.NewDialer(raftLn.Addr(), cfg.DebugDialMap), advertise, n.log, peermux.Options{
		HandshakeTimeout:   cfg.PeerHandshakeTimeout,
		IdleTimeout:        cfg.PeerIdleTimeout,
		ForwardIdleTimeout: 2 * cfg.RequestTimeout,
		ServerTLS:          peerServerTLS,
		ClientTLS:          peerClientTLS,
		Secret:             peerSecret,
	})
	if err := control.InitClusterID(cfg.DataDir, cfg.Bootstrap, cfg.Join, n.mux, n.log); err != nil {
		raftLn.Close()
		if _, ok := errors.AsType[*control.ClusterIDFileError](err); ok {
			err = fmt.Errorf("%w: %w", ErrInvalidConfig, err)
		}
		return nil, err
	}
	go n.mux.Serve()
	n.raftAddr = n.mux.Addr().String()
	if n.raftMux, err = replica.NewHub(n.mux, cfg.HeartbeatTimeout, hlog); err != nil {
		return nil, err
	}
	n.groups = replica.NewSet()
	apiDial := peermux.NewDialer(n.ln.api.Addr(), cfg.DebugDialMap).DialContext
	n.apiPorts = engine.NewPeers(apiDial)
	if n.tls != nil {
		n.apiPorts.UseTLS(n.tls.src, apiDial)
	}
	n.peerPorts = engine.NewPeers(func(ctx context.Context, _, addr string) (net.Conn, error) {
		return n.mux.Dial(ctx, addr, peermux.ChannelForward)
	})
	// Let go of an idle forwarding connection before the peer may close it.
	n.peerPorts.SetIdleConnTimeout(cfg.PeerIdleTimeout / 2)
	for _, p := range []*engine.Peers{n.apiPorts, n.peerPorts} {
		p.From, p.Timeout, p.MaxBytes = cfg.ID, cfg.RequestTimeout, cfg.peerLimits().maxBytes
	}
	n.apiPorts.Token = cfg.NodeToken // the API port authenticates; the peer port does not
	n.engine = engine.New(engine.Config{ID: cfg.ID, DataGroups: cfg.DataGroups, RequestTimeout: cfg.RequestTimeout,
		MigrationChunkBytes: cfg.migrationChunkBytes(), Observer: cfg.Observer},
		n.groups, n.peerPorts, n.metrics, &n.decisions, n.now)
	n.host = &replica.Host{
		Config: replica.Config{NodeID: cfg.ID, DataDir: cfg.DataDir,
			HeartbeatTimeout: cfg.HeartbeatTimeout, ElectionTimeout: cfg.ElectionTimeout,
			LeaderLeaseTimeout: cfg.LeaderLeaseTimeout, CommitTimeout: cfg.CommitTimeout,
			SnapshotThreshold: cfg.SnapshotThreshold, TrailingLogs: cfg.TrailingLogs, SnapshotInterval: cfg.SnapshotInterval},
		Log: n.log, RaftLog: hlog, Hub: n.raftMux, RaftAddr: n.raftAddr, Shared: n.shared, Data: n.groups,
		NewBatch:      func(g *replica.Replica) *groupcommit.Committer { return groupcommit.New(n.engine.Log(g)) },
		LeaderChanged: n.metrics.leaderChanged,
	}
	if err := raft.ValidateConfig(n.host.RaftConfig(hlog)); err != nil {
		return nil, fmt.Errorf("%w: %v", ErrInvalidConfig, err)
	}
	var boot []raft.Server
	if cfg.Bootstrap {
		boot = []raft.Server{{Suffrage: raft.Voter, ID: raft.ServerID(cfg.ID), Address: raft.ServerAddress(n.raftAddr)}}
	}
	if n.meta, err = n.host.Open(shard.MetaGroup, boot); err != nil {
		return nil, err
	}
	n.engine.SetMeta(n.meta)
	n.hadState = n.meta.HadState
	n.metaReplica.Store(n.meta)
	if n.fwdLn, err = n.mux.Listener(peermux.ChannelForward); err != nil {
		return nil, err
	}
	n.waiters = engine.NewWaiters()
	if n.local, err = local.New(local.Config{Grant: n.heldGrant, Policy: n.policy, PolicyAPI: n.policyAPI,
		Caller: engine.NodeCallerPrefix + cfg.ID, Timeout: cfg.RequestTimeout, Logger: n.log}); err != nil {
		return nil, err
	}
	n.metrics.reg.MustRegister(n.local.Collector())
	join, _ := cfg.joinURL() // "" without --join; Validate checked it
	n.controller = control.New(control.Config{ID: cfg.ID, RaftAddr: n.raftAddr, APIAddr: n.apiAddr, FeatureLevel: cfg.featureLevel(),
		DataDir: cfg.DataDir, Join: join, DataGroups: cfg.DataGroups, ExpectNodes: cfg.ExpectNodes, RequestTimeout: cfg.RequestTimeout,
		MigrationProgressInterval: cfg.migrationProgressInterval(), TLS: cfg.tlsEnabled(), Access: cfg.AccessFile != ""},
		control.Deps{Log: n.log, Meta: n.meta, Replicas: n.groups, Shared: n.shared, Open: n.host.Open, Req: n.engine,
			APIPorts: n.apiPorts, PeerPorts: n.peerPorts, Mux: n.mux})

	n.health = &health{self: cfg.ID, stopping: &n.stopping, registered: n.Registered(),
		shardMap: n.meta.FSM.ShardMap, hosted: n.engine.Hosted}
	n.statusPage = &statusPage{
		self: cfg.ID, adminElsewhere: n.ln.admin != nil, authorize: n.auth.authorize,
		clusterStatus: func(ctx context.Context) (*quoratev1.ClusterStatusResponse, error) {
			resp, err := (&adminHandler{n: n}).ClusterStatus(ctx, connect.NewRequest(&quoratev1.ClusterStatusRequest{}))
			if err != nil {
				return nil, err
			}
			return resp.Msg, nil
		},
		ownStatus: func() *quoratev1.MemberStatus {
			return &quoratev1.MemberStatus{Id: cfg.ID, ApiAddr: n.apiAddr, Suffrage: "voter", Status: n.Status()}
		},
		meta: n.meta.FSM, now: n.now,
	}
	n.server = n.newServer(serveAPI)
	n.fwdServer = n.newServer(servePeer)
	if n.ln.admin != nil {
		n.adminServer = n.newServer(serveAdmin)
	}
	for _, srv := range []*http.Server{n.server, n.adminServer} {
		if srv == nil {
			continue
		}
		if err := n.tls.serveTLS(srv); err != nil {
			return nil, fmt.Errorf("%w: --tls-cert: %v", ErrInvalidConfig, err)
		}
	}
	return n, nil
}

// serverKind says which of the node's HTTP servers newServer builds.
type serverKind int

const (
	serveAPI   serverKind = iota // the API port: data calls, and admin calls without an admin listener
	serveAdmin                   // the admin listener (Config.AdminAddr): admin calls
	servePeer                    // the peer port's forwarding channel: everything, and PeerService
)

// newServer returns one of the node's HTTP servers (serverKind). Each
// bounds what it accepts (limits.go): the size of a request's message and
// body, the messages it holds, the time its body takes to arrive, and the
// calls one HTTP/2 connection carries at once (listeners.go).
func (n *Node) newServer(kind serverKind) *http.Server {
	peer := kind == servePeer
	limits := n.cfg.apiLimits()
	if peer {
		limits = n.cfg.peerLimits()
	}
	guard := newBodyGuard(n, limits, n.cfg.inflightLimit(peer))
	n.bodyGuards[kind] = guard
	mux := http.NewServeMux()
	// Decisions are small: compressing them costs more CPU than it saves.
	opts := append(limits.handlerOptions(n.toConnectError), connect.WithCompressMinBytes(4<<10))
	n.handleEnvoy(mux, kind, opts) // authorizes each call itself (envoy.go)
	if !peer {
		// The edge (auth.go). The forwarding server serves nodes, which
		// authorized what they forward: it does not authenticate again.
		opts = append(opts, connect.WithInterceptors(metricsInterceptor{n.metrics}, authInterceptor{a: n.auth}))
	}
	handlerOpts := connect.WithHandlerOptions(opts...)
	if kind != serveAdmin {
		mux.Handle(quoratev1connect.NewAdmissionServiceHandler(&admissionHandler{n: n}, handlerOpts))
		mux.Handle(quoratev1connect.NewLeaseServiceHandler(&leaseHandler{n: n}, handlerOpts))
	}
	// On the API port of a node with an admin listener, authenticate
	// refuses admin calls.
	mux.Handle(quoratev1connect.NewAdminServiceHandler(&adminHandler{n: n}, handlerOpts))
	n.health.register(mux, kind, handlerOpts)                                     // ready.go
	registerReflection(mux, kind, handlerOpts, n.envoy != nil, n.ln.admin != nil) // reflect.go
	if peer {
		mux.Handle(quoratev1connect.NewPeerServiceHandler(&peerHandler{n: n}, handlerOpts))
	}
	n.statusPage.register(mux, kind)  // GET /status (status_page.go)
	n.metrics.serve(mux, kind, n.log) // GET /metrics (metrics.go)
	var protocols http.Protocols
	protocols.SetHTTP1(true)
	protocols.SetUnencryptedHTTP2(true)
	var handler http.Handler = mux
	if peer {
		handler = engine.WithForwardedIdentity(mux)
	} else {
		handler = n.auth.authenticate(kind, explainMediaType(mux)) // mediatype.go
	}
	srv := &http.Server{
		// Every request, even to an unknown path: after the handler, the
		// server may still read (and discard) what is left of the body.
		Handler:           guard.handler(handler),
		Protocols:         &protocols,
		HTTP2:             n.cfg.http2Config(),
		ConnContext:       withConn, // for the per-address bound (listeners.go)
		ReadHeaderTimeout: 10 * time.Second,
		IdleTimeout:       2 * time.Minute,
		ErrorLog:          slog.NewLogLogger(n.log.Handler(), slog.LevelWarn),
	}
	srv.RegisterOnShutdown(guard.shutdown)
	return srv
}

// Registered is closed once this node's addresses are in its own replica of
// the registry: it is a member that others can forward to.
func (n *Node) Registered() <-chan struct{} { return n.controller.Registered() }

// ID is the node's ID.
func (n *Node) ID() string { return n.cfg.ID }

// APIAddr is the host:port other nodes and clients use to reach the API.
func (n *Node) APIAddr() string { return n.apiAddr }

// RaftAddr is the host:port Raft peers dial.
func (n *Node) RaftAddr() string { return n.raftAddr }

// SetClockOffset changes, from now on, the offset added to the local clock
// when this node stamps the time of an entry as leader (Config.ClockOffset).
// It exists for fault-injection tests: a clock that jumps while the node
// runs. Time in the replicated state still never goes backwards (the FSM
// keeps the latest time it applied). Safe for concurrent use.
func (n *Node) SetClockOffset(d time.Duration) {
	if old := time.Duration(n.clockOffset.Swap(int64(d))); old != d {
		n.log.Warn("clock offset changed", "from", old, "to", d)
	}
}

// ClockOffset is the offset SetClockOffset or Config.ClockOffset set.
func (n *Node) ClockOffset() time.Duration { return time.Duration(n.clockOffset.Load()) }

// now is the local clock plus the clock offset: the time the leader stamps.
func (n *Node) now() time.Time { return time.Now().Add(n.ClockOffset()) }

// Run serves the API until ctx is done, then shuts down gracefully: it stops
// accepting requests, lets running ones finish, hands leadership to another
// voter if it leads, and stops Raft. A node without Raft state joins the
// cluster named by Config.Join; every node records its addresses in the
// replicated registry. Run returns nil on a clean stop.
func (n *Node) Run(ctx context.Context) error {
	serveErr := make(chan error, 2)
	serve := func(what string, srv *http.Server, ln net.Listener) {
		serveErr <- fmt.Errorf("node: serving %s: %w", what, n.tls.serve(srv, ln))
	}
	go serve("API", n.server, n.ln.api)
	if n.adminServer != nil {
		go serve("admin API", n.adminServer, n.ln.admin)
	}
	go func() { _ = n.fwdServer.Serve(n.fwdLn) }() // ends with the node
	if n.pprof != nil {
		go n.pprof.serve() // ends with the node
		n.log.Info("profiling endpoint", "url", n.pprof.url())
	}
	n.log.Info("serving", append([]any{"api", n.apiAddr, "raft", n.raftAddr, "admin", n.cfg.AdminAddr, "had_state", n.hadState},
		Build().logAttrs()...)...)

	ctlCtx, stopCtl := context.WithCancel(ctx)
	ctlDone := make(chan struct{})
	go func() {
		defer close(ctlDone)
		n.controller.Run(ctlCtx)
	}()

	var err error
	select {
	case <-ctx.Done():
	case err = <-serveErr:
	}
	n.stopping.Store(true)
	stopCtl()
	<-ctlDone
	n.log.Info("stopping")
	if shutErr := n.shutdown(); err == nil {
		err = shutErr
	}
	return err
}

// shutdown stops the API gracefully, transfers leadership and stops Raft.
func (n *Node) shutdown() error {
	ctx, cancel := context.WithTimeout(context.Background(), n.cfg.RequestTimeout+time.Second)
	defer cancel()
	if err := n.server.Shutdown(ctx); err != nil {
		n.log.Warn("API shutdown", "err", err)
	}
	if n.adminServer != nil {
		if err := n.adminServer.Shutdown(ctx); err != nil {
			n.log.Warn("admin API shutdown", "err", err)
		}
	}
	if err := n.fwdServer.Shutdown(ctx); err != nil {
		n.log.Warn("peer API shutdown", "err", err)
	}
	// Give back what the grants held for callers have unspent, while the
	// groups can still take it.
	n.local.Close()
	// Hand every group led here to another voter, all at once.
	transfers := map[*replica.Replica]raft.Future{}
	for _, g := range n.engine.Hosted() {
		if g.IsLeader() && g.VotersCount() > 1 {
			transfers[g] = g.Raft.LeadershipTransfer()
		}
	}
	for g, f := range transfers {
		if err := replica.WaitFuture(ctx, f); err != nil {
			n.log.Warn("leadership transfer", "group", g.ID, "err", err)
		}
	}
	return n.Close()
}

// Close stops the node at once: it closes the API listener and connections,
// stops Raft without handing off leadership, and closes the stores. Requests
// in flight get errors; entries already proposed may still commit on the
// other replicas. Safe to call more than once.
func (n *Node) Close() error {
	n.closeOnce.Do(func() { n.closeErr = n.closeResources() })
	return n.closeErr
}

func (n *Node) closeResources() error {
	var errs []error
	if n.server != nil {
		errs = append(errs, ignoreClosed(n.server.Close()))
	}
	if n.adminServer != nil {
		errs = append(errs, ignoreClosed(n.adminServer.Close()))
	}
	if n.fwdServer != nil {
		errs = append(errs, ignoreClosed(n.fwdServer.Close()))
	}
	errs = append(errs, n.ln.close(), n.pprof.close())
	if n.local != nil {
		n.local.Close() // at once when shutdown gave back already
	}
	if n.groups != nil {
		errs = append(errs, n.groups.CloseAll())
	}
	if n.meta != nil {
		errs = append(errs, n.meta.Close())
	}
	if n.shared != nil {
		errs = append(errs, n.shared.Close())
	}
	if n.raftMux != nil {
		errs = append(errs, n.raftMux.Close())
	}
	if n.mux != nil {
		errs = append(errs, n.mux.Close())
	}
	if n.apiPorts != nil {
		n.apiPorts.Close()
	}
	if n.peerPorts != nil {
		n.peerPorts.Close()
	}
	errs = append(errs, n.tls.close())
	return errors.Join(errs...)
}

var errRaftNotAdvertisable = errors.New("bound to an unspecified address; set --advertise-raft-addr")

func ignoreClosed(err error) error {
	if errors.Is(err, net.ErrClosed) || errors.Is(err, http.ErrServerClosed) {
		return nil
	}
	return err
}

// claimDataDir creates dir, checks or writes its data format marker, and
// records id in it, or checks that the id recorded there is this one.
func claimDataDir(dir, id string) error {
	if err := os.MkdirAll(dir, 0o750); err != nil {
		return fmt.Errorf("node: --data-dir: %w", err)
	}
	if err := replica.CheckDataFormat(dir); err != nil {
		return err
	}
	path := filepath.Join(dir, "node-id")
	b, err := os.ReadFile(path)
	switch {
	case err == nil:
		if got := strings.TrimSpace(string(b)); got != id {
			return fmt.Errorf("%w: --id: %q, but --data-dir %s belongs to node %q", ErrInvalidConfig, id, dir, got)
		}
		return nil
	case errors.Is(err, os.ErrNotExist):
		return os.WriteFile(path, []byte(id+"\n"), 0o640)
	default:
		return fmt.Errorf("node: --data-dir: %w", err)
	}
}
