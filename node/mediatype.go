package node

import (
	"fmt"
	"net/http"
	"strings"
)

// explainMediaType wraps the API and admin servers' handler so that a call
// Connect refuses for its Content-Type (415 Unsupported Media Type, which
// Connect answers with an empty body) says what is expected: curl -d sends
// application/x-www-form-urlencoded, and a request without the header sends
// none. A request whose Content-Type is one of the protocols' goes straight
// through: the check costs a prefix comparison.
func explainMediaType(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		ct := r.Header.Get("Content-Type")
		if r.Method != http.MethodPost || servedMediaType(ct) {
			next.ServeHTTP(w, r)
			return
		}
		next.ServeHTTP(&mediaTypeExplainer{ResponseWriter: w, got: ct}, r)
	})
}

// servedMediaType reports whether ct names one of the protocols the
// servers speak: Connect (application/json, application/proto and the
// streaming application/connect+…), gRPC and gRPC-Web (application/grpc…).
func servedMediaType(ct string) bool {
	for _, p := range []string{"application/json", "application/proto", "application/grpc", "application/connect+"} {
		if strings.HasPrefix(ct, p) {
			return true
		}
	}
	return false
}

// mediaTypeExplainer writes the body of a 415 answer.
type mediaTypeExplainer struct {
	http.ResponseWriter
	got     string // the request's Content-Type
	written bool   // the status is written
}

func (m *mediaTypeExplainer) WriteHeader(code int) {
	if m.written || code != http.StatusUnsupportedMediaType {
		m.written = true
		m.ResponseWriter.WriteHeader(code)
		return
	}
	m.written = true
	sent := "no Content-Type header"
	if m.got != "" {
		sent = fmt.Sprintf("Content-Type %q is not served", m.got)
	}
	h := m.Header()
	h.Set("Content-Type", "text/plain; charset=utf-8")
	h.Del("Content-Length")
	m.ResponseWriter.WriteHeader(code)
	fmt.Fprintf(m.ResponseWriter, "%s: send Content-Type application/json or application/proto (Connect), "+
		"application/grpc (gRPC) or application/grpc-web (gRPC-Web); this procedure accepts %s\n", sent, h.Get("Accept-Post"))
}

func (m *mediaTypeExplainer) Write(p []byte) (int, error) {
	m.written = true
	return m.ResponseWriter.Write(p)
}

// Flush and Unwrap keep the writer's abilities (streams flush; an
// http.ResponseController reaches the server's writer).
func (m *mediaTypeExplainer) Flush() {
	if f, ok := m.ResponseWriter.(http.Flusher); ok {
		f.Flush()
	}
}

func (m *mediaTypeExplainer) Unwrap() http.ResponseWriter { return m.ResponseWriter }
