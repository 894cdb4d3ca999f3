package engine

import (
	"context"
	"net"
	"net/http"
	"net/http/httptest"
	"sync"
	"testing"
	"time"

	"connectrpc.com/connect"

	quoratev1 "github.com/quorate/quorate/proto/quorate/v1"
	"github.com/quorate/quorate/proto/quorate/v1/quoratev1connect"
)

// leaderStub answers forwarded AdmitBatch calls, allowing every request,
// and records the HTTP version and the forwarding mark of each call.
type leaderStub struct {
	quoratev1connect.UnimplementedAdmissionServiceHandler
	mu     sync.Mutex
	protos []string
	from   []string
}

func (l *leaderStub) AdmitBatch(_ context.Context, req *connect.Request[quoratev1.AdmitBatchRequest]) (*connect.Response[quoratev1.AdmitBatchResponse], error) {
	resp := &quoratev1.AdmitBatchResponse{}
	for range req.Msg.GetRequests() {
		resp.Results = append(resp.Results, &quoratev1.AdmitBatchResult{Result: &quoratev1.AdmitBatchResult_Response{Response: &quoratev1.AdmitResponse{Allowed: true}}})
	}
	return connect.NewResponse(resp), nil
}

// TestForwardedAdmitsRideHTTP1: a node's forwarded Admits reach the leader
// as AdmitBatch calls over HTTP/1.1 on a reused connection, marked as
// forwarded, while its other calls to the same peer use HTTP/2.
func TestForwardedAdmitsRideHTTP1(t *testing.T) {
	stub := &leaderStub{}
	path, h := quoratev1connect.NewAdmissionServiceHandler(stub)
	mux := http.NewServeMux()
	mux.Handle(path, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		stub.mu.Lock()
		stub.protos = append(stub.protos, r.Proto)
		stub.from = append(stub.from, r.Header.Get(ForwardedHeader))
		stub.mu.Unlock()
		h.ServeHTTP(w, r)
	}))
	srv := httptest.NewUnstartedServer(mux)
	srv.Config.Protocols = new(http.Protocols)
	srv.Config.Protocols.SetHTTP1(true)
	srv.Config.Protocols.SetUnencryptedHTTP2(true)
	var conns sync.Map
	srv.Config.ConnState = func(c net.Conn, s http.ConnState) {
		if s == http.StateNew {
			conns.Store(c.RemoteAddr().String(), true)
		}
	}
	srv.Start()
	t.Cleanup(srv.Close)

	var d net.Dialer
	p := NewPeers(d.DialContext)
	t.Cleanup(p.Close)
	p.From, p.Timeout, p.MaxBytes = "n1", 5*time.Second, 4<<20
	c := p.Get(srv.URL)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	for i := range 5 {
		it := newFwdItem(&quoratev1.AdmitRequest{Policy: "p", Key: "k"})
		c.Admits.Add(it)
		resp, err := it.wait(ctx)
		if err != nil || !resp.GetAllowed() {
			t.Fatalf("forward %d: %v, %v", i, resp, err)
		}
	}
	if _, err := c.Admission.Admit(ctx, connect.NewRequest(&quoratev1.AdmitRequest{Policy: "p", Key: "k"})); connect.CodeOf(err) != connect.CodeUnimplemented {
		t.Fatalf("a plain Admit: %v, want the stub's unimplemented", err)
	}

	stub.mu.Lock()
	defer stub.mu.Unlock()
	if len(stub.protos) != 6 {
		t.Fatalf("%d calls reached the peer, want 6: %v", len(stub.protos), stub.protos)
	}
	for i := range 5 {
		if stub.protos[i] != "HTTP/1.1" || stub.from[i] != "n1" {
			t.Fatalf("forward %d came as %s from %q, want HTTP/1.1 from n1", i, stub.protos[i], stub.from[i])
		}
	}
	if stub.protos[5] != "HTTP/2.0" || stub.from[5] != "" {
		t.Fatalf("the plain call came as %s from %q, want HTTP/2.0 unmarked", stub.protos[5], stub.from[5])
	}
	n := 0
	conns.Range(func(any, any) bool { n++; return true })
	if n != 2 {
		t.Fatalf("%d connections, want 2: one for the forwards (reused), one for the plain call", n)
	}
}
