package main

import (
	"context"
	"fmt"
	"net/http"
	"sync/atomic"
	"time"

	"connectrpc.com/connect"

	"github.com/quorate/quorate/client"
	quoratev1 "github.com/quorate/quorate/proto/quorate/v1"
)

// Routings of `quorate-bench --route`.
const (
	routeLeader = "leader" // each call to its key's group leader, as the client learns them
	routeAny    = "any"    // calls to the --server list in turn; the node forwards
	// routePlain sends each unary Admit as a caller without the Go client
	// does (a gRPC or JSON client in another language): to the --server
	// list in turn, not marked strict, with no request ID unless
	// --request-ids, and without the client's own grants: the node
	// forwards it, or decides it from a grant it holds.
	routePlain = "plain"
)

// quorateTarget drives a cluster through package client: a unary Admit per
// decision (batch 1; coalesced into AdmitBatch calls by the client only
// with --coalesce), or one AdmitBatch call of the batch (client.Invoke).
// Every request carries a request ID, as every client request does.
type quorateTarget struct {
	c          *client.Client
	plain      bool // routePlain
	hc         *http.Client
	policy     string
	keys       []string
	batch      int
	requestIDs bool
	idPrefix   string
	seq        atomic.Int64
	scratch    [][]*quoratev1.AdmitRequest // per worker, reused between its calls
}

// quorateOptions say how the bench's client talks to the cluster.
type quorateOptions struct {
	route    string // routeLeader or routeAny
	coalesce bool   // let the client coalesce concurrent Admits
	token    string
}

// newQuorateTarget returns a target sending to the API base URLs urls
// through tr (plaintext or TLS, up to o.workers connections per node).
func newQuorateTarget(urls []string, tr *http.Transport, policy string, requestIDs bool, q quorateOptions, o loadOptions) (*quorateTarget, error) {
	t := &quorateTarget{
		hc:         &http.Client{Transport: tr},
		policy:     policy,
		keys:       benchKeyNames(o.keyPrefix, o.keys),
		batch:      o.batch,
		requestIDs: requestIDs,
		idPrefix:   fmt.Sprintf("%d-", time.Now().UnixNano()),
		scratch:    make([][]*quoratev1.AdmitRequest, o.workers),
	}
	// No caller: on a node with an access file, the authenticated one's own
	// (naming another is refused); the request IDs are unique anyway.
	c, err := client.New(client.Config{Servers: urls, HTTPClient: t.hc, Token: q.token,
		Timeout: benchCallTimeout, DisableRouting: q.route != routeLeader, DisableCoalescing: !q.coalesce})
	if err != nil {
		return nil, err
	}
	t.c, t.plain = c, q.route == routePlain
	for w := range t.scratch {
		t.scratch[w] = make([]*quoratev1.AdmitRequest, o.batch)
		for i := range t.scratch[w] {
			t.scratch[w][i] = &quoratev1.AdmitRequest{Policy: policy}
		}
	}
	return t, nil
}

func (t *quorateTarget) name() string { return targetQuorate }

// requestID is the next request's ID: named by the bench with
// --request-ids, else "" for a unary Admit (the client gives it a random
// one) and a random one in a batch.
func (t *quorateTarget) requestID() string {
	n := t.seq.Add(1)
	if t.requestIDs {
		return fmt.Sprintf("%s%d", t.idPrefix, n)
	}
	if t.batch > 1 {
		return client.NewRequestID()
	}
	return ""
}

func (t *quorateTarget) call(ctx context.Context, worker int, keys []int) (benchResult, error) {
	var r benchResult
	if t.plain && t.batch == 1 {
		req := t.scratch[worker][0]
		req.Key, req.RequestId = t.keys[keys[0]], t.requestID()
		resp, err := client.Invoke(ctx, t.c, client.Call{Procedure: "Admit", RequestID: req.GetRequestId()},
			func(ctx context.Context, s client.Services) (*connect.Response[quoratev1.AdmitResponse], error) {
				return s.Admission.Admit(ctx, connect.NewRequest(req))
			})
		if err != nil {
			return r, err
		}
		if resp.GetAllowed() {
			r.allowed = 1
		} else {
			r.denied = 1
		}
		return r, nil
	}
	if t.batch == 1 {
		d, err := t.c.Admit(ctx, client.Request{Policy: t.policy, Key: t.keys[keys[0]], RequestID: t.requestID(), NoFallback: true})
		if err != nil {
			return r, err
		}
		if d.Allowed {
			r.allowed = 1
		} else {
			r.denied = 1
		}
		return r, nil
	}
	reqs := t.scratch[worker][:len(keys)]
	for i, k := range keys {
		reqs[i].Key, reqs[i].RequestId = t.keys[k], t.requestID()
	}
	batch := &quoratev1.AdmitBatchRequest{Requests: reqs}
	resp, err := client.Invoke(ctx, t.c, client.Call{Procedure: "AdmitBatch", RequestID: reqs[0].GetRequestId()},
		func(ctx context.Context, s client.Services) (*connect.Response[quoratev1.AdmitBatchResponse], error) {
			return s.Admission.AdmitBatch(ctx, connect.NewRequest(batch))
		})
	if err != nil {
		return r, err
	}
	results := resp.GetResults()
	if len(results) != len(reqs) {
		return r, fmt.Errorf("AdmitBatch answered %d results for %d requests", len(results), len(reqs))
	}
	for _, res := range results {
		switch {
		case res.GetError() != nil:
			r.itemErrors = append(r.itemErrors, res.GetError().GetCode())
		case res.GetResponse().GetAllowed():
			r.allowed++
		default:
			r.denied++
		}
	}
	return r, nil
}

func (t *quorateTarget) close() error {
	err := t.c.Close()
	t.hc.CloseIdleConnections()
	return err
}
