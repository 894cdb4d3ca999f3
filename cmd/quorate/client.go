package main

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"net/url"
	"strings"
	"time"

	"connectrpc.com/connect"
	"github.com/spf13/cobra"

	"github.com/quorate/quorate/client"
	"github.com/quorate/quorate/cmd/internal/apiflags"
	quoratev1 "github.com/quorate/quorate/proto/quorate/v1"
	"github.com/quorate/quorate/proto/quorate/v1/quoratev1connect"
)

// clientOptions are the flags every client command shares.
type clientOptions struct {
	server    string
	timeout   time.Duration
	tokenFile string       // --token-file
	tls       apiflags.TLS // --tls-ca, --tls-cert, --tls-key
	hc        *http.Client // built by beginServers from tls
}

// addClientFlags registers --server, --timeout and --token-file on cmd.
func addClientFlags(cmd *cobra.Command, o *clientOptions) {
	fs := cmd.Flags()
	fs.StringVar(&o.server, "server", apiflags.DefaultServer, "API addresses of nodes, comma-separated: http://host:port, https://host:port or\n"+
		"host:port; the command talks to the first that accepts a connection;\n"+
		"when not given, $"+apiflags.ServerEnv+" if set, else the default")
	fs.DurationVar(&o.timeout, "timeout", 5*time.Second, "deadline of the whole command")
	apiflags.AddTLSFlags(fs, &o.tls)
	apiflags.AddTokenFlag(cmd, &o.tokenFile)
}

// addServersFlags registers --server, which takes a comma-separated list of
// nodes, and --timeout on cmd, for a command that retries.
func addServersFlags(cmd *cobra.Command, o *clientOptions) {
	fs := cmd.Flags()
	fs.StringVar(&o.server, "server", apiflags.DefaultServer, "API addresses of nodes, comma-separated: http://host:port, https://host:port or\n"+
		"host:port; attempts rotate through them, so one dead node does not stop a retry;\n"+
		"when not given, $"+apiflags.ServerEnv+" if set, else the default")
	fs.DurationVar(&o.timeout, "timeout", 5*time.Second, "deadline of the whole command, retries included")
	apiflags.AddTLSFlags(fs, &o.tls)
	apiflags.AddTokenFlag(cmd, &o.tokenFile)
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
	us, err := apiflags.ServerURLs(o.tls.DefaultScheme(o.server))
	if err != nil {
		return nil, nil, nil, fmt.Errorf("--server: %w", err)
	}
	if o.hc, err = httpClientOf(o.tls); err != nil {
		return nil, nil, nil, err
	}
	ctx, cancel = context.WithTimeout(ctx, o.timeout)
	return us, ctx, cancel, nil
}

// apiHTTPClient is the HTTP client of every API call the commands make: it
// sends the bearer token of the call's context (--token-file), if any.
var apiHTTPClient = &http.Client{Transport: apiflags.WithToken(http.DefaultTransport)}

// newAdminClient and newAdmissionClient speak the Connect protocol over
// HTTP/1.1 (or HTTP/2 with TLS), which every node serves, through hc. A
// client command builds its clients with clientOptions (clienttls.go).
func newAdminClient(hc *http.Client, baseURL string) quoratev1connect.AdminServiceClient {
	return quoratev1connect.NewAdminServiceClient(hc, baseURL)
}

func newAdmissionClient(hc *http.Client, baseURL string) quoratev1connect.AdmissionServiceClient {
	return quoratev1connect.NewAdmissionServiceClient(hc, baseURL)
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
