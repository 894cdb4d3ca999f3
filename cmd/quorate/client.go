package main

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"net/url"
	"os"
	"strings"
	"time"

	"connectrpc.com/connect"
	"github.com/spf13/cobra"

	"github.com/quorate/quorate/client"
	quoratev1 "github.com/quorate/quorate/proto/quorate/v1"
	"github.com/quorate/quorate/proto/quorate/v1/quoratev1connect"
)

// defaultServer is the API of node1 of `quorate dev`.
const defaultServer = "http://127.0.0.1:7070"

// clientOptions are the flags every client command shares.
type clientOptions struct {
	server    string
	timeout   time.Duration
	tokenFile string       // --token-file
	tls       tlsFlags     // --tls-ca, --tls-cert, --tls-key
	hc        *http.Client // built by beginServers from tls
}

// tokenEnv names the environment variable the token defaults to without
// --token-file.
const tokenEnv = "QUORATE_TOKEN"

// serverEnv names the environment variable --server defaults to; the flag
// wins when given.
const serverEnv = "QUORATE_SERVER"

// serverFromEnv sets the --server of cmd, when it has one and it was not
// given, from $QUORATE_SERVER (when set): the root command's hook, so that
// every command's --server (bench's too) reads it alike.
func serverFromEnv(cmd *cobra.Command) error {
	f := cmd.Flags().Lookup("server")
	if f == nil || f.Changed {
		return nil
	}
	v := strings.TrimSpace(os.Getenv(serverEnv))
	if v == "" {
		return nil
	}
	if err := f.Value.Set(v); err != nil {
		return fmt.Errorf("$%s: %w", serverEnv, err)
	}
	return nil
}

// addClientFlags registers --server, --timeout and --token-file on cmd.
func addClientFlags(cmd *cobra.Command, o *clientOptions) {
	fs := cmd.Flags()
	fs.StringVar(&o.server, "server", defaultServer, "API addresses of nodes, comma-separated: http://host:port, https://host:port or\n"+
		"host:port; the command talks to the first that accepts a connection;\n"+
		"when not given, $"+serverEnv+" if set, else the default")
	fs.DurationVar(&o.timeout, "timeout", 5*time.Second, "deadline of the whole command")
	addTLSFlags(fs, &o.tls)
	addTokenFlag(cmd, o)
}

// addTokenFlag registers --token-file on cmd, and has every call the
// command makes from its context send the bearer token of that file, or of
// $QUORATE_TOKEN (apiHTTPClient). The token itself is never an argument
// (secretflags.go): --token is refused. Every command means the bearer
// token by --token (a lease's fencing token is --fencing-token).
func addTokenFlag(cmd *cobra.Command, o *clientOptions) {
	const name = "token"
	cmd.Flags().StringVar(&o.tokenFile, name+"-file", "", "file holding the bearer token to authenticate with (default $"+tokenEnv+"); see quorate token create")
	pre := cmd.PreRunE
	cmd.PreRunE = func(cmd *cobra.Command, args []string) error {
		token, err := secretFromFileOrEnv(name+"-file", o.tokenFile, tokenEnv)
		if err != nil {
			return err
		}
		if token != "" {
			cmd.SetContext(context.WithValue(cmd.Context(), tokenKey{}, token))
		}
		if pre != nil {
			return pre(cmd, args)
		}
		return nil
	}
	refuseSecretFlag(cmd, name, name+"-file", tokenEnv)
}

// addServersFlags registers --server, which takes a comma-separated list of
// nodes, and --timeout on cmd, for a command that retries.
func addServersFlags(cmd *cobra.Command, o *clientOptions) {
	fs := cmd.Flags()
	fs.StringVar(&o.server, "server", defaultServer, "API addresses of nodes, comma-separated: http://host:port, https://host:port or\n"+
		"host:port; attempts rotate through them, so one dead node does not stop a retry;\n"+
		"when not given, $"+serverEnv+" if set, else the default")
	fs.DurationVar(&o.timeout, "timeout", 5*time.Second, "deadline of the whole command, retries included")
	addTLSFlags(fs, &o.tls)
	addTokenFlag(cmd, o)
}

