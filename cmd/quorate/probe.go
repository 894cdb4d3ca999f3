package main

import (
	"context"
	"io"
	"net/http"
	"net/http/httptrace"
	"sync/atomic"
	"time"

	"github.com/quorate/quorate/client"
	"github.com/quorate/quorate/cmd/internal/apiflags"
)

// A --server that is not a node's API — its Raft port, say, or an SSH
// server — may take a connection and close it without an answer, or answer
// something that is not HTTP. A node that crashed while it decided an
// attempt fails the same way, so the attempt's error alone cannot tell the
// two apart: retried until --timeout, it ended as an unknown outcome (exit
// 3). So before a data command sends its request, it asks the first server
// for GET /healthz, which changes nothing: a server that took that
// connection and did not answer HTTP is not a Quorate API. The command then
// ends at once (exit 1) with a *client.MismatchError, certain that nothing
// was applied, as nothing was sent. Any HTTP answer, whatever its status,
// lets the request go (an HTTP server that is not Quorate fails that request
// as a mismatch: client.AsMismatch); so does a probe that cannot tell — no
// connection, or no answer within probeTimeout — and the request's attempts
// then go as they would have.

// probeTimeout bounds the probe of the first server.
const probeTimeout = time.Second

// notHTTPError is the cause of a mismatch with a server that took a
// connection and gave no HTTP answer to a request on it.
type notHTTPError struct{ err error }

func (e *notHTTPError) Error() string {
	return "it took the connection but gave no HTTP answer: " + e.err.Error()
}

func (e *notHTTPError) Unwrap() error { return e.err }

// probeAPI sends GET /healthz to server through hc, without the command's
// bearer token, and returns a *client.MismatchError (for procedure) when the
// answer shows server is not a Quorate API: a TLS mismatch, or no HTTP
// answer on a connection it took. It returns nil otherwise, when it cannot
// tell too. The commands that talk to one node (clientOptions.begin) probe
// it too, with procedure "", before their first call.
func probeAPI(ctx context.Context, hc *http.Client, procedure, server string) error {
	ctx, cancel := context.WithTimeout(ctx, probeTimeout)
	defer cancel()
	var connected atomic.Bool // on a new connection (not one reused)
	trace := &httptrace.ClientTrace{GotConn: func(info httptrace.GotConnInfo) { connected.Store(!info.Reused) }}
	// No token: the transport sends none.
	ctx = httptrace.WithClientTrace(apiflags.WithoutToken(ctx), trace)
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, server+"/healthz", nil)
	if err != nil {
		return nil // the attempt fails on the same URL, saying why
	}
	probe := *hc
	probe.CheckRedirect = func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }
	resp, err := probe.Do(req)
	if err == nil {
		_, _ = io.Copy(io.Discard, io.LimitReader(resp.Body, 1<<16))
		_ = resp.Body.Close()
		return nil
	}
	if m := client.AsMismatch(procedure, server, err); m != nil {
		return m
	}
	if connected.Load() && ctx.Err() == nil {
		return &client.MismatchError{Procedure: procedure, Server: server, Kind: client.MismatchNotQuorate, Cause: &notHTTPError{err: err}}
	}
	return nil
}
