package node

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"connectrpc.com/connect"
)

// A listener's budget is --max-inflight-bytes, or a 16th of the memory
// limit, at least twice the message bound; the forwarding server's is at
// least twice its own bound.
func TestInflightLimitDefaults(t *testing.T) {
	for _, tc := range []struct {
		name       string
		cfg        Config
		api, peer  int64
		floorsOnly bool // no limit configured: the process's own may apply
	}{
		{name: "set", cfg: Config{MaxInflightBytes: 300 << 20}, api: 300 << 20, peer: 300 << 20},
		{name: "set below the peer bound", cfg: Config{MaxInflightBytes: 40 << 20}, api: 40 << 20, peer: 2 * DefaultMaxPeerRequestBytes},
		{name: "memory limit 4 GiB", cfg: Config{MemoryLimit: 4 << 30}, api: 256 << 20, peer: 256 << 20},
		{name: "memory limit 256 MiB", cfg: Config{MemoryLimit: 256 << 20}, api: 2 * DefaultMaxRequestBytes, peer: 2 * DefaultMaxPeerRequestBytes},
		{name: "memory limit 1 GiB, 64 MiB requests", cfg: Config{MemoryLimit: 1 << 30, MaxRequestBytes: 64 << 20, MaxPeerRequestBytes: 64 << 20},
			api: 128 << 20, peer: 128 << 20},
		{name: "no limit", floorsOnly: true, api: 2 * DefaultMaxRequestBytes, peer: 2 * DefaultMaxPeerRequestBytes},
	} {
		t.Run(tc.name, func(t *testing.T) {
			api, peer := tc.cfg.inflightLimit(false), tc.cfg.inflightLimit(true)
			if tc.floorsOnly {
				if api < tc.api || peer < tc.peer {
					t.Errorf("api %d, peer %d: below %d, %d", api, peer, tc.api, tc.peer)
				}
				return
			}
			if api != tc.api || peer != tc.peer {
				t.Errorf("api %d, peer %d, want %d, %d", api, peer, tc.api, tc.peer)
			}
		})
	}
}

// A body is charged as it is read: its bytes, and for a compressed one
// what they may inflate to, up to the message bound. A charge past the
// budget is refused with resource_exhausted and Retry-After, and refused
// again on every later read; the last eighth of the budget is only for
// requests charged at most smallRequestBytes; a release gives everything
// back and later reads are not charged.
func TestBodyCharge(t *testing.T) {
	const maxBytes, budget = 1 << 20, 4 << 20
	b := &inflightBudget{max: budget}
	gz := http.Header{"Content-Encoding": {"gzip"}}
	zipped := newBodyCharge(b, maxBytes, gz)
	if err := zipped.add(100); err != nil {
		t.Fatal(err)
	}
	if got, want := b.stats().InUse, int64(100+gzipMaxRatio*100); got != want {
		t.Fatalf("100 gzip bytes hold %d, want %d", got, want)
	}
	if err := zipped.add(10 << 10); err != nil {
		t.Fatal(err)
	}
	if got, want := b.stats().InUse, int64(100+10<<10+maxBytes); got != want {
		t.Fatalf("10 KiB of gzip hold %d, want %d (the message bound, and the bytes)", got, want)
	}
	plain := newBodyCharge(b, maxBytes, http.Header{"Content-Encoding": {"identity"}})
	if err := plain.add(2 << 20); err != nil {
		t.Fatal(err)
	}
	// 3 MiB + 10 KiB held: another compressed body passes 7/8 of 4 MiB.
	other := newBodyCharge(b, maxBytes, http.Header{"Grpc-Encoding": {"gzip"}})
	err := other.add(1 << 10)
	var ce *connect.Error
	if !errors.As(err, &ce) || ce.Code() != connect.CodeResourceExhausted || !errors.Is(err, ErrTooManyInflightBytes) || ce.Meta().Get("Retry-After") == "" {
		t.Fatalf("past the budget: %v, want resource_exhausted with Retry-After", err)
	}
	if err2 := other.add(1); err2 != err {
		t.Errorf("a read after the refusal: %v, want the refusal again", err2)
	}
	small := newBodyCharge(b, maxBytes, nil)
	if err := small.add(32 << 10); err != nil {
		t.Errorf("a small body in the last eighth: %v", err)
	}
	if s := b.stats(); s.Refused != 1 || s.Read != 100+10<<10+2<<20+1<<10+32<<10 {
		t.Errorf("stats %+v", s)
	}
	for _, c := range []*bodyCharge{zipped, plain, other, small} {
		c.release()
	}
	if err := plain.add(1 << 20); err != nil || b.stats().InUse != 0 {
		t.Errorf("after release: %v, %d in use, want nothing charged", err, b.stats().InUse)
	}
}

// A connection is busy from the moment a request arrived whole until its
// handler returns; what the server reads of a body after the handler (to
// discard it) does not make it busy again, so it stays one that may be
// closed for a new connection.
func TestBodyReadAfterHandlerLeavesConnectionIdle(t *testing.T) {
	l := newLimitListener(nil, connLimits{}, slog.New(slog.DiscardHandler), "api-addr")
	conn := &limitedConn{l: l}
	g := newBodyGuard(&Node{}, listenerLimits{maxBytes: 1 << 20, bodyTimeout: time.Minute}, 4<<20)
	var body io.Reader
	var busyInHandler int32
	serve := func(read bool) {
		h := g.handler(http.HandlerFunc(func(_ http.ResponseWriter, r *http.Request) {
			body = r.Body
			if read {
				_, _ = io.ReadAll(r.Body)
				busyInHandler = conn.busy.Load()
			}
		}))
		r := httptest.NewRequest(http.MethodPost, "/quorate.v1.AdmissionService/Admit", strings.NewReader(`{"policy":"p"}`))
		h.ServeHTTP(httptest.NewRecorder(), r.WithContext(context.WithValue(r.Context(), connKey{}, conn)))
	}
	serve(true)
	if busyInHandler != 1 || conn.busy.Load() != 0 {
		t.Fatalf("busy %d in the handler, %d after it; want 1, 0", busyInHandler, conn.busy.Load())
	}
	serve(false)
	_, _ = io.ReadAll(body) // as the server discards what the handler left
	if conn.busy.Load() != 0 {
		t.Fatalf("busy %d after the rest of an unread body was read", conn.busy.Load())
	}
}
