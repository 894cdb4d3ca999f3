package main

import (
	"bytes"
	"context"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
	"time"
)

// serveRaw accepts connections on a loopback port until the test ends and
// hands each to handle; it returns the port's address.
func serveRaw(t *testing.T, handle func(net.Conn)) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = ln.Close() })
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			go func() {
				defer c.Close()
				handle(c)
			}()
		}
	}()
	return ln.Addr().String()
}

// A --server that is not a Quorate API fails a data command at once with
// exit status 1 and says so, whether it closes the connection unanswered
// (as a node's Raft port does), answers with something that is not HTTP, or
// is an HTTP server without Quorate's procedures; nothing is retried until
// --timeout, nor called an unknown outcome. A request that changes state is
// not sent to a server that does not speak HTTP at all.
func TestDataCommandsFailAtOnceOnAServerThatIsNotQuorate(t *testing.T) {
	var requests atomic.Int64 // bytes of requests the raw servers read
	reset := serveRaw(t, func(c net.Conn) {
		b := make([]byte, len("POST"))
		if _, err := io.ReadFull(c, b); err == nil && string(b) == "POST" {
			requests.Add(1)
		}
		// Closing with unread bytes resets the connection, as a node's
		// peer port does with a connection whose first byte is not its
		// header's.
	})
	banner := serveRaw(t, func(c net.Conn) {
		_, _ = io.WriteString(c, "SSH-2.0-OpenSSH_9.6\r\n")
		b := make([]byte, 4096)
		for {
			if n, err := c.Read(b); n > 0 && bytes.Contains(b[:n], []byte("POST ")) {
				requests.Add(1)
			} else if err != nil {
				return
			}
		}
	})
	web := httptest.NewServer(http.NotFoundHandler())
	t.Cleanup(web.Close)

	for _, tc := range []struct {
		name, server string
	}{
		{"closes unanswered", reset},
		{"answers not HTTP", banner},
		{"an HTTP server that is not Quorate", web.URL},
	} {
		for _, args := range [][]string{
			{"admit", "--policy", "p", "--key", "k"},
			{"lease", "acquire", "--policy", "p", "--key", "k"},
			{"peek", "--policy", "p", "--key", "k"},
			{"policy", "list"}, // a command that talks to one node, not retried
		} {
			var out, errOut bytes.Buffer
			started := time.Now()
			status := execute(context.Background(), append(args, "--server", tc.server, "--timeout", "10s"), &out, &errOut)
			took := time.Since(started)
			what := tc.name + ": quorate " + strings.Join(args, " ")
			if status != exitError {
				t.Errorf("%s: exit status %d, want %d\n%s", what, status, exitError, errOut.String())
			}
			if took > 3*time.Second {
				t.Errorf("%s: took %v, want an answer at once (--timeout 10s)", what, took)
			}
			if msg := errOut.String(); !strings.Contains(msg, "is not a Quorate node") || !strings.Contains(msg, "not its Raft or another port") ||
				strings.Contains(msg, "unknown") {
				t.Errorf("%s: stderr %q does not say the server is not a Quorate node", what, msg)
			}
		}
	}
	if n := requests.Load(); n != 0 {
		t.Errorf("%d requests reached a server that does not speak HTTP; want none sent after the probe", n)
	}
}

// A probe that cannot tell (nothing listening) lets the request's attempts
// go as before: retried, not applied.
func TestProbeOfADeadServerLetsTheAttemptsGo(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	dead := ln.Addr().String()
	_ = ln.Close()
	var out, errOut bytes.Buffer
	status := execute(context.Background(), []string{"admit", "--server", dead, "--policy", "p", "--key", "k", "--timeout", "300ms"}, &out, &errOut)
	if status != exitError || !strings.Contains(errOut.String(), "connection refused") || !strings.Contains(errOut.String(), "was not applied") {
		t.Errorf("admit to a dead server: status %d, stderr %q; want 1, refused, not applied", status, errOut.String())
	}
	if err := probeAPI(context.Background(), apiHTTPClient, "Admit", "http://"+dead); err != nil {
		t.Errorf("probe of a dead server: %v, want nil (it cannot tell)", err)
	}
}
