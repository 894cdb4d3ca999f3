package jepsen

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"strings"
	"sync"
	"syscall"

	"connectrpc.com/connect"

	"github.com/quorate/quorate/client"
)

// Every workload (admits and leases) and the final read go through package
// client, exactly as an application would: it routes each call to its
// key's group leader, retries it with one request ID across nodes until the
// op's deadline, and coalesces the Admits of one workload bound for one
// leader into AdmitBatch calls. The harness sends each request once (and
// re-sends a few answered ones on purpose, to probe dedupe, and a few
// acquires of unknown outcome, to learn it); it has no retry loop of its own
// for data calls.

// NewClient returns a client of the cluster for caller (the namespace of
// its request IDs): it knows every current member, sends through the
// harness's HTTP client (the TLS one on a TLS cluster) and records, for a
// call whose context carries a trail (withTrail), the nodes its attempts
// went to. Close it when done.
func (c *Cluster) NewClient(caller string) (*client.Client, error) {
	return client.New(c.clientConfig(caller))
}

// clientConfig is NewClient's configuration: every current member, the
// harness's HTTP client behind a transport recording trails.
func (c *Cluster) clientConfig(caller string) client.Config {
	var servers []string
	for _, i := range c.Live() {
		servers = append(servers, c.url(i))
	}
	hc := &http.Client{Transport: trailTransport{base: c.http.Transport, ids: c.nodeIDs()}}
	return client.Config{Servers: servers, HTTPClient: hc, Caller: caller}
}

// grpcClient is an HTTP client of its own that speaks HTTP/2 to the
// nodes' APIs (gRPC needs it: the harness's HTTP client speaks HTTP/1.1
// to a plaintext cluster), recording calls' trails.
func (c *Cluster) grpcClient() *http.Client {
	tr := &http.Transport{DialContext: c.net.dialContext, MaxIdleConnsPerHost: 8}
	var protocols http.Protocols
	if c.tls != nil {
		protocols.SetHTTP2(true)
		tr.DialTLSContext = c.tls.src.DialTLS(c.net.dialContext)
	} else {
		protocols.SetUnencryptedHTTP2(true)
	}
	tr.Protocols = &protocols
	return &http.Client{Transport: trailTransport{base: tr, ids: c.nodeIDs()}}
}

// nodeIDs maps every node's API address to its ID.
func (c *Cluster) nodeIDs() map[string]string {
	ids := make(map[string]string, len(c.Nodes))
	for _, n := range c.Nodes {
		ids[n.APIAddr] = n.ID
	}
	return ids
}

// trail is the nodes one call's HTTP requests went to, in order.
type trail struct {
	mu    sync.Mutex
	nodes []string
}

type trailKey struct{}

// withTrail returns ctx carrying t.
func withTrail(ctx context.Context, t *trail) context.Context {
	return context.WithValue(ctx, trailKey{}, t)
}

func (t *trail) add(node string) {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.nodes = append(t.nodes, node)
}

// record sets op's Node (the last node) and Via (every node,
// comma-separated). An attempt the client coalesced into an AdmitBatch that
// another call's attempt sent shows no node.
func (t *trail) record(op *Op) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if len(t.nodes) > 0 {
		op.Node = t.nodes[len(t.nodes)-1]
	}
	op.Via = strings.Join(t.nodes, ",")
}

// trailTransport records each request's node in its context's trail.
type trailTransport struct {
	base http.RoundTripper
	ids  map[string]string // API address → node ID; read only
}

func (t trailTransport) RoundTrip(r *http.Request) (*http.Response, error) {
	if tr, ok := r.Context().Value(trailKey{}).(*trail); ok {
		node := t.ids[r.URL.Host]
		if node == "" {
			node = r.URL.Host
		}
		tr.add(node)
	}
	return t.base.RoundTrip(r)
}

// classify tells a call's errors that prove the request was never applied
// (fail) from those after which it may have been (unknown: Jepsen's
// "info"). Checkers treat both as unknown. An *client.OutcomeUnknownError
// is unknown whatever its last attempt's error (even a final answer such as
// InvalidArgument: an earlier attempt may have been applied). Otherwise it
// reads the Connect code and the error chain, never the message: a request
// the client never sent (client.ErrNotSent), a refused dial of the client's
// own connection (ECONNREFUSED in the chain; a node's answer carries no
// chain, only its code, even when its forwarding dial was refused), an
// InvalidArgument answer, a call made on a closed client, and a client call
// out of time whose every attempt was answered Unavailable without the
// outcome-unknown detail (it matches context.DeadlineExceeded and carries
// that answer: the client returns no *client.OutcomeUnknownError only when
// no attempt may have been applied) are failures; anything else is unknown.
func classify(err error) Outcome {
	var ou *client.OutcomeUnknownError
	switch {
	case errors.As(err, &ou):
		return OutcomeUnknown
	case errors.Is(err, client.ErrNotSent), errors.Is(err, syscall.ECONNREFUSED),
		connect.CodeOf(err) == connect.CodeInvalidArgument, errors.Is(err, client.ErrClosed):
		return OutcomeFail
	case errors.Is(err, context.DeadlineExceeded) && connect.CodeOf(err) == connect.CodeUnavailable:
		return OutcomeFail
	}
	return OutcomeUnknown
}

// clientRequest is an Admit of one unit of policy on key with request ID
// reqID. NoFallback: when no node can decide, the call fails instead of
// applying the policy's on_unavailable, so every answer the history
// records is the cluster's own decision.
func clientRequest(policy, key, reqID string) client.Request {
	return client.Request{Policy: policy, Key: key, RequestID: reqID, NoFallback: true}
}

// recordDecision fills op's outcome and answer from a client Admit's
// result.
func recordDecision(op *Op, d *client.Decision, err error) {
	switch {
	case err != nil:
		op.Outcome, op.Error = classify(err), err.Error()
		return
	case d.Outcome != client.Verified:
		// Never with NoFallback; if it were, it is no decision of the cluster's.
		op.Outcome, op.Error = OutcomeUnknown, fmt.Sprintf("not a verified decision: %s (%v)", d.Outcome, d.Cause)
		return
	case d.Allowed:
		op.Outcome = OutcomeAllowed
	default:
		op.Outcome = OutcomeDenied
	}
	op.Remaining, op.Duplicate = d.Remaining, d.Duplicate
	op.DecidedAt = nanos(d.DecidedAt)
}
