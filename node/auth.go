package node

import (
	"context"
	"crypto/x509"
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"strconv"
	"strings"

	"connectrpc.com/connect"

	"github.com/quorate/quorate/access"
	"github.com/quorate/quorate/certs"
	"github.com/quorate/quorate/envoyrls"
	"github.com/quorate/quorate/fsm"
	"github.com/quorate/quorate/node/internal/engine"
	quoratev1 "github.com/quorate/quorate/proto/quorate/v1"
	"github.com/quorate/quorate/proto/quorate/v1/quoratev1connect"
)

// The API edge: who a request is from (authenticate, an HTTP middleware of
// the API server) and what it may do (authInterceptor, a Connect
// interceptor). Only the API server has them. The peer port's forwarding
// server serves other nodes: a request forwarded there was authenticated,
// authorized and given its caller by the node the client called, and is
// served as it comes. That port is the cluster's trust boundary (gated by
// the cluster ID, and by mutual TLS when the peer port has it), so it does
// not authenticate callers again.

// procedureActions is the one table from the API's RPC procedures to the
// access.Action each needs. A procedure missing from it is refused.
// PeerService is absent: it is served only on the peer port.
var procedureActions = map[string]access.Action{
	"/grpc.health.v1.Health/Check": access.ActionHealth,
	"/grpc.health.v1.Health/Watch": access.ActionHealth,

	reflectionV1Procedure:      access.ActionReflection,
	reflectionV1AlphaProcedure: access.ActionReflection,

	quoratev1connect.AdminServiceClusterStatusProcedure:   access.ActionClusterStatus,
	quoratev1connect.AdminServiceNodeStatusProcedure:      access.ActionNodeStatus,
	quoratev1connect.AdminServiceJoinProcedure:            access.ActionJoin,
	quoratev1connect.AdminServiceApplyPoliciesProcedure:   access.ActionApplyPolicies,
	quoratev1connect.AdminServiceListPoliciesProcedure:    access.ActionListPolicies,
	quoratev1connect.AdminServiceGetPolicyProcedure:       access.ActionGetPolicy,
	quoratev1connect.AdminServiceDeletePoliciesProcedure:  access.ActionDeletePolicies,
	quoratev1connect.AdminServiceMoveReplicaProcedure:     access.ActionMoveReplica,
	quoratev1connect.AdminServiceDrainNodeProcedure:       access.ActionDrainNode,
	quoratev1connect.AdminServiceUncordonNodeProcedure:    access.ActionUncordonNode,
	quoratev1connect.AdminServiceRemoveNodeProcedure:      access.ActionRemoveNode,
	quoratev1connect.AdminServiceAddNodeProcedure:         access.ActionAddNode,
	quoratev1connect.AdminServiceMoveSlotsProcedure:       access.ActionMoveSlots,
	quoratev1connect.AdminServiceAddGroupProcedure:        access.ActionAddGroup,
	quoratev1connect.AdminServiceSplitGroupProcedure:      access.ActionSplitGroup,
	quoratev1connect.AdminServiceRebalanceProcedure:       access.ActionRebalance,
	quoratev1connect.AdminServiceListPlansProcedure:       access.ActionListPlans,
	quoratev1connect.AdminServiceListAuditProcedure:       access.ActionListAudit,
	quoratev1connect.AdminServiceSaveSnapshotProcedure:    access.ActionSaveSnapshot,
	quoratev1connect.AdminServiceRestoreSnapshotProcedure: access.ActionRestoreSnapshot,
	quoratev1connect.AdminServiceCancelPlanProcedure:      access.ActionCancelPlan,

	quoratev1connect.AdmissionServiceAdmitProcedure:      access.ActionAdmit,
	quoratev1connect.AdmissionServiceAdmitBatchProcedure: access.ActionAdmitBatch,
	quoratev1connect.AdmissionServicePeekProcedure:       access.ActionPeek,
	quoratev1connect.AdmissionServiceRefundProcedure:     access.ActionRefund,
	quoratev1connect.AdmissionServiceReserveProcedure:    access.ActionReserve,
	quoratev1connect.AdmissionServiceCommitProcedure:     access.ActionCommit,
	quoratev1connect.AdmissionServiceRoutesProcedure:     access.ActionRoutes,
	quoratev1connect.AdmissionServicePoliciesProcedure:   access.ActionPolicies,
	// A grant is admission decided in bulk: whoever may admit under a
	// policy may hold its grants.
	quoratev1connect.AdmissionServiceGrantProcedure: access.ActionAdmit,

	quoratev1connect.LeaseServiceAcquireLeaseProcedure: access.ActionAcquireLease,
	quoratev1connect.LeaseServiceRenewLeaseProcedure:   access.ActionRenewLease,
	quoratev1connect.LeaseServiceReleaseLeaseProcedure: access.ActionReleaseLease,
	quoratev1connect.LeaseServiceCheckFenceProcedure:   access.ActionCheckFence,
}

