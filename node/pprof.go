package node

import (
	"crypto/x509"
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

// newPprofServer returns the profiling endpoint's server.
func (n *Node) newPprofServer() (*http.Server, error) {
	mux := http.NewServeMux()
	mux.HandleFunc("/debug/pprof/", pprof.Index)
	mux.HandleFunc("/debug/pprof/cmdline", pprof.Cmdline)
	mux.HandleFunc("/debug/pprof/profile", pprof.Profile)
	mux.HandleFunc("/debug/pprof/symbol", pprof.Symbol)
	mux.HandleFunc("/debug/pprof/trace", pprof.Trace)
	srv := &http.Server{
		Handler:           http.MaxBytesHandler(n.pprofAdminOnly(mux), 64<<10),
		ReadHeaderTimeout: 10 * time.Second,
		ReadTimeout:       30 * time.Second,
		WriteTimeout:      (pprofMaxSeconds + 30) * time.Second,
		IdleTimeout:       2 * time.Minute,
		MaxHeaderBytes:    64 << 10,
	}
	if n.tls != nil {
		srv.Protocols = new(http.Protocols)
		srv.Protocols.SetHTTP1(true) // and HTTP/2, as on the API
		if err := n.apiServerTLS(srv); err != nil {
			return nil, err
		}
	}
	return srv, nil
}

// pprofAdminOnly lets through to next only the requests of a caller with
// the admin role when the node enforces an access file.
func (n *Node) pprofAdminOnly(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if n.authz.IsOpen() {
			next.ServeHTTP(w, r)
			return
		}
		var cert *x509.Certificate
		if r.TLS != nil && len(r.TLS.VerifiedChains) > 0 && len(r.TLS.VerifiedChains[0]) > 0 {
			cert = r.TLS.VerifiedChains[0][0] // only a verified chain names a caller
		}
		var tokens *access.Tokens
		if n.tokens != nil {
			tokens = n.tokens.Current()
		}
		id, err := access.Authenticate(cert, r.Header.Get("Authorization"), tokens)
		if err == nil {
			err = n.authz.Authorize(id, access.ActionNodeStatus, nil)
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

// servePprof serves the profiling endpoint until the node closes it.
func (n *Node) servePprof() {
	if n.tls != nil {
		_ = n.pprofServer.ServeTLS(n.pprofLn, "", "") // pprofServer.TLSConfig
		return
	}
	_ = n.pprofServer.Serve(n.pprofLn)
}

// PprofAddr is the host:port the profiling endpoint is bound to; "" without
// one.
func (n *Node) PprofAddr() string {
	if n.pprofLn == nil {
		return ""
	}
	return n.pprofLn.Addr().String()
}

// pprofURL is the endpoint's index, for the log.
func (n *Node) pprofURL() string {
	if n.pprofLn == nil {
		return ""
	}
	scheme := "http"
	if n.tls != nil {
		scheme = "https"
	}
	return fmt.Sprintf("%s://%s/debug/pprof/", scheme, n.pprofLn.Addr())
}
