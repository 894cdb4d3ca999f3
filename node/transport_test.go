package node

import (
	"context"
	"errors"
	"net"
	"net/http"
	"testing"
	"time"

	"github.com/quorate/quorate/node/internal/engine"
	"github.com/quorate/quorate/peermux"
)

// A Raft listener on an unspecified address needs an address to advertise
// (the mux's side of it is tested in package peermux).
func TestRaftListenerAdvertise(t *testing.T) {
	cfg := DefaultConfig()
	cfg.ID, cfg.DataDir, cfg.Bootstrap = "n1", t.TempDir(), true
	cfg.APIAddr, cfg.RaftAddr = "127.0.0.1:0", "0.0.0.0:0"
	cfg.InsecurePlaintext = true // a non-loopback address in plaintext: what is tested is the advertise rule
	if n, err := New(cfg); err == nil {
		n.Close()
		t.Fatal("a Raft listener on 0.0.0.0 without an advertise address was accepted")
	} else if !errors.Is(err, errRaftNotAdvertisable) {
		t.Fatalf("New with --raft-addr 0.0.0.0:0: %v, want errRaftNotAdvertisable", err)
	}
}

// The peer API client (forwarding, joins, status) dials from the API
// listener's IP too, over cleartext HTTP/2, and follows the dial map.
func TestPeersDialFromAPIIP(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	from := make(chan string, 1)
	var protocols http.Protocols
	protocols.SetUnencryptedHTTP2(true)
	srv := &http.Server{Protocols: &protocols, Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		from <- r.RemoteAddr
	})}
	go srv.Serve(ln)
	defer srv.Close()

	apiLn := &net.TCPAddr{IP: net.ParseIP("127.0.0.4"), Port: 7070}
	p := engine.NewPeers(peermux.NewDialer(apiLn, map[string]string{"127.0.0.9:7070": ln.Addr().String()}).DialContext)
	defer p.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	req, _ := http.NewRequestWithContext(ctx, http.MethodGet, "http://127.0.0.9:7070/", nil)
	resp, err := p.HTTPClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	host, _, _ := net.SplitHostPort(<-from)
	if host != "127.0.0.4" {
		t.Fatalf("request came from %s, want 127.0.0.4", host)
	}
}