// procedureAction is the action procedure needs; access.ActionNone (always
// refused) for a procedure the table does not know.
func procedureAction(procedure string) access.Action {
	return procedureActions[procedure]
}

// edgeAuth is who a request of the API edge is from (authenticate) and
// what it may do (authorize, adminOnly): the access file's Authorizer and
// the token file. It is made in New from the config.
type edgeAuth struct {
	authz  *access.Authorizer              // an access file enforces its rules; without one, open
	tokens *access.Watcher[*access.Tokens] // the token file; nil without one
	// adminElsewhere is set when the node has an admin listener
	// (Config.AdminAddr): the API port refuses admin calls.
	adminElsewhere bool
	// connectErr is the node's table from errors to Connect codes
	// (errors.go).
	connectErr func(error) error
}

// newEdgeAuth reads the access and token files of cfg: an access file
// enforces its rules; without one the node is open (Validate allows that
// only on loopback).
func newEdgeAuth(cfg Config, connectErr func(error) error) (*edgeAuth, error) {
	a := &edgeAuth{adminElsewhere: cfg.AdminAddr != "", connectErr: connectErr}
	if cfg.TokenFile != "" {
		w, err := access.WatchTokens(cfg.TokenFile, access.DefaultInterval)
		if err != nil {
			return nil, fmt.Errorf("%w: --token-file: %v", ErrInvalidConfig, err)
		}
		a.tokens = w
	}
	if cfg.AccessFile == "" {
		a.authz = access.Open()
		return a, nil
	}
	w, err := access.WatchRules(cfg.AccessFile, access.DefaultInterval)
	if err != nil {
		return nil, fmt.Errorf("%w: --access-file: %v", ErrInvalidConfig, err)
	}
	a.authz = access.Enforce(w.Current)
	return a, nil
}

// identify is who r is from (access.Authenticate): the verified client
// certificate when the connection is TLS with one, and the bearer token of
// the Authorization header against the token file.
func (a *edgeAuth) identify(r *http.Request) (access.Identity, error) {
	var cert *x509.Certificate
	// Only a chain the TLS stack verified names a caller; a certificate
	// sent but not verified proves nothing.
	if r.TLS != nil && len(r.TLS.VerifiedChains) > 0 && len(r.TLS.VerifiedChains[0]) > 0 {
		cert = r.TLS.VerifiedChains[0][0]
	}
	var tokens *access.Tokens
	if a.tokens != nil {
		tokens = a.tokens.Current()
	}
	return access.Authenticate(cert, r.Header.Get("Authorization"), tokens)
}

// authErrorKey is the context key of why authenticate could not establish
// the request's identity.
type authErrorKey struct{}

// authenticate is the middleware of the API server and the admin listener
// (kind) that establishes who each request is from (access.Authenticate):
// the verified client certificate when the connection is TLS with one, and
// the bearer token of the Authorization header against the token file. The
// identity travels in the request's context (engine.WithIdentity).
//
// It refuses, before a byte of the body is read, what the headers alone
// decide (refuseBeforeBody), so that a caller without rights costs no more
// than its headers. What depends on the message (the policies a call
// names, the callers of its request IDs, the node a certificate joins as)
// authInterceptor decides once it is decoded.
func (a *edgeAuth) authenticate(kind serverKind, next http.Handler) http.Handler {
	errs := connect.NewErrorWriter()
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		id, err := a.identify(r)
		if refusal := a.refuseBeforeBody(kind, r.URL.Path, id, err); refusal != nil {
			writeRefusal(errs, w, r, a.connectErr(refusal))
			return
		}
		ctx := engine.WithIdentity(r.Context(), id)
		if err != nil {
			ctx = context.WithValue(ctx, authErrorKey{}, err)
		}
		next.ServeHTTP(w, r.WithContext(ctx))
	})
}

