package node

import (
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"os"
	"strings"
	"time"

	"github.com/quorate/quorate/fsm"
	"github.com/quorate/quorate/node/internal/control"
)

// ErrInvalidConfig is wrapped by every error Config.Validate returns.
var ErrInvalidConfig = errors.New("invalid config")

// Config configures one Quorate node. Field comments name the `quorate serve`
// flag that sets each field.
type Config struct {
	// ID names this node in the cluster (--id). It is recorded in the data
	// directory on first start; starting the same directory with another ID
	// is refused.
	ID string

	// DataDir holds the Raft log, stable store and snapshots (--data-dir).
	DataDir string

	// APIAddr is the host:port the API listens on (--api-addr): Connect,
	// gRPC, gRPC-Web and JSON on one port. Port 0 picks a free port. When
	// its host is a specific IP (not 0.0.0.0 or ::), this node's calls to
	// other nodes' APIs (forwarding, joins, status) leave from that IP.
	APIAddr string

	// RaftAddr is the host:port Raft peers connect to (--raft-addr). Port 0
	// picks a free port. When its host is a specific IP, this node's Raft
	// connections to peers leave from that IP.
	RaftAddr string

	// AdvertiseAPIAddr is the API address other nodes use to reach this one
	// (--advertise-api-addr). Empty means the bound API address, which must
	// then not be an unspecified IP such as 0.0.0.0.
	AdvertiseAPIAddr string

	// AdvertiseRaftAddr is the Raft address peers dial
	// (--advertise-raft-addr). Empty means the bound Raft address.
	AdvertiseRaftAddr string

	// Bootstrap forms a new cluster with this node as its only voter
	// (--bootstrap). Ignored when DataDir already holds Raft state.
	Bootstrap bool

	// Join is the API address (host:port, http://host:port or
	// https://host:port; host:port is https with TLS files) of any member
	// of an existing cluster (--join). The node asks it to be added as a
	// voter. Ignored when DataDir already holds Raft state.
	Join string

	// HeartbeatTimeout is how long a follower waits without contact from the
	// leader before it starts an election (--heartbeat-timeout).
	HeartbeatTimeout time.Duration

	// ElectionTimeout is how long a candidate waits before starting a new
	// election (--election-timeout). Must be ≥ HeartbeatTimeout.
	ElectionTimeout time.Duration

	// LeaderLeaseTimeout is how long a leader stays leader without contact
	// from a quorum (--leader-lease-timeout). Must be ≤ HeartbeatTimeout.
	LeaderLeaseTimeout time.Duration

	// CommitTimeout is the longest the leader waits before sending an
	// AppendEntries with nothing new, to advance followers' commit index
	// (--commit-timeout). It sets most of an idle group's cost: 500ms (the
	// default) costs ~16 Raft RPCs/s and ~2 ms/s of CPU per idle group of 3
	// replicas, against ~40 and ~5 at 50ms; decisions are unaffected (they
	// complete on the leader), followers only learn the commit index later.
	CommitTimeout time.Duration

	// AdminAddr, when set, is the host:port of a listener of its own for the
	// admin API (--admin-addr): AdminService is served there, with the API
	// port's TLS, authentication and bounds, and the API port refuses it
	// (unimplemented), so that a firewall can keep admin calls to an
	// operators' network. A joining node's --join then names a member's
	// admin address. Empty: the API port serves admin calls too.
	AdminAddr string

	// PprofAddr, when set, is the loopback host:port of the profiling
	// endpoint (--pprof-addr): Go's runtime profiles under /debug/pprof/
	// (pprof.go). Off by default.
	PprofAddr string

	// MemoryLimit, when set, is the soft limit in bytes on the memory of
	// the node's process (--memory-limit): the Go runtime collects garbage
	// more often as the process nears it and hands free memory back to the
	// system to stay under it (runtime/debug.SetMemoryLimit), so a node's
	// resident set follows its live state rather than twice its peak heap.
	// It is soft: live state above it is kept, at the cost of more frequent
	// collections. cmd/quorate applies it, once per process (quorate dev:
	// one limit for all its nodes). 0, the default, sets no limit.
	MemoryLimit int64

	// MaxConns and MaxConnsPerIP bound the connections the API port (and
	// the admin listener, each on its own) holds, in all and from one
	// client IP (--max-conns, --max-conns-per-ip); a connection past them is
	// closed as soon as it is accepted. MaxStreamsPerConn bounds the calls
	// one HTTP/2 connection carries at once (--max-streams-per-conn), on
	// every listener. 0 means DefaultMaxConns, DefaultMaxConnsPerIP,
	// DefaultMaxStreamsPerConn (listeners.go).
	MaxConns, MaxConnsPerIP, MaxStreamsPerConn int

	// RequestTimeout caps how long one API request may take on the server,
	// including waiting for a leader and for its entry to commit
	// (--request-timeout). A shorter client deadline wins.
	RequestTimeout time.Duration

	// MaxRequestBytes bounds one request to the API port
	// (--max-request-bytes): its message after decompression, and its body
	// as sent. A larger request is refused with resource_exhausted as soon
	// as reading passes the bound, before it is held in memory. It also
	// bounds how many messages a request may hold (one per 128 bytes), as
	// a request of many tiny messages costs far more memory decoded than
	// sent. 0 means DefaultMaxRequestBytes.
	MaxRequestBytes int

	// MaxPeerRequestBytes is MaxRequestBytes for the peer port's forwarding
	// channel (--max-peer-request-bytes): requests other nodes forward and
	// PeerService calls, whose slot-migration pages carry up to 4 MiB. 0
	// means DefaultMaxPeerRequestBytes.
	MaxPeerRequestBytes int

	// MaxInflightBytes bounds the request bytes one listener (the API port,
	// the admin listener) holds at once across all its requests
	// (--max-inflight-bytes): bodies as read, and what their compressed
	// part may inflate to. A request that would pass it is refused at once
	// with resource_exhausted and a Retry-After header (inflight.go). The
	// peer port's forwarding server has a budget of its own, at least
	// twice MaxPeerRequestBytes. 0 means a default sized to the memory
	// limit (MemoryLimit, else GOMEMLIMIT, else the cgroup's): a 16th of
	// it, at least twice MaxRequestBytes; DefaultMaxInflightBytes when
	// there is no limit.
	MaxInflightBytes int64

	// RequestBodyTimeout bounds how long a request's body may take to arrive
	// after its headers, on both ports (--request-body-timeout); a slower
	// body is cut with deadline_exceeded. It does not bound the call: an
	// acquire parked for its max_wait is not cut. Bodies still arriving when
	// the node shuts down are cut at once. 0 means
	// DefaultRequestBodyTimeout.
	RequestBodyTimeout time.Duration

	// SnapshotThreshold is how many log entries since the last snapshot
	// trigger a new one (--snapshot-threshold).
	SnapshotThreshold uint64

	// SnapshotInterval is how often the node checks whether to snapshot
	// (--snapshot-interval).
	SnapshotInterval time.Duration

	// TrailingLogs is how many entries are kept in the log after a snapshot,
	// so a slightly lagging follower catches up without a snapshot
	// (--trailing-logs).
	TrailingLogs uint64

	// sharedSegmentBytes is the size of the segment files of the node's
	// shared Raft log (<data-dir>/log); 0 means nodelog's default. Tests
	// set it.
	sharedSegmentBytes int

	// LogOutput receives the node's and Raft's logs. Nil means os.Stderr.
	LogOutput io.Writer

	// LogLevel is debug, info, warn or error (--log-level).
	LogLevel string

	// DataGroups is how many data groups the cluster's shard map spreads
	// keys over (--groups). 0 keeps every key in the meta group: a
	// single-group cluster. The node that creates the shard map uses its
	// own value, so give every node the same one.
	DataGroups int

	// ExpectNodes is how many registered nodes the meta leader waits for
	// before it creates the shard map (--expect-nodes), so replicas spread
	// over them from the start. Default 1.
	ExpectNodes int

	// ClockOffset is added to the local clock when the leader stamps the
	// time of an entry; Node.SetClockOffset changes it while the node runs.
	// It exists for fault-injection tests (--debug-clock-offset,
	// --debug-clock-file); never set it in production.
	ClockOffset time.Duration

	// DebugDialMap redirects this node's connections to other nodes: when
	// it dials a key (a peer's advertised Raft or API host:port, or the
	// --join address), it dials the value instead. It exists for
	// fault-injection tests that route node-to-node traffic through proxies
	// (--debug-dial-map); never set it in production.
	DebugDialMap map[string]string

	// PeerHandshakeTimeout bounds how long a connection to the peer port
	// may take to send its header and the first byte of its channel's
	// traffic (--peer-handshake-timeout). Until then the connection holds
	// no Raft or forwarding resources; after it, it is closed.
	PeerHandshakeTimeout time.Duration

	// PeerIdleTimeout closes a connection accepted on the peer port that
	// has sent nothing for this long (--peer-idle-timeout); on the
	// forwarding channel, at least twice RequestTimeout. Connections this
	// node dials to peers are replaced before half of it passes, so give
	// every node the same value.
	PeerIdleTimeout time.Duration

	// Observer, when set, is told of each command this node proposes as a
	// group's leader, once Raft holds it and once it is applied (see
	// Observer). No flag sets it: it is for programs that embed a node.
	Observer Observer

	// MaxFeatureLevel is the highest log feature level this node registers
	// (--max-feature-level); 0 means fsm.FeatureLevel, the highest its
	// binary applies. A log feature of level L (docs/DESIGN.md, "Feature
	// levels") is used only once every registered node is at L or above, and
	// once its entries are in the log a binary below L cannot apply them.
	// Lower it to hold new log features back during a rolling upgrade: while
	// any node registers the old binaries' level, no node writes the new
	// features, so the cluster can still go back to the old binary.
	// Restart the nodes without it to let them in (a node registers its
	// level again each time it starts). Lowering it after a feature is in
	// use stops new uses but cannot take back entries already written.
	MaxFeatureLevel uint32

	// MigrationChunkBytes is about how much state one chunk of a slot
	// move's copy carries (--migration-chunk-bytes): the page read from a
	// source replica and the import entry proposed to the target group.
	// The node coordinating a move (the meta leader) sets it for the pages
	// it asks for, so give every node the same value. Smaller chunks make
	// each import entry lighter for the target group's traffic, larger ones
	// make the move faster. 1 KiB to MaxMigrationChunkBytes; 0 means
	// DefaultMigrationChunkBytes.
	MigrationChunkBytes int

	// MigrationProgressInterval is how often a slot move's copy records its
	// progress in the plan (--migration-progress-interval): what plan
	// status shows of a copy under way, and how soon a cancel stops it (the
	// coordinator sees the cancel when it records progress). Each record is
	// a meta-group log entry. 1ms to 1m; 0 means
	// DefaultMigrationProgressInterval.
	MigrationProgressInterval time.Duration

	// AccessFile is the access file (--access-file): which roles each
	// authenticated caller holds, and the policies its data calls may use
	// (package access). It is reloaded when it changes. Without one the
	// node is open (every caller may do everything, as it names itself),
	// which Validate allows only when the API listens, and is advertised,
	// on a loopback address.
	AccessFile string

	// EnvoyConfig are the files of Envoy's rate-limit service
	// (--envoy-config, package envoyrls): domains of descriptors in the
	// rate-limit service's YAML format, reloaded when they change. Without
	// any, the API does not serve that service.
	EnvoyConfig []string
	// EnvoyHeaders adds the RateLimit header fields to the rate-limit
	// service's answers (--envoy-headers).
	EnvoyHeaders bool
	// EnvoyDedupeRequestID deduplicates the rate-limit service's calls on
	// Envoy's x-request-id (--envoy-dedupe-request-id): a call with an ID
	// already decided is answered as the first and spends nothing. Off by
	// default: a client whose x-request-id Envoy passes on
	// (preserve_external_request_id, an internal address) could pin it and
	// never be counted again; enable it only where Envoy always generates
	// the ID.
	EnvoyDedupeRequestID bool

	// TokenFile is the token file (--token-file): callers and the SHA-256
	// of their bearer tokens. It is reloaded when it changes. Optional:
	// without one, callers authenticate by client certificate only.
	TokenFile string

	// NodeToken is the bearer token this node presents on other nodes' API
	// ports (cmd/quorate reads it from --node-token-file, or
	// $QUORATE_NODE_TOKEN; never an argument): its first join through
	// --join, the only call it makes there (members talk over the peer
	// port). With an access file, its caller needs the admin role. With TLS
	// the node's certificate is enough: a certificate naming a node may
	// join as that node (auth.go). Calls over the peer port carry none.
	NodeToken string

	// TLSCertFile, TLSKeyFile and TLSCAFile (--tls-cert, --tls-key,
	// --tls-ca) make both ports TLS, given all three or none: the node's
	// certificate (PEM, leaf first), its key, and the CA bundle that peers'
	// and callers' certificates are verified against. The certificate must
	// name this node (URI SAN quorate://node/<ID>) and chain to the bundle;
	// it serves the API (with callers' certificates optional) and the peer
	// port (mutual TLS, the peer naming a node the cluster knows). The
	// files are reloaded when they change, without a restart. See tls.go.
	TLSCertFile, TLSKeyFile, TLSCAFile string

	// PeerSecretFile is the cluster's peer secret (--peer-secret-file),
	// the same on every node: peers prove they hold it before the peer
	// port serves them. An access file with a plaintext peer port beyond
	// loopback needs it (peersecret.go).
	PeerSecretFile string

	// InsecurePlaintext allows a non-loopback API or Raft address (listen
	// or advertised) without TLS (--insecure-plaintext): anyone who reaches
	// the ports can then read and write the cluster's state. Without it,
	// plaintext is limited to loopback addresses.
	InsecurePlaintext bool

	_ struct{}
}

