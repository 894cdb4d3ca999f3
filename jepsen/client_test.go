package jepsen

import (
	"context"
	"net/http"
	"net/http/httptest"
	"net/url"
	"testing"
	"time"

	"github.com/quorate/quorate/client"
	"github.com/quorate/quorate/proto/quorate/v1/quoratev1connect"
)

// A call through the client records the nodes its attempts went to: Node
// the last, Via all of them.
func TestTrailRecordsNodes(t *testing.T) {
	mux := http.NewServeMux()
	mux.Handle(quoratev1connect.NewAdmissionServiceHandler(&answers{}))
	srv := httptest.NewServer(mux)
	defer srv.Close()
	u, err := url.Parse(srv.URL)
	if err != nil {
		t.Fatal(err)
	}
	hc := &http.Client{Transport: trailTransport{base: http.DefaultTransport, ids: map[string]string{u.Host: "n7"}}}
	cc, err := client.New(client.Config{Servers: []string{srv.URL}, HTTPClient: hc, Caller: "test"})
	if err != nil {
		t.Fatal(err)
	}
	defer cc.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	tr := &trail{}
	op := Op{Kind: KindAdmit}
	d, err := cc.Admit(withTrail(ctx, tr), clientRequest("p", "ok", "r1"))
	tr.record(&op)
	recordDecision(&op, d, err)
	if op.Outcome != OutcomeAllowed || op.Node != "n7" || op.Via != "n7" {
		t.Fatalf("op = %+v, want allowed through n7", op)
	}
}