// begin checks the flags and returns the API base URL of a command that
// talks to one node: the first of the --server list that accepts a
// connection (firstReachable), and a context that ends at the --timeout
// deadline. A server that is not a Quorate API (probeAPI) fails it with a
// *mismatchError before the command sends anything.
func (o *clientOptions) begin(ctx context.Context) (baseURL string, _ context.Context, cancel context.CancelFunc, _ error) {
	servers, ctx, cancel, err := o.beginServers(ctx)
	if err != nil {
		return "", nil, nil, err
	}
	base := firstReachable(ctx, servers)
	if err := probeAPI(ctx, o.http(), "", base); err != nil {
		cancel()
		var m *client.MismatchError
		if errors.As(err, &m) {
			return "", nil, nil, &mismatchError{m: m}
		}
		return "", nil, nil, err
	}
	return base, ctx, cancel, nil
}

// reachTimeout bounds the connection attempt to each server by
// firstReachable.
const reachTimeout = time.Second

// firstReachable returns the first of servers (base URLs) that accepts a TCP
// connection, tried in order for up to reachTimeout each (within ctx), or
// the first of them when none does: the command then fails on it with the
// error its call gets. A single server is returned without a try.
func firstReachable(ctx context.Context, servers []string) string {
	if len(servers) == 1 {
		return servers[0]
	}
	for _, s := range servers {
		u, err := url.Parse(s)
		if err != nil {
			continue
		}
		host := u.Host
		if u.Port() == "" {
			host = net.JoinHostPort(u.Hostname(), map[string]string{"http": "80", "https": "443"}[u.Scheme])
		}
		dctx, cancel := context.WithTimeout(ctx, reachTimeout)
		conn, err := (&net.Dialer{}).DialContext(dctx, "tcp", host)
		cancel()
		if err == nil {
			_ = conn.Close()
			return s
		}
	}
	return servers[0]
}

// beginServers checks the flags and returns the API base URLs of the
// comma-separated --server list and a context that ends at the --timeout
// deadline.
func (o *clientOptions) beginServers(ctx context.Context) (baseURLs []string, _ context.Context, cancel context.CancelFunc, _ error) {
	if o.timeout <= 0 {
		return nil, nil, nil, fmt.Errorf("--timeout: must be positive (got %v)", o.timeout)
	}
	us, err := serverURLs(o.tls.defaultScheme(o.server))
	if err != nil {
		return nil, nil, nil, fmt.Errorf("--server: %w", err)
	}
	if o.hc, err = o.tls.httpClient(); err != nil {
		return nil, nil, nil, err
	}
	ctx, cancel = context.WithTimeout(ctx, o.timeout)
	return us, ctx, cancel, nil
}

// tokenKey is the context key of the bearer token a command's calls send.
type tokenKey struct{}

// apiHTTPClient is the HTTP client of every API call the commands make: it
// sends the bearer token of the call's context (--token-file), if any.
var apiHTTPClient = &http.Client{Transport: tokenTransport{next: http.DefaultTransport}}

// tokenTransport adds the context's bearer token to each request.
type tokenTransport struct{ next http.RoundTripper }

func (t tokenTransport) RoundTrip(r *http.Request) (*http.Response, error) {
	if token, ok := r.Context().Value(tokenKey{}).(string); ok {
		r = r.Clone(r.Context())
		r.Header.Set("Authorization", "Bearer "+token)
	}
	return t.next.RoundTrip(r)
}

func (t tokenTransport) CloseIdleConnections() {
	if c, ok := t.next.(interface{ CloseIdleConnections() }); ok {
		c.CloseIdleConnections()
	}
}

// serverURLs parses a comma-separated list of servers with serverURL.
func serverURLs(list string) ([]string, error) {
	parts := strings.Split(list, ",")
	out := make([]string, 0, len(parts))
	for i, p := range parts {
		u, err := serverURL(p)
		if err != nil {
			if len(parts) > 1 {
				return nil, fmt.Errorf("entry %d of %q: %w", i+1, list, err)
			}
			return nil, err
		}
		out = append(out, u)
	}
	return out, nil
}

// newAdminClient and newAdmissionClient speak the Connect protocol over
// HTTP/1.1 (or HTTP/2 with TLS), which every node serves, through hc. A
// client command builds its clients with clientOptions (clienttls.go).
func newAdminClient(hc *http.Client, baseURL string) quoratev1connect.AdminServiceClient {
	return quoratev1connect.NewAdminServiceClient(hc, baseURL)
}