// MinMemoryLimit is the smallest Config.MemoryLimit other than 0 (64 MiB):
// below it a node would collect garbage all the time.
const MinMemoryLimit = 64 << 20

// DefaultMigrationChunkBytes is Config.MigrationChunkBytes's default (1 MiB
// chunks moved 100,000 records in about half the time 256 KiB chunks took).
const DefaultMigrationChunkBytes = 1 << 20

// DefaultMigrationProgressInterval is Config.MigrationProgressInterval's
// default.
const DefaultMigrationProgressInterval = 500 * time.Millisecond

// MaxMigrationChunkBytes bounds Config.MigrationChunkBytes: a source
// replica serves export pages of up to this size, and a chunk this large
// fits the smallest peer request bound (--max-peer-request-bytes, at least
// 8 MiB).
const MaxMigrationChunkBytes = 4 << 20

// minMigrationChunkBytes is the smallest Config.MigrationChunkBytes.
const minMigrationChunkBytes = 1 << 10

// MaxDataGroups bounds Config.DataGroups.
const MaxDataGroups = 1024

// DataReplicas is how many replicas each data group has (fewer when the
// cluster has fewer nodes).
const DataReplicas = control.DataReplicas

// MetaVoters is how many nodes vote in the meta group of a cluster with data
// groups; later nodes join it as non-voters and still get every change.
const MetaVoters = control.MetaVoters

