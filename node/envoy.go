package node

import (
	"context"
	"fmt"
	"net/http"
	"time"

	"connectrpc.com/connect"

	"github.com/quorate/quorate/access"
	"github.com/quorate/quorate/envoyrls"
	"github.com/quorate/quorate/filewatch"
	quoratev1 "github.com/quorate/quorate/proto/quorate/v1"
)

// Envoy's rate-limit service (package envoyrls) on the API port, with
// Config.EnvoyConfig. The service authorizes each call itself, as the Admit
// it becomes (the access file's client role and policies, the caller
// resolved), not through the API's interceptor, since only that Admit
// names policies; a call that counts nothing is authorized as Routes.
// Before the first decision under each version of the files, the node
// applies their policies through the meta group (not authorized again: the
// files are the operator's), in the context of the call that triggers it,
// so the audit trail names that call's caller. Every node given the same
// files applies the same definitions, which keeps their versions.

// envoyConfigInterval is how often the files are looked at, on use.
const envoyConfigInterval = time.Second

// initEnvoy loads the Envoy configuration files, watched for changes.
func (n *Node) initEnvoy() error {
	if len(n.cfg.EnvoyConfig) == 0 {
		return nil
	}
	names := n.cfg.EnvoyConfig
	w, err := filewatch.New(filewatch.Options[*envoyrls.Config]{
		Files:    names,
		Parse:    func(data [][]byte) (*envoyrls.Config, error) { return envoyrls.Parse(names, data) },
		Interval: envoyConfigInterval,
		OnChange: func(_ *envoyrls.Config, st filewatch.Status) {
			if st.Err != nil {
				n.log.Warn("envoy config not reloaded; the previous one stays in use", "err", st.Err)
				return
			}
			n.log.Info("envoy config reloaded", "files", st.Files)
		},
	})
	if err != nil {
		return fmt.Errorf("%w: --envoy-config: %v", ErrInvalidConfig, err)
	}
	n.envoy = envoyrls.New(envoyrls.Options{
		Config:    w.Current,
		Authorize: n.envoyAuthorize,
		Admit:     n.envoyAdmit,
		Apply:     n.envoyApply,
		Headers:   n.cfg.EnvoyHeaders,

		DedupeRequestID: n.cfg.EnvoyDedupeRequestID,
	})
	return nil
}

// handleEnvoy serves the rate-limit service on the API server's mux, with
// opts (the handler options without the authorization interceptor).
func (n *Node) handleEnvoy(mux *http.ServeMux, kind serverKind, opts []connect.HandlerOption) {
	if n.envoy == nil || kind != serveAPI {
		return
	}
	mux.Handle(n.envoy.Handler(opts...))
}

// envoyAuthorize authorizes req as an Admit call of the caller of ctx,
// resolving its caller. A call that counts nothing (req nil) names no
// policy: it needs a caller that may make data calls at all, as Routes.
func (n *Node) envoyAuthorize(ctx context.Context, req *quoratev1.AdmitRequest) error {
	action, msg := access.ActionRoutes, any(nil)
	if req != nil {
		action, msg = access.ActionAdmit, req
	}
	if err := n.authorize(ctx, action, msg); err != nil {
		return n.toConnectError(err)
	}
	return nil
}

// envoyAdmit decides req, authorized, as the Admit handler does (admit:
// the engine's one path, errors from the node's table), and counts its
// decision in the metrics as an Admit asked of this node (the API's
// interceptor does not see it).
func (n *Node) envoyAdmit(ctx context.Context, req *quoratev1.AdmitRequest) (*quoratev1.AdmitResponse, error) {
	resp, err := admit(ctx, n, req, false)
	n.metrics.admitted(req, resp, err)
	return resp, err
}

// envoyApply stores the configuration's policies through the meta group.
func (n *Node) envoyApply(ctx context.Context, policies []*quoratev1.Policy) error {
	_, err := (&adminHandler{n: n}).ApplyPolicies(ctx, connect.NewRequest(&quoratev1.ApplyPoliciesRequest{Policies: policies}))
	return err
}