// refuseBeforeBody returns why a call to path with identity id (err: why
// its credential did not check out) is refused whatever its message: an
// admin call on the API port of a node with an admin listener; under an
// access file, a call whose credential does not check out, or an anonymous
// one, to a procedure that needs a role. Its errors are those
// authInterceptor would give. Health checks, and paths that are no
// procedure (the status page, metrics), pass.
func (a *edgeAuth) refuseBeforeBody(kind serverKind, path string, id access.Identity, err error) error {
	if kind == serveAPI && a.adminElsewhere && strings.HasPrefix(path, "/"+quoratev1connect.AdminServiceName+"/") {
		return ErrAdminElsewhere // whoever makes it
	}
	if a.authz.IsOpen() {
		return nil
	}
	action, ok := procedureActions[path]
	if !ok && path == envoyrls.Procedure {
		// Envoy's service authorizes each call itself, as an Admit
		// (envoy.go); none is allowed without a credential.
		action, ok = access.ActionAdmit, true
	}
	switch {
	case !ok || action.Class() == access.ClassHealth:
		return nil
	case err != nil:
		return err
	case id.Source == access.SourceNone:
		return a.authz.Authorize(id, action, nil) // unauthenticated, whatever the message
	}
	return nil
}

// writeRefusal answers r with err, a *connect.Error, in r's protocol
// (Connect, gRPC or gRPC-Web), or as plain text to a request that is none.
func writeRefusal(errs *connect.ErrorWriter, w http.ResponseWriter, r *http.Request, err error) {
	var ce *connect.Error
	if !errors.As(err, &ce) {
		ce = connect.NewError(connect.CodeInternal, err)
	}
	if errs.IsSupported(r) {
		_ = errs.Write(w, r, ce)
		return
	}
	status := http.StatusForbidden
	switch ce.Code() {
	case connect.CodeUnauthenticated:
		status = http.StatusUnauthorized
	case connect.CodeUnimplemented:
		status = http.StatusNotImplemented
	}
	http.Error(w, ce.Message(), status)
}

// authInterceptor authorizes each call of the API server by its procedure's
// action and the policies its request names, and sets the caller of its
// request IDs from the identity (access.ResolveCaller) before the handler
// reads the request.
type authInterceptor struct{ a *edgeAuth }

func (a authInterceptor) WrapUnary(next connect.UnaryFunc) connect.UnaryFunc {
	return func(ctx context.Context, req connect.AnyRequest) (connect.AnyResponse, error) {
		if err := a.a.authorize(ctx, procedureAction(req.Spec().Procedure), req.Any()); err != nil {
			return nil, a.a.connectErr(err)
		}
		return next(ctx, req)
	}
}

func (a authInterceptor) WrapStreamingClient(next connect.StreamingClientFunc) connect.StreamingClientFunc {
	return next
}

// WrapStreamingHandler authorizes a streaming call (the health Watch) by its
// action alone: no streaming procedure carries policies or callers.
func (a authInterceptor) WrapStreamingHandler(next connect.StreamingHandlerFunc) connect.StreamingHandlerFunc {
	return func(ctx context.Context, conn connect.StreamingHandlerConn) error {
		if err := a.a.authorize(ctx, procedureAction(conn.Spec().Procedure), nil); err != nil {
			return a.a.connectErr(err)
		}
		return next(ctx, conn)
	}
}

// authorize decides whether the request of ctx may do action with msg, its
// message (nil for a stream), and resolves msg's callers.
func (a *edgeAuth) authorize(ctx context.Context, action access.Action, msg any) error {
	if action.Class() == access.ClassHealth {
		return nil
	}
	if err, ok := ctx.Value(authErrorKey{}).(error); ok && !a.authz.IsOpen() {
		return err
	}
	id := engine.IdentityOf(ctx)
	if action == access.ActionJoin || action == access.ActionNodeStatus {
		if node, ok := certifiedNode(id); ok {
			return nodeMayCall(node, msg)
		}
	}
	if err := a.authz.Authorize(id, action, requestPolicies(msg)); err != nil {
		return err
	}
	return resolveCallers(msg, func(requested string) (string, error) {
		return a.authz.ResolveCaller(id, requested)
	})
}

// authorize is the edge's authorize (edgeAuth), for Envoy's service.
func (n *Node) authorize(ctx context.Context, action access.Action, msg any) error {
	return n.auth.authorize(ctx, action, msg)
}

