package engine

import (
	"context"
	"net"
	"net/http"
	"sync"
	"time"

	"connectrpc.com/connect"

	"github.com/quorate/quorate/certs"
	"github.com/quorate/quorate/groupcommit"
	"github.com/quorate/quorate/proto/quorate/v1/quoratev1connect"
)

// Peers holds Connect clients to other nodes' APIs, one HTTP/2 (cleartext,
// or TLS to API ports when the node has TLS files: UseTLS) connection pool
// shared by all, so many requests share a few connections, and an HTTP/1.1
// pool for the forwarding queues' AdmitBatch calls (forwardHTTP).
// A node has two: one to other nodes' API ports (its first join),
// and one over the peer mux's forwarding channel, which carries requests
// forwarded to a group's leader on the connection the node already uses for
// Raft. Safe for concurrent use.
type Peers struct {
	HTTPClient *http.Client
	// forwardHTTP carries the AdmitBatch calls of the forwarding queues
	// (forward.go) over HTTP/1.1: at most maxForwardsInFlight at a time to
	// a peer, each on a connection of its own that it reuses, so HTTP/2's
	// streams buy nothing there and its framing cost ~9% of a node's CPU
	// with callers spread over every node (profile, 2026-12-06).
	forwardHTTP *http.Client
	// From and timeout mark and bound the AdmitBatch calls that carry
	// forwarded Admits (forward.go): this node's ID, its RequestTimeout.
	From    string
	Timeout time.Duration
	// MaxBytes bounds each message sent and read (connectClientOptions).
	MaxBytes int
	// Token, if set, is sent as a bearer Token on every call
	// (Config.NodeToken): only to other nodes' API ports.
	Token string
	// Scheme is the Scheme of the URLs at builds: https once useTLS.
	Scheme string

	mu      sync.Mutex
	clients map[string]*PeerClient
}

type PeerClient struct {
	Admission quoratev1connect.AdmissionServiceClient
	Admin     quoratev1connect.AdminServiceClient
	Lease     quoratev1connect.LeaseServiceClient
	Peer      quoratev1connect.PeerServiceClient // forwarding channel only
	// Admits queues Admits forwarded to this peer as a group's leader; it
	// sends them through forward (Peers.forwardHTTP).
	Admits  *groupcommit.Queue[*fwdItem]
	forward quoratev1connect.AdmissionServiceClient
}

// NewPeers returns clients whose connections dial opens.
func NewPeers(dial func(ctx context.Context, network, addr string) (net.Conn, error)) *Peers {
	var h2c, h1 http.Protocols
	h2c.SetUnencryptedHTTP2(true)
	h1.SetHTTP1(true)
	return &Peers{
		HTTPClient: &http.Client{Transport: &http.Transport{
			DialContext:         dial,
			Protocols:           &h2c,
			MaxIdleConnsPerHost: 8,
			IdleConnTimeout:     90 * time.Second,
		}},
		forwardHTTP: &http.Client{Transport: &http.Transport{
			DialContext:         dial,
			Protocols:           &h1,
			MaxIdleConnsPerHost: maxForwardsInFlight,
			IdleConnTimeout:     90 * time.Second,
		}},
		clients: make(map[string]*PeerClient),
		Scheme:  "http",
	}
}

// SetIdleConnTimeout sets how long p keeps an idle connection.
func (p *Peers) SetIdleConnTimeout(d time.Duration) {
	for _, c := range []*http.Client{p.HTTPClient, p.forwardHTTP} {
		c.Transport.(*http.Transport).IdleConnTimeout = d
	}
}

// At returns the clients for the node whose API (or, on the forwarding
// channel, peer port) is At addr, host:port.
func (p *Peers) At(addr string) *PeerClient { return p.Get(p.Scheme + "://" + addr) }

// Get returns the clients for a node's API base URL (http://host:port).
func (p *Peers) Get(baseURL string) *PeerClient {
	p.mu.Lock()
	defer p.mu.Unlock()
	c, ok := p.clients[baseURL]
	if !ok {
		opts := ClientOptions(p.MaxBytes)
		if p.Token != "" {
			opts = append(opts, connect.WithInterceptors(bearerToken(p.Token)))
		}
		c = &PeerClient{
			Admission: quoratev1connect.NewAdmissionServiceClient(p.HTTPClient, baseURL, opts...),
			Admin:     quoratev1connect.NewAdminServiceClient(p.HTTPClient, baseURL, opts...),
			Lease:     quoratev1connect.NewLeaseServiceClient(p.HTTPClient, baseURL, opts...),
			Peer:      quoratev1connect.NewPeerServiceClient(p.HTTPClient, baseURL, opts...),
			forward:   quoratev1connect.NewAdmissionServiceClient(p.forwardHTTP, baseURL, opts...),
		}
		c.Admits = p.forwardQueue(c)
		p.clients[baseURL] = c
	}
	return c
}

// bearerToken is a client interceptor that sends token as a bearer token.
type bearerToken string

func (t bearerToken) WrapUnary(next connect.UnaryFunc) connect.UnaryFunc {
	return func(ctx context.Context, req connect.AnyRequest) (connect.AnyResponse, error) {
		req.Header().Set("Authorization", "Bearer "+string(t))
		return next(ctx, req)
	}
}

func (t bearerToken) WrapStreamingClient(next connect.StreamingClientFunc) connect.StreamingClientFunc {
	return func(ctx context.Context, spec connect.Spec) connect.StreamingClientConn {
		conn := next(ctx, spec)
		conn.RequestHeader().Set("Authorization", "Bearer "+string(t))
		return conn
	}
}

func (t bearerToken) WrapStreamingHandler(next connect.StreamingHandlerFunc) connect.StreamingHandlerFunc {
	return next
}

func (p *Peers) Close() {
	p.HTTPClient.CloseIdleConnections()
	p.forwardHTTP.CloseIdleConnections()
}

// ClientOptions are the options of every node-to-node Connect
// client: messages up to maxBytes each way, the bound of the peer port's
// listener (Config.MaxPeerRequestBytes), so whatever a node's API accepts
// can be forwarded.
func ClientOptions(maxBytes int) []connect.ClientOption {
	// No gzip between nodes: a forwarded batch's answer is large enough to
	// be compressed, and on a node's links CPU is dearer than bytes.
	return []connect.ClientOption{connect.WithSendMaxBytes(maxBytes), connect.WithReadMaxBytes(maxBytes),
		connect.WithAcceptCompression("gzip", nil, nil)}
}

// UseTLS makes p's calls to other nodes' API ports TLS: the server's
// certificate verified with its host name (the dialled host) against the
// CA bundle, this node's certificate presented. dial opens the TCP
// connections.
func (p *Peers) UseTLS(src *certs.Source, dial func(ctx context.Context, network, addr string) (net.Conn, error)) {
	t := p.HTTPClient.Transport.(*http.Transport)
	var protocols http.Protocols
	protocols.SetHTTP1(true)
	protocols.SetHTTP2(true)
	t.Protocols = &protocols
	t.DialTLSContext = src.DialTLS(dial)
	p.forwardHTTP.Transport.(*http.Transport).DialTLSContext = src.DialTLS(dial) // HTTP/1.1 over TLS
	p.Scheme = "https"
}
