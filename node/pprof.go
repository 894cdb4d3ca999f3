package node

import (
	"fmt"
	"net/http"
	"net/http/pprof"
	"time"
)

// The profiling endpoint (Config.PprofAddr): Go's runtime profiles of the
// node's process (CPU, heap, goroutines, blocking, mutexes, execution
// trace) under /debug/pprof/, for `go tool pprof`. It shows the process's
// memory and stacks to whoever reaches it, so Validate keeps it on
// loopback; reach it from elsewhere through an SSH tunnel. It has the API
// port's connection bounds and header timeout; a profile runs as long as
// its ?seconds= asks, up to pprofMaxSeconds.
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
func (n *Node) newPprofServer() *http.Server {
	mux := http.NewServeMux()
	mux.HandleFunc("/debug/pprof/", pprof.Index)
	mux.HandleFunc("/debug/pprof/cmdline", pprof.Cmdline)
	mux.HandleFunc("/debug/pprof/profile", pprof.Profile)
	mux.HandleFunc("/debug/pprof/symbol", pprof.Symbol)
	mux.HandleFunc("/debug/pprof/trace", pprof.Trace)
	return &http.Server{
		Handler:           http.MaxBytesHandler(mux, 64<<10),
		ReadHeaderTimeout: 10 * time.Second,
		ReadTimeout:       30 * time.Second,
		WriteTimeout:      (pprofMaxSeconds + 30) * time.Second,
		IdleTimeout:       2 * time.Minute,
		MaxHeaderBytes:    64 << 10,
	}
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
	return fmt.Sprintf("http://%s/debug/pprof/", n.pprofLn.Addr())
}