func newAdmissionClient(hc *http.Client, baseURL string) quoratev1connect.AdmissionServiceClient {
	return quoratev1connect.NewAdmissionServiceClient(hc, baseURL)
}

// serverURL turns "host:port", "http://host:port" or "https://host:port/"
// into a base URL without a trailing slash.
func serverURL(s string) (string, error) {
	s = strings.TrimSpace(s)
	if s == "" {
		return "", errors.New("must not be empty")
	}
	if !strings.Contains(s, "://") {
		s = "http://" + s
	}
	u, err := url.Parse(s)
	if err != nil {
		return "", err
	}
	if u.Scheme != "http" && u.Scheme != "https" {
		return "", fmt.Errorf("%q: scheme must be http or https", s)
	}
	if u.Host == "" {
		return "", fmt.Errorf("%q has no host", s)
	}
	if u.RawQuery != "" || u.Fragment != "" {
		return "", fmt.Errorf("%q: a server URL has no query or fragment", s)
	}
	return strings.TrimRight(u.String(), "/"), nil
}

// rpcError is a failed RPC: which call, against which server, and the Connect
// error with its code, message and details. Unwrap returns the
// *connect.Error, so connect.CodeOf works on it.
type rpcError struct {
	procedure string // e.g. "Admit"
	server    string
	requestID string // set for Admit, so that an unknown outcome can be retried
	err       error
}

func (e *rpcError) Unwrap() error { return e.err }

func (e *rpcError) Error() string {
	var b strings.Builder
	fmt.Fprintf(&b, "%s on %s: ", e.procedure, e.server)
	var ce *connect.Error
	if !errors.As(e.err, &ce) {
		b.WriteString(e.err.Error())
		return b.String()
	}
	b.WriteString(ce.Code().String())
	if msg := ce.Message(); msg != "" {
		b.WriteString(": " + msg)
	}
	for _, d := range ce.Details() {
		v, err := d.Value()
		if err != nil {
			continue // a detail type this binary does not know
		}
		switch v := v.(type) {
		case *quoratev1.FieldViolation:
			if strings.Contains(ce.Message(), v.GetDescription()) {
				continue // the message says it already
			}
			fmt.Fprintf(&b, " [field %s: %s]", v.GetField(), v.GetDescription())
		case *quoratev1.OutcomeUnknown:
			fmt.Fprintf(&b, " [outcome unknown: %s", v.GetReason())
			if e.requestID != "" {
				fmt.Fprintf(&b, "; retry with --request-id %s", e.requestID)
			}
			b.WriteString("]")
		case *quoratev1.NotLeader:
			if v.GetLeaderAddr() != "" {
				fmt.Fprintf(&b, " [not leader; leader is %s at %s]", v.GetLeaderId(), v.GetLeaderAddr())
			} else {
				b.WriteString(" [not leader; no leader known]")
			}
		}
	}
	return b.String()
}

// wrapRPC returns nil for a nil err, a *mismatchError when err shows that
// the client and server do not speak the same protocol (client.AsMismatch),
// else an *rpcError.
func wrapRPC(procedure, server, requestID string, err error) error {
	if err == nil {
		return nil
	}
	if m := client.AsMismatch(procedure, server, err); m != nil {
		return &mismatchError{m: m}
	}
	return &rpcError{procedure: procedure, server: server, requestID: requestID, err: err}
}

// requireFlags fails, naming every one of the flags that is missing or empty.
// (Cobra's MarkFlagRequired accepts --key "" and names flags without dashes.)
func requireFlags(cmd *cobra.Command, names ...string) error {
	var missing []string
	for _, name := range names {
		if f := cmd.Flags().Lookup(name); f == nil || f.Value.String() == "" {
			missing = append(missing, "--"+name)
		}
	}
	switch len(missing) {
	case 0:
		return nil
	case 1:
		return fmt.Errorf("%s: %s is required", cmd.Name(), missing[0])
	default:
		return fmt.Errorf("%s: %s are required", cmd.Name(), strings.Join(missing, " and "))
	}
}
