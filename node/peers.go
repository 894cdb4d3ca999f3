package node

import (
	"context"
	"net"
	"net/http"
	"sync"
	"time"

	"connectrpc.com/connect"

	"github.com/quorate/quorate/groupcommit"
	"github.com/quorate/quorate/proto/quorate/v1/quoratev1connect"
)

// peers holds Connect clients to other nodes' APIs, one HTTP/2 (cleartext,
// or TLS to API ports when the node has TLS files: useTLS) connection pool
// shared by all, so many requests share a few connections.
// A node has two: one to other nodes' API ports (its first join),
// and one over the peer mux's forwarding channel, which carries requests
// forwarded to a group's leader on the connection the node already uses for
// Raft. Safe for concurrent use.
type peers struct {
	httpClient *http.Client
	// from and timeout mark and bound the AdmitBatch calls that carry
	// forwarded Admits (forward.go): this node's ID, its RequestTimeout.
	from    string
	timeout time.Duration
	// maxBytes bounds each message sent and read (connectClientOptions).
	maxBytes int
	// token, if set, is sent as a bearer token on every call
	// (Config.NodeToken): only to other nodes' API ports.
	token string
	// scheme is the scheme of the URLs at builds: https once useTLS.
	scheme string

	mu      sync.Mutex
	clients map[string]*peerClient
}

type peerClient struct {
	admission quoratev1connect.AdmissionServiceClient
	admin     quoratev1connect.AdminServiceClient
	lease     quoratev1connect.LeaseServiceClient
	peer      quoratev1connect.PeerServiceClient // forwarding channel only
	// admits queues Admits forwarded to this peer as a group's leader.
	admits *groupcommit.Queue[*fwdItem]
}

// newPeers returns clients whose connections dial opens.
func newPeers(dial func(ctx context.Context, network, addr string) (net.Conn, error)) *peers {
	var protocols http.Protocols
	protocols.SetUnencryptedHTTP2(true)
	return &peers{
		httpClient: &http.Client{Transport: &http.Transport{
			DialContext:         dial,
			Protocols:           &protocols,
			MaxIdleConnsPerHost: 8,
			IdleConnTimeout:     90 * time.Second,
		}},
		clients: make(map[string]*peerClient),
		scheme:  "http",
	}
}

// at returns the clients for the node whose API (or, on the forwarding
// channel, peer port) is at addr, host:port.
func (p *peers) at(addr string) *peerClient { return p.get(p.scheme + "://" + addr) }

// get returns the clients for a node's API base URL (http://host:port).
func (p *peers) get(baseURL string) *peerClient {
	p.mu.Lock()
	defer p.mu.Unlock()
	c, ok := p.clients[baseURL]
	if !ok {
		opts := connectClientOptions(p.maxBytes)
		if p.token != "" {
			opts = append(opts, connect.WithInterceptors(bearerToken(p.token)))
		}
		c = &peerClient{
			admission: quoratev1connect.NewAdmissionServiceClient(p.httpClient, baseURL, opts...),
			admin:     quoratev1connect.NewAdminServiceClient(p.httpClient, baseURL, opts...),
			lease:     quoratev1connect.NewLeaseServiceClient(p.httpClient, baseURL, opts...),
			peer:      quoratev1connect.NewPeerServiceClient(p.httpClient, baseURL, opts...),
		}
		c.admits = p.forwardQueue(c)
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

func (p *peers) close() {
	p.httpClient.CloseIdleConnections()
}