// DefaultConfig returns a Config for a local node with the production
// timeouts. ID, DataDir and one of Bootstrap/Join are still to be set.
func DefaultConfig() Config {
	return Config{
		APIAddr:             "127.0.0.1:7070",
		RaftAddr:            "127.0.0.1:7170",
		HeartbeatTimeout:    500 * time.Millisecond,
		ElectionTimeout:     500 * time.Millisecond,
		LeaderLeaseTimeout:  500 * time.Millisecond,
		CommitTimeout:       500 * time.Millisecond,
		RequestTimeout:      5 * time.Second,
		MaxRequestBytes:     DefaultMaxRequestBytes,
		MaxPeerRequestBytes: DefaultMaxPeerRequestBytes,
		RequestBodyTimeout:  DefaultRequestBodyTimeout,

		MigrationChunkBytes:       DefaultMigrationChunkBytes,
		MigrationProgressInterval: DefaultMigrationProgressInterval,
		SnapshotThreshold:         8192,
		SnapshotInterval:          30 * time.Second,
		TrailingLogs:              10240,
		LogLevel:                  "info",

		PeerHandshakeTimeout: 5 * time.Second,
		PeerIdleTimeout:      2 * time.Minute,
	}
}

// Validate checks c without changing it. Errors wrap ErrInvalidConfig and
// name the flag.
func (c Config) Validate() error {
	bad := func(flag, format string, args ...any) error {
		return fmt.Errorf("%w: --%s: %s", ErrInvalidConfig, flag, fmt.Sprintf(format, args...))
	}
	if err := c.checkID(); err != nil {
		return bad("id", "%v", err)
	}
	if c.DataDir == "" {
		return bad("data-dir", "must not be empty")
	}
	if c.MemoryLimit != 0 && c.MemoryLimit < MinMemoryLimit {
		return bad("memory-limit", "must be 0 (no limit) or at least %d MiB (got %d bytes)", MinMemoryLimit>>20, c.MemoryLimit)
	}
	for _, a := range []struct{ flag, addr string }{{"api-addr", c.APIAddr}, {"raft-addr", c.RaftAddr}, {"admin-addr", c.AdminAddr}} {
		if a.addr == "" && a.flag == "admin-addr" {
			continue
		}
		if _, _, err := net.SplitHostPort(a.addr); err != nil {
			return bad(a.flag, "%q is not host:port: %v", a.addr, err)
		}
	}
	for _, a := range []struct{ flag, addr string }{{"advertise-api-addr", c.AdvertiseAPIAddr}, {"advertise-raft-addr", c.AdvertiseRaftAddr}} {
		if a.addr == "" {
			continue
		}
		if err := checkAdvertisable(a.addr); err != nil {
			return bad(a.flag, "%v", err)
		}
	}
	for from, to := range c.DebugDialMap {
		for _, a := range []string{from, to} {
			if _, _, err := net.SplitHostPort(a); err != nil {
				return bad("debug-dial-map", "%q is not host:port: %v", a, err)
			}
		}
	}
	if c.DataGroups < 0 || c.DataGroups > MaxDataGroups {
		return bad("groups", "must be between 0 and %d (got %d)", MaxDataGroups, c.DataGroups)
	}
	if c.ExpectNodes < 0 || c.ExpectNodes > 64 {
		return bad("expect-nodes", "must be between 1 and 64 (got %d)", c.ExpectNodes)
	}
	if c.Bootstrap && c.Join != "" {
		return bad("bootstrap", "cannot be combined with --join")
	}
	if c.Join != "" {
		if _, err := c.joinURL(); err != nil {
			return bad("join", "%v", err)
		}
	}
	for _, d := range []struct {
		flag string
		v    time.Duration
		min  time.Duration
	}{
		{"heartbeat-timeout", c.HeartbeatTimeout, 5 * time.Millisecond},
		{"election-timeout", c.ElectionTimeout, 5 * time.Millisecond},
		{"leader-lease-timeout", c.LeaderLeaseTimeout, 5 * time.Millisecond},
		{"commit-timeout", c.CommitTimeout, time.Millisecond},
		{"request-timeout", c.RequestTimeout, time.Millisecond},
		{"snapshot-interval", c.SnapshotInterval, 5 * time.Millisecond},
		{"peer-handshake-timeout", c.PeerHandshakeTimeout, 10 * time.Millisecond},
		{"peer-idle-timeout", c.PeerIdleTimeout, 20 * time.Millisecond},
	} {
		if d.v < d.min {
			return bad(d.flag, "must be at least %v (got %v)", d.min, d.v)
		}
	}
	if c.ElectionTimeout < c.HeartbeatTimeout {
		return bad("election-timeout", "must be ≥ --heartbeat-timeout (%v < %v)", c.ElectionTimeout, c.HeartbeatTimeout)
	}
	if c.LeaderLeaseTimeout > c.HeartbeatTimeout {
		return bad("leader-lease-timeout", "must be ≤ --heartbeat-timeout (%v > %v)", c.LeaderLeaseTimeout, c.HeartbeatTimeout)
	}
	if err := c.checkLimits(bad); err != nil {
		return err
	}
	if err := c.checkConnLimits(bad); err != nil {
		return err
	}
	if err := c.checkPprof(bad); err != nil {
		return err
	}
	if err := c.checkTLS(bad); err != nil {
		return err
	}
	if err := c.checkPeerSecret(bad); err != nil {
		return err
	}
	if c.MaxFeatureLevel > fsm.FeatureLevel {
		return bad("max-feature-level", "must be at most %d, the highest this binary applies, or 0 for it (got %d)", fsm.FeatureLevel, c.MaxFeatureLevel)
	}
	if b := c.MigrationChunkBytes; b != 0 && (b < minMigrationChunkBytes || b > MaxMigrationChunkBytes) {
		return bad("migration-chunk-bytes", "must be between %d and %d bytes, or 0 for the default (got %d)", minMigrationChunkBytes, MaxMigrationChunkBytes, b)
	}
	if d := c.MigrationProgressInterval; d != 0 && (d < time.Millisecond || d > time.Minute) {
		return bad("migration-progress-interval", "must be between 1ms and 1m, or 0 for the default (got %v)", d)
	}
	if c.SnapshotThreshold < 1 {
		return bad("snapshot-threshold", "must be at least 1")
	}
	if _, err := parseLevel(c.LogLevel); err != nil {
		return bad("log-level", "%v", err)
	}
	if c.AccessFile == "" {
		for _, a := range []struct{ flag, addr string }{{"api-addr", c.APIAddr}, {"advertise-api-addr", c.AdvertiseAPIAddr}, {"admin-addr", c.AdminAddr}} {
			if a.addr != "" && !isLoopback(a.addr) {
				return bad("access-file", "required when the API is reachable beyond this host (--%s %s): "+
					"without one, every caller may do everything; open mode is for loopback addresses only", a.flag, a.addr)
			}
		}
	}
	return nil
}

