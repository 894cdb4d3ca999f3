package client

import (
	"context"
	"errors"
	"net/http"
	"net/http/httptest"
	"sync/atomic"
	"testing"
	"time"

	"connectrpc.com/connect"

	quoratev1 "github.com/quorate/quorate/proto/quorate/v1"
	"github.com/quorate/quorate/proto/quorate/v1/quoratev1connect"
)

// ErrNotSent reaches the caller only when the request was certainly not
// applied: after an attempt that may have been, the error is an
// *OutcomeUnknownError that does not match it.
func TestErrNotSentOnlyWhenNothingApplied(t *testing.T) {
	notSent := errors.Join(ErrNotSent, context.DeadlineExceeded)
	err := publicError(&attemptError{Attempts: 2, Last: notSent, Stopped: context.DeadlineExceeded}, "r")
	var ou *OutcomeUnknownError
	if !errors.Is(err, ErrNotSent) || !errors.Is(err, context.DeadlineExceeded) || errors.As(err, &ou) {
		t.Fatalf("never sent, nothing applied: %v; want ErrNotSent and DeadlineExceeded", err)
	}
	err = publicError(&attemptError{Attempts: 2, Unknown: true, Last: notSent, Stopped: context.DeadlineExceeded}, "r")
	if !errors.As(err, &ou) || errors.Is(err, ErrNotSent) || !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("last attempt never sent, an earlier one maybe applied: %v; want an OutcomeUnknownError, not ErrNotSent", err)
	}
}

// policyLister answers every Admit under version 7 of its policy, which
// makes a client that fetches policies ask for it, and counts the policy
// reads it gets: lists (every policy) and gets (named ones). It lists none.
type policyLister struct {
	quoratev1connect.UnimplementedAdmissionServiceHandler
	lists, gets atomic.Int64
}

func (*policyLister) Admit(context.Context, *connect.Request[quoratev1.AdmitRequest]) (*connect.Response[quoratev1.AdmitResponse], error) {
	return connect.NewResponse(&quoratev1.AdmitResponse{Allowed: true, Limit: 10, Remaining: 9, PolicyVersion: 7}), nil
}

func (p *policyLister) Policies(_ context.Context, req *connect.Request[quoratev1.PoliciesRequest]) (*connect.Response[quoratev1.PoliciesResponse], error) {
	if len(req.Msg.GetNames()) == 0 {
		p.lists.Add(1)
	} else {
		p.gets.Add(1)
	}
	return connect.NewResponse(&quoratev1.PoliciesResponse{}), nil
}

// Config.NoPolicyFetch: the client never lists nor gets policies; without
// it, it does.
func TestNoPolicyFetch(t *testing.T) {
	for _, noFetch := range []bool{true, false} {
		pl := &policyLister{}
		mux := http.NewServeMux()
		mux.Handle(quoratev1connect.NewAdmissionServiceHandler(pl))
		srv := httptest.NewServer(mux)
		c, err := New(Config{Servers: []string{srv.URL}, DisableRouting: true, NoPolicyFetch: noFetch})
		if err != nil {
			t.Fatal(err)
		}
		for range 3 {
			if d, err := c.Admit(context.Background(), Request{Policy: "p", Key: "k", NoFallback: true}); err != nil || !d.Allowed {
				t.Fatalf("admit: %+v, %v", d, err)
			}
		}
		if !noFetch {
			deadline := time.Now().Add(10 * time.Second)
			for pl.lists.Load() == 0 || pl.gets.Load() == 0 {
				if time.Now().After(deadline) {
					t.Fatalf("without NoPolicyFetch: %d lists, %d gets after 10s; want both", pl.lists.Load(), pl.gets.Load())
				}
				time.Sleep(10 * time.Millisecond) // polling, not synchronization
			}
		}
		c.Close() // waits for the background work
		srv.Close()
		if noFetch && pl.lists.Load()+pl.gets.Load() != 0 {
			t.Fatalf("NoPolicyFetch: %d lists, %d gets; want none", pl.lists.Load(), pl.gets.Load())
		}
	}
}
