package main

import (
	"errors"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"connectrpc.com/connect"

	"github.com/quorate/quorate/certs"
	"github.com/quorate/quorate/client"
	"github.com/quorate/quorate/node/nodetest"
)

// Every kind of protocol or TLS mismatch, against a real server, fails the
// first attempt at once (no retries until --timeout, no "outcome unknown"),
// with exit status 1 and a message naming the server and the likely cause.
func TestProtocolMismatchIsImmediate(t *testing.T) {
	tlsNode := nodetest.NewClusterWith(t, nodetest.Options{Nodes: 1, TLS: true})
	plain := nodetest.NewCluster(t, 1)
	otherCA, err := certs.NewDevCA(t.TempDir(), []string{"n1"}, nil)
	if err != nil {
		t.Fatal(err)
	}
	notFound := httptest.NewServer(http.NotFoundHandler())
	t.Cleanup(notFound.Close)
	web := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Content-Type", "text/html")
		_, _ = w.Write([]byte("<html>a web site</html>"))
	}))
	t.Cleanup(web.Close)

	for _, tc := range []struct {
		name   string
		server string
		tls    []string
		want   []string // what the message must name, the server aside
	}{
		{"plaintext to a TLS port", "http://" + tlsNode.Node(0).APIAddr(), nil, []string{"may serve TLS", "--tls-ca", "https://"}},
		{"TLS to a plaintext port", "https://" + plain.Node(0).APIAddr(), []string{"--tls-ca", tlsNode.CA().CAFile},
			[]string{"serves plaintext", "http://"}},
		{"a certificate the CA does not trust", "https://" + tlsNode.Node(0).APIAddr(), []string{"--tls-ca", otherCA.CAFile},
			[]string{"not trusted", "--tls-ca"}},
		{"an HTTP server answering 404", notFound.URL, nil, []string{"not a Quorate node", "404 Not Found", "--server"}},
		{"an HTTP server answering HTML", web.URL, nil, []string{"not a Quorate node", "text/html"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			for _, args := range [][]string{
				{"admit", "--policy", "p", "--key", "k"},            // retried with a request ID
				{"lease", "acquire", "--policy", "p", "--key", "k"}, // retried through runCall
				{"peek", "--policy", "p", "--key", "k"},             // retried, read-only
				{"policy", "list"},                                  // not retried
			} {
				args = append(append(args, "--server", tc.server, "--timeout", "30s"), tc.tls...)
				_, errOut, err := runCLI(t, args...)
				var m *mismatchError
				if !errors.As(err, &m) {
					t.Fatalf("quorate %s: %v, want a *mismatchError", strings.Join(args, " "), err)
				}
				var re *retryError
				if errors.As(err, &re) {
					t.Errorf("quorate %s: retried %d times: %v", args[0], re.Attempts, err)
				}
				wantErrNaming(t, err, append([]string{tc.server, "mismatch"}, tc.want...)...)
				if strings.Contains(err.Error(), "outcome is unknown") || exitStatus(err) != exitError {
					t.Errorf("quorate %s: %v has exit status %d, want %d and no unknown outcome", args[0], err, exitStatus(err), exitError)
				}
				if errOut != "" {
					t.Errorf("quorate %s wrote to stderr: %s", args[0], errOut)
				}
			}
		})
	}
}

// A mismatch is final for the retry loop, and certain: nothing was applied.
// The classification is the client's (client.TestAsMismatch); the CLI only
// words it.
func TestMismatchErrorIsFinal(t *testing.T) {
	cause := connect.NewError(connect.CodeUnavailable, errors.New("http: server gave HTTP response to HTTPS client"))
	err := wrapRPC("Admit", "https://127.0.0.1:1", "r-1", cause)
	var m *mismatchError
	if !errors.As(err, &m) {
		t.Fatalf("wrapRPC: %v, want a *mismatchError", err)
	}
	if client.Retryable(err) || exitStatus(err) != exitError {
		t.Errorf("retryable %t, exit status %d; want neither retryable nor unknown", client.Retryable(err), exitStatus(err))
	}
	if connect.CodeOf(err) != connect.CodeFailedPrecondition {
		t.Errorf("code %v, want failed_precondition", connect.CodeOf(err))
	}
	wantErrNaming(t, err, "https://127.0.0.1:1", "serves plaintext", "http:// --server")
	// The same error from a plaintext server URL is not a mismatch.
	if err := wrapRPC("Admit", "http://127.0.0.1:1", "r-1", cause); errors.As(err, &m) {
		t.Errorf("plaintext server: %v, want no mismatch", err)
	}
	// A Quorate node's own unimplemented (a wire error) is its answer.
	wire := connect.NewWireError(connect.CodeUnimplemented, errors.New("node: Routes is not served yet"))
	if err := wrapRPC("Routes", "http://127.0.0.1:1", "", wire); errors.As(err, &m) {
		t.Errorf("a node's unimplemented: %v, want no mismatch", err)
	}
}
