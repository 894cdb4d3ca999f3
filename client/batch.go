package client

import (
	"context"
	"errors"
	"net/http"
	"slices"
	"time"

	"connectrpc.com/connect"

	quoratev1 "github.com/quorate/quorate/proto/quorate/v1"
)

// maxBatch is the most requests of one AdmitBatch call (the server's
// MaxAdmitBatch).
const maxBatch = 1000

// A batcher coalesces the Admits bound for one server. There is no timer: a
// call that finds nothing in flight to the server goes at once, alone, as a
// plain Admit; calls that arrive while one is in flight wait for it and go
// together as the next AdmitBatch, up to maxBatch of them.
type batcher struct {
	c      *Client
	server string

	// guarded by c.mu
	inflight bool
	pending  []*batchItem
}

type batchItem struct {
	req   *quoratev1.AdmitRequest
	ctx   context.Context
	taken bool // sent or being sent; guarded by c.mu
	done  chan batchAnswer
}

type batchAnswer struct {
	resp *quoratev1.AdmitResponse
	hdr  http.Header
	err  error
}

// batcher returns server's batcher.
func (c *Client) batcher(server string) *batcher {
	c.mu.Lock()
	defer c.mu.Unlock()
	b, ok := c.batchers[server]
	if !ok {
		b = &batcher{c: c, server: server}
		c.batchers[server] = b
	}
	return b
}

// admit decides req through b's server, alone or in a batch.
func (b *batcher) admit(ctx context.Context, req *quoratev1.AdmitRequest) (*quoratev1.AdmitResponse, http.Header, error) {
	mu := &b.c.mu
	mu.Lock()
	if !b.inflight {
		b.inflight = true
		mu.Unlock()
		resp, err := b.c.admission(b.server).Admit(ctx, connect.NewRequest(req))
		b.next()
		if err != nil {
			return nil, metaOf(err), err
		}
		return resp.Msg, resp.Header(), nil
	}
	it := &batchItem{req: req, ctx: ctx, done: make(chan batchAnswer, 1)}
	b.pending = append(b.pending, it)
	mu.Unlock()
	select {
	case a := <-it.done:
		return a.resp, a.hdr, a.err
	case <-ctx.Done():
		mu.Lock()
		defer mu.Unlock()
		if !it.taken {
			b.pending = slices.DeleteFunc(b.pending, func(p *batchItem) bool { return p == it })
			return nil, nil, errors.Join(ErrNotSent, ctx.Err())
		}
		return nil, nil, ctx.Err() // sent: the outcome is unknown
	}
}

// next is called when a call to b's server ends: the calls that waited go
// as the next batch, or b is idle.
func (b *batcher) next() {
	mu := &b.c.mu
	mu.Lock()
	if len(b.pending) == 0 {
		b.inflight = false
		mu.Unlock()
		return
	}
	n := min(len(b.pending), maxBatch)
	items := slices.Clone(b.pending[:n])
	b.pending = slices.Clone(b.pending[n:])
	for _, it := range items {
		it.taken = true
	}
	mu.Unlock()
	go b.send(items)
}

// send sends items as one call, hands each its answer, and starts the next
// batch. The call's deadline is the latest of the items'.
func (b *batcher) send(items []*batchItem) {
	defer b.next()
	var deadline time.Time
	for _, it := range items {
		if d, ok := it.ctx.Deadline(); ok && d.After(deadline) {
			deadline = d
		}
	}
	if deadline.IsZero() {
		deadline = time.Now().Add(b.c.cfg.Timeout)
	}
	ctx, cancel := context.WithDeadline(context.WithoutCancel(items[0].ctx), deadline)
	defer cancel()
	if len(items) == 1 {
		resp, err := b.c.admission(b.server).Admit(ctx, connect.NewRequest(items[0].req))
		if err != nil {
			items[0].done <- batchAnswer{hdr: metaOf(err), err: err}
		} else {
			items[0].done <- batchAnswer{resp: resp.Msg, hdr: resp.Header()}
		}
		return
	}
	reqs := make([]*quoratev1.AdmitRequest, len(items))
	for i, it := range items {
		reqs[i] = it.req
	}
	resp, err := b.c.admission(b.server).AdmitBatch(ctx, connect.NewRequest(&quoratev1.AdmitBatchRequest{Requests: reqs}))
	if err == nil && len(resp.Msg.GetResults()) != len(items) {
		err = connect.NewError(connect.CodeInternal, errors.New("AdmitBatch answered a wrong number of results"))
	}
	if err != nil {
		for _, it := range items {
			it.done <- batchAnswer{hdr: metaOf(err), err: err}
		}
		return
	}
	for i, r := range resp.Msg.GetResults() {
		a := batchAnswer{resp: r.GetResponse(), hdr: resp.Header()}
		if a.resp == nil {
			a.err = itemErrorOf(r.GetError())
		}
		items[i].done <- a
	}
}

// itemError is one request's error in an AdmitBatch answer, as the Connect
// error Admit would have returned.
type itemError struct {
	ce      *connect.Error
	unknown bool // the request may have been applied
}

func (e *itemError) Error() string { return e.ce.Error() }
func (e *itemError) Unwrap() error { return e.ce }

func itemErrorOf(e *quoratev1.AdmitBatchError) error {
	if e == nil {
		return &itemError{ce: connect.NewError(connect.CodeInternal, errors.New("AdmitBatch answered an empty result")), unknown: true}
	}
	var code connect.Code
	if err := code.UnmarshalText([]byte(e.GetCode())); err != nil {
		code = connect.CodeUnknown
	}
	ce := connect.NewError(code, errors.New(e.GetMessage()))
	if e.GetOutcomeUnknown() {
		if d, err := connect.NewErrorDetail(&quoratev1.OutcomeUnknown{}); err == nil {
			ce.AddDetail(d)
		}
	}
	if e.GetField() != "" {
		if d, err := connect.NewErrorDetail(&quoratev1.FieldViolation{Field: e.GetField(), Description: e.GetMessage()}); err == nil {
			ce.AddDetail(d)
		}
	}
	return &itemError{ce: ce, unknown: e.GetOutcomeUnknown() || code == connect.CodeDeadlineExceeded}
}