// featureLevel is the log feature level this node registers.
func (c Config) featureLevel() uint32 {
	if c.MaxFeatureLevel == 0 {
		return fsm.FeatureLevel
	}
	return c.MaxFeatureLevel
}

// migrationChunkBytes is the size of a slot move's chunk here.
func (c Config) migrationChunkBytes() int {
	if c.MigrationChunkBytes == 0 {
		return DefaultMigrationChunkBytes
	}
	return c.MigrationChunkBytes
}

// migrationProgressInterval is how often a copy records its progress here.
func (c Config) migrationProgressInterval() time.Duration {
	if c.MigrationProgressInterval == 0 {
		return DefaultMigrationProgressInterval
	}
	return c.MigrationProgressInterval
}

func (c Config) checkID() error {
	if c.ID == "" {
		return errors.New("must not be empty")
	}
	if len(c.ID) > 64 || strings.ContainsFunc(c.ID, func(r rune) bool {
		return !(r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9' || r == '-' || r == '_' || r == '.')
	}) {
		return fmt.Errorf("%q: use 1 to 64 letters, digits, '-', '_' or '.'", c.ID)
	}
	return nil
}

func parseLevel(s string) (slog.Level, error) {
	var l slog.Level
	if s == "" {
		return slog.LevelInfo, nil
	}
	if err := l.UnmarshalText([]byte(s)); err != nil {
		return 0, fmt.Errorf("%q is not one of debug, info, warn, error", s)
	}
	return l, nil
}

func (c Config) logOutput() io.Writer {
	if c.LogOutput == nil {
		return os.Stderr
	}
	return c.LogOutput
}
