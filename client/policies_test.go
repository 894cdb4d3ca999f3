package client

import (
	"bytes"
	"context"
	"errors"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"connectrpc.com/connect"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"google.golang.org/protobuf/types/known/durationpb"

	quoratev1 "github.com/quorate/quorate/proto/quorate/v1"
	"github.com/quorate/quorate/proto/quorate/v1/quoratev1connect"
)

// unreadable answers every Admit under version 7 of its policy, and every
// Policies call with refusal (nil: an empty list).
type unreadable struct {
	quoratev1connect.UnimplementedAdmissionServiceHandler
	refusal error
}

func (unreadable) Admit(context.Context, *connect.Request[quoratev1.AdmitRequest]) (*connect.Response[quoratev1.AdmitResponse], error) {
	return connect.NewResponse(&quoratev1.AdmitResponse{Allowed: true, Limit: 10, Remaining: 9, PolicyVersion: 7}), nil
}

func (u unreadable) Policies(context.Context, *connect.Request[quoratev1.PoliciesRequest]) (*connect.Response[quoratev1.PoliciesResponse], error) {
	if u.refusal != nil {
		return nil, u.refusal
	}
	return connect.NewResponse(&quoratev1.PoliciesResponse{}), nil
}

// syncBuffer is a bytes.Buffer safe for the logger's concurrent writes.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

// A policy the client decides under but cannot read (the cluster refuses
// to list it, or lists it not) is reported once: one warning naming it,
// and Stats.PoliciesUnknown, however many requests use it.
func TestUnreadablePolicyReportedOnce(t *testing.T) {
	for name, refusal := range map[string]error{
		"refused":     connect.NewError(connect.CodePermissionDenied, errors.New("caller \"gw\" lacks the client role")),
		"unavailable": connect.NewError(connect.CodeUnimplemented, errors.New("no such procedure")),
		"not listed":  nil,
	} {
		t.Run(name, func(t *testing.T) {
			mux := http.NewServeMux()
			mux.Handle(quoratev1connect.NewAdmissionServiceHandler(unreadable{refusal: refusal}))
			srv := httptest.NewServer(mux)
			defer srv.Close()
			var log syncBuffer
			c, err := New(Config{Servers: []string{srv.URL}, DisableRouting: true,
				Logger: slog.New(slog.NewTextHandler(&log, &slog.HandlerOptions{Level: slog.LevelWarn}))})
			if err != nil {
				t.Fatal(err)
			}
			for range 3 {
				for _, policy := range []string{"p", "q"} {
					for range 10 {
						if d, err := c.Admit(context.Background(), Request{Policy: policy, Key: "k", NoFallback: true}); err != nil || !d.Allowed {
							t.Fatalf("admit: %+v, %v", d, err)
						}
					}
				}
				eventually(t, 10*time.Second, "both policies reported", func() bool { return c.Stats().PoliciesUnknown == 2 })
			}
			c.Close() // waits for the background work
			if got := c.Stats().PoliciesUnknown; got != 2 {
				t.Errorf("Stats.PoliciesUnknown %d, want 2 (p and q, once each)", got)
			}
			reg := prometheus.NewRegistry()
			reg.MustRegister(c.Collector())
			want := "# HELP quorate_client_policies_unknown_total Policies this client decided under but could not read (no budget leases, no on_unavailable for them), each counted once.\n" +
				"# TYPE quorate_client_policies_unknown_total counter\nquorate_client_policies_unknown_total 2\n"
			if err := testutil.GatherAndCompare(reg, strings.NewReader(want), "quorate_client_policies_unknown_total"); err != nil {
				t.Error(err)
			}
			lines := strings.Split(strings.TrimSpace(log.String()), "\n")
			if len(lines) != 2 {
				t.Fatalf("%d lines logged, want one warning per policy:\n%s", len(lines), log.String())
			}
			for i, policy := range []string{"p", "q"} {
				if !strings.Contains(log.String(), "policy="+policy) {
					t.Errorf("no warning names policy %s:\n%s", policy, log.String())
				}
				if !strings.Contains(lines[i], "level=WARN") {
					t.Errorf("line %d is not a warning: %s", i, lines[i])
				}
			}
		})
	}
}

// upgrading answers Policies with Unimplemented until ready is set (a
// member of a build without the call), then with its policy: version 7 of
// p, which has on_unavailable allow.
type upgrading struct {
	unreadable
	ready *atomic.Bool
}

func (u upgrading) Policies(context.Context, *connect.Request[quoratev1.PoliciesRequest]) (*connect.Response[quoratev1.PoliciesResponse], error) {
	if !u.ready.Load() {
		return nil, connect.NewError(connect.CodeUnimplemented, errors.New("no such procedure"))
	}
	return connect.NewResponse(&quoratev1.PoliciesResponse{Policies: []*quoratev1.Policy{{Name: "p", Algorithm: "fixed_window",
		Limit: 10, Period: durationpb.New(time.Minute), OnUnavailable: "allow", Version: 7}}}), nil
}

// A policy the cluster could not list because its members did not serve
// the call yet is read again once they do: an Unimplemented answer is not
// kept for the client's life.
func TestPoliciesReadAgainAfterUnimplemented(t *testing.T) {
	var ready atomic.Bool
	mux := http.NewServeMux()
	mux.Handle(quoratev1connect.NewAdmissionServiceHandler(upgrading{ready: &ready}))
	srv := httptest.NewServer(mux)
	defer srv.Close()
	c, err := New(Config{Servers: []string{srv.URL}, DisableRouting: true})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	c.fb.mu.Lock()
	c.fb.retry = 50 * time.Millisecond
	c.fb.mu.Unlock()
	admit := func() {
		if d, err := c.Admit(context.Background(), Request{Policy: "p", Key: "k", NoFallback: true}); err != nil || !d.Allowed {
			t.Fatalf("admit: %+v, %v", d, err)
		}
	}
	admit()
	eventually(t, 10*time.Second, "p reported unknown", func() bool { return c.Stats().PoliciesUnknown == 1 })
	ready.Store(true)
	eventually(t, 10*time.Second, "p read once the members serve the call", func() bool {
		admit()
		ps := c.Policies()
		return len(ps) == 1 && ps[0].Name == "p" && ps[0].Version == 7 && ps[0].OnUnavailable == "allow"
	})
}
