package main

import (
	"context"
	"fmt"
	"net/http"
	"sync/atomic"
	"time"

	"connectrpc.com/connect"

	quoratev1 "github.com/quorate/quorate/proto/quorate/v1"
	"github.com/quorate/quorate/proto/quorate/v1/quoratev1connect"
)

// quorateTarget sends Admit (batch 1) or AdmitBatch calls to a cluster,
// rotating through its nodes.
type quorateTarget struct {
	hc         *http.Client
	clients    []quoratev1connect.AdmissionServiceClient
	policy     string
	keys       []string
	batch      int
	requestIDs bool
	idPrefix   string
	seq        atomic.Int64
	scratch    [][]*quoratev1.AdmitRequest // per worker, reused between its calls
}

// newQuorateTarget returns a target sending to the API base URLs urls
// through tr (plaintext or TLS, up to o.workers connections per node).
func newQuorateTarget(urls []string, tr *http.Transport, policy string, requestIDs bool, o loadOptions) *quorateTarget {
	t := &quorateTarget{
		hc:         &http.Client{Transport: tokenTransport{next: tr}},
		policy:     policy,
		keys:       benchKeyNames(o.keyPrefix, o.keys),
		batch:      o.batch,
		requestIDs: requestIDs,
		idPrefix:   fmt.Sprintf("%d-", time.Now().UnixNano()),
		scratch:    make([][]*quoratev1.AdmitRequest, o.workers),
	}
	for _, u := range urls {
		// Like the Redis client, no compression: loopback bytes are free.
		t.clients = append(t.clients, quoratev1connect.NewAdmissionServiceClient(t.hc, u,
			connect.WithAcceptCompression("gzip", nil, nil)))
	}
	for w := range t.scratch {
		t.scratch[w] = make([]*quoratev1.AdmitRequest, o.batch)
		for i := range t.scratch[w] {
			t.scratch[w][i] = &quoratev1.AdmitRequest{Policy: policy}
		}
	}
	return t
}

func (t *quorateTarget) name() string { return targetQuorate }

func (t *quorateTarget) call(ctx context.Context, worker int, keys []int) (benchResult, error) {
	reqs := t.scratch[worker][:len(keys)]
	var n int64
	for i, k := range keys {
		n = t.seq.Add(1)
		reqs[i].Key = t.keys[k]
		if t.requestIDs {
			reqs[i].Caller, reqs[i].RequestId = "quorate-bench", fmt.Sprintf("%s%d", t.idPrefix, n)
		}
	}
	client := t.clients[int(n)%len(t.clients)]
	var r benchResult
	if t.batch == 1 {
		resp, err := client.Admit(ctx, connect.NewRequest(reqs[0]))
		if err != nil {
			return r, err
		}
		if resp.Msg.GetAllowed() {
			r.allowed = 1
		} else {
			r.denied = 1
		}
		return r, nil
	}
	resp, err := client.AdmitBatch(ctx, connect.NewRequest(&quoratev1.AdmitBatchRequest{Requests: reqs}))
	if err != nil {
		return r, err
	}
	results := resp.Msg.GetResults()
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
	t.hc.CloseIdleConnections()
	return nil
}
