package node

import (
	"errors"
	"fmt"
	"net/http"
	"net/http/pprof"
	"time"

	"github.com/quorate/quorate/access"
)

// The profiling endpoint (Config.PprofAddr): Go's runtime profiles of the
// node's process (CPU, heap, goroutines, blocking, mutexes, execution
// trace) under /debug/pprof/, for `go tool pprof`. It shows the process's
// memory and stacks to whoever reaches it, so Validate keeps it on
// loopback; reach it from elsewhere through an SSH tunnel. On a node with
// an access file it also needs a caller with the admin role, authenticated
// as on the API (access.Authenticate: a bearer token of the token file, or
// a verified client certificate, the endpoint being TLS like the API on a
// TLS node); it is authorized as node_status, an admin action. Without
// credentials a request gets 401, without the role 403, before any handler
// runs: /debug/pprof/cmdline would show the process's arguments, the
// other profiles its memory. Without an access file it is open, as the API
// is. It has the API port's connection bounds and header timeout; a
// profile runs as long as its ?seconds= asks, up to pprofMaxSeconds.
const pprofMaxSeconds = 120

// checkPprof validates PprofAddr; bad formats the error.
func (c Config) checkPprof(bad func(flag, format string, args ...any) error) error {
	if c.PprofAddr == "" {
		return nil
	}
	if !isLoopback(c.PprofAddr) {
		return bad("pprof-addr", "%q is not a loopback address: profiles show the process's memory and stacks to whoever "+
			"reaches them; listen on 127.0.0.1 and tunnel to it", c.PprofAddr)
	}
	return nil
}

// pprofEndpoint is the profiling endpoint: its listener and server. Made
// in New with Config.PprofAddr; nil without.
type pprofEndpoint struct {
	ln  *limitListener
	srv *http.Server
	tls *edgeTLS // nil in plaintext
}

// newPprofEndpoint returns the endpoint serving on ln, TLS as the API
// with t, its callers checked by auth.
func newPprofEndpoint(ln *limitListener, t *edgeTLS, auth *edgeAuth) (*pprofEndpoint, error) {
	mux := http.NewServeMux()
	mux.HandleFunc("/debug/pprof/", pprof.Index)
	mux.HandleFunc("/debug/pprof/cmdline", pprof.Cmdline)
	mux.HandleFunc("/debug/pprof/profile", pprof.Profile)
	mux.HandleFunc("/debug/pprof/symbol", pprof.Symbol)
	mux.HandleFunc("/debug/pprof/trace", pprof.Trace)
	srv := &http.Server{
		Handler:           http.MaxBytesHandler(pprofAdminOnly(auth, mux), 64<<10),
		ReadHeaderTimeout: 10 * time.Second,
		ReadTimeout:       30 * time.Second,
		WriteTimeout:      (pprofMaxSeconds + 30) * time.Second,
		IdleTimeout:       2 * time.Minute,
		MaxHeaderBytes:    64 << 10,
	}
	if t != nil {
		srv.Protocols = new(http.Protocols)
		srv.Protocols.SetHTTP1(true) // and HTTP/2, as on the API
		if err := t.serveTLS(srv); err != nil {
			return nil, err
		}
	}
	return &pprofEndpoint{ln: ln, srv: srv, tls: t}, nil
}

// pprofAdminOnly lets through to next only the requests of a caller with
// the admin role when the node enforces an access file.
func pprofAdminOnly(auth *edgeAuth, next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if auth.authz.IsOpen() {
			next.ServeHTTP(w, r)
			return
		}
		id, err := auth.identify(r)
		if err == nil {
			err = auth.authz.Authorize(id, access.ActionNodeStatus, nil)
		}
		switch {
		case err == nil:
			next.ServeHTTP(w, r)
		case errors.Is(err, access.ErrUnauthenticated):
			w.Header().Set("WWW-Authenticate", `Bearer realm="quorate"`)
			http.Error(w, "quorate: profiles need a caller with the admin role: "+err.Error(), http.StatusUnauthorized)
		default:
			http.Error(w, "quorate: profiles need a caller with the admin role: "+err.Error(), http.StatusForbidden)
		}
	})
}

// serve serves the endpoint until the node closes it.
func (p *pprofEndpoint) serve() { _ = p.tls.serve(p.srv, p.ln) }

// addr is the host:port the endpoint is bound to; "" without one.
func (p *pprofEndpoint) addr() string {
	if p == nil {
		return ""
	}
	return p.ln.Addr().String()
}

// url is the endpoint's index, for the log.
func (p *pprofEndpoint) url() string {
	return fmt.Sprintf("%s://%s/debug/pprof/", p.tls.scheme(), p.ln.Addr())
}

// close closes the server and its listener (not tracked by the server
// when it never served).
func (p *pprofEndpoint) close() error {
	if p == nil {
		return nil
	}
	return errors.Join(ignoreClosed(p.srv.Close()), ignoreClosed(p.ln.Close()))
}

// PprofAddr is the host:port the profiling endpoint is bound to; "" without
// one.
func (n *Node) PprofAddr() string { return n.pprof.addr() }