// certifiedNode is the node id names when it is a verified certificate of
// a node (URI SAN quorate://node/<id>, signed by the CA bundle that also
// admits nodes to the peer port).
func certifiedNode(id access.Identity) (string, bool) {
	if id.Source != access.SourceCertificate {
		return "", false
	}
	u, err := url.Parse(id.Caller)
	if err != nil {
		return "", false
	}
	node, err := certs.NodeIDOfURI(u)
	return node, err == nil
}

// nodeMayCall decides the two admin calls a node's certificate may make on
// the API port without an access file entry: Join (its first join through
// --join), as the node it names only; and NodeStatus (the status members
// ask of each other). The CA that signs node certificates is what admits
// a node to the cluster, on this port as on the peer port.
func nodeMayCall(node string, msg any) error {
	if j, ok := msg.(*quoratev1.JoinRequest); ok && j.GetId() != node {
		return fmt.Errorf("%w: the certificate of node %s may not join the cluster as node %s", access.ErrPermissionDenied, strconv.Quote(node), strconv.Quote(j.GetId()))
	}
	return nil
}

// requestPolicies returns the policies msg's call touches: those it names,
// or those encoded in the reservation or lease it refers to. It returns
// none for a reference it cannot decode: access then refuses a caller
// limited to some policies.
func requestPolicies(msg any) []string {
	switch m := msg.(type) {
	case *quoratev1.AdmitRequest:
		return admitPolicies(nil, m)
	case *quoratev1.AdmitBatchRequest:
		var out []string
		for _, r := range m.GetRequests() {
			out = admitPolicies(out, r)
		}
		return out
	case *quoratev1.PeekRequest:
		return []string{m.GetPolicy()}
	case *quoratev1.ReserveRequest:
		return []string{m.GetPolicy()}
	case *quoratev1.GrantRequest:
		return []string{m.GetPolicy()}
	case *quoratev1.PoliciesRequest:
		return m.GetNames()
	case *quoratev1.CommitRequest:
		return nonEmpty(fsm.ReservationPolicy(m.GetReservationId()))
	case *quoratev1.AcquireLeaseRequest:
		out := []string{m.GetPolicy()}
		if p := m.GetReservePolicy(); p != "" {
			out = append(out, p)
		}
		return out
	case *quoratev1.RenewLeaseRequest:
		return nonEmpty(leaseIDPolicy(m.GetLeaseId()))
	case *quoratev1.ReleaseLeaseRequest:
		return nonEmpty(leaseIDPolicy(m.GetLeaseId()))
	case *quoratev1.CheckFenceRequest:
		return nonEmpty(leaseIDPolicy(m.GetLeaseId()))
	}
	return nil
}

func admitPolicies(out []string, m *quoratev1.AdmitRequest) []string {
	out = append(out, m.GetPolicy())
	for _, c := range m.GetAlso() {
		out = append(out, c.GetPolicy())
	}
	return out
}

func nonEmpty(s string) []string {
	if s == "" {
		return nil
	}
	return []string{s}
}

// leaseIDPolicy is the policy a lease ID names ("" when it is not one);
// parseLeaseID checks the rest when the call is served.
func leaseIDPolicy(id string) string {
	policy, _, _, _, _ := fsm.ParseLeaseID(id)
	return policy
}

// resolveCallers sets the caller of every request ID msg carries to
// resolve's answer for the caller it names.
func resolveCallers(msg any, resolve func(requested string) (string, error)) error {
	var err error
	set := func(c *string) {
		if err == nil {
			*c, err = resolve(*c)
		}
	}
	switch m := msg.(type) {
	case *quoratev1.AdmitRequest:
		set(&m.Caller)
	case *quoratev1.AdmitBatchRequest:
		for _, r := range m.GetRequests() {
			set(&r.Caller)
		}
	case *quoratev1.RefundRequest:
		set(&m.Caller)
	case *quoratev1.ReserveRequest:
		set(&m.Caller)
	case *quoratev1.GrantRequest:
		set(&m.Caller)
	case *quoratev1.CommitRequest:
		set(&m.Caller)
	case *quoratev1.AcquireLeaseRequest:
		set(&m.Caller)
	case *quoratev1.RenewLeaseRequest:
		set(&m.Caller)
	case *quoratev1.ReleaseLeaseRequest:
		set(&m.Caller)
	case *quoratev1.CheckFenceRequest:
		set(&m.Caller)
	}
	return err
}
