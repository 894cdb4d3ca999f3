package access

import (
	"errors"
	"fmt"
)

// ErrUnauthenticated: the request carries no usable identity (no verified
// client certificate, no known bearer token) where one is needed. Node maps
// it to Connect's Unauthenticated.
var ErrUnauthenticated = errors.New("unauthenticated")

// ErrPermissionDenied: the identity is known but may not do this. Node maps
// it to Connect's PermissionDenied.
var ErrPermissionDenied = errors.New("permission denied")

// Source says how an Identity was established.
type Source string

const (
	SourceCertificate Source = "certificate" // a verified client certificate
	SourceToken       Source = "token"       // a bearer token in the token file
	SourceNone        Source = "none"        // no credential
)

// Identity is who a request is from. Caller is meaningful only when Source
// is SourceCertificate or SourceToken; the zero Identity is anonymous.
type Identity struct {
	Caller string
	Source Source
}

// Anonymous returns the identity of a request without credentials.
func Anonymous() Identity { return Identity{Source: SourceNone} }

// authenticated reports whether id names a caller by a credential.
func (id Identity) authenticated() bool {
	return id.Caller != "" && (id.Source == SourceCertificate || id.Source == SourceToken)
}

// Authorizer makes the authorization decisions. It is safe for concurrent
// use. Build one with Open or Enforce; the zero Authorizer denies every
// action but health checks, as Enforce with no rules does.
type Authorizer struct {
	open  bool
	rules func() *Rules
}

// Open returns the Authorizer of a node without an access file: every
// action is allowed and ResolveCaller returns the caller a request names.
// The node uses it only when it listens on loopback; this package does not
// check that.
func Open() *Authorizer { return &Authorizer{open: true} }

// Enforce returns an Authorizer that decides by the access rules rules
// returns at each decision: a Watcher's Current for a reloading access
// file, or a function returning one fixed *Rules. A nil rules, or one that
// returns nil, denies every action but health checks.
func Enforce(rules func() *Rules) *Authorizer { return &Authorizer{rules: rules} }

// IsOpen reports whether a is in open mode.
func (a *Authorizer) IsOpen() bool { return a != nil && a.open }

// Authorize decides whether id may do action. policies are the policies
// the call touches; they matter only for data actions of a caller limited
// to some policies (see Action.NeedsPolicies). Health checks are allowed
// to everyone. The error wraps ErrUnauthenticated when id is not
// authenticated, ErrPermissionDenied when it may not do action; its text
// names the caller, and the role or policy missing.
func (a *Authorizer) Authorize(id Identity, action Action, policies []string) error {
	class := action.Class()
	switch {
	case class == ClassNone:
		return fmt.Errorf("%w: %s is not a classified action", ErrPermissionDenied, action)
	case class == ClassHealth:
		return nil
	case a.IsOpen():
		return nil
	case !id.authenticated():
		return fmt.Errorf("%w: %s needs a client certificate or a bearer token", ErrUnauthenticated, action)
	}
	var rules *Rules
	if a != nil && a.rules != nil {
		rules = a.rules()
	}
	if rules == nil {
		return fmt.Errorf("%w: caller %s: no access rules are loaded", ErrPermissionDenied, quote(id.Caller))
	}
	g, ok := rules.Lookup(id.Caller)
	if !ok {
		return fmt.Errorf("%w: caller %s is not in the access file", ErrPermissionDenied, quote(id.Caller))
	}
	if class == ClassRouting {
		if !g.Has(RoleAdmin) && !g.Has(RoleClient) {
			return fmt.Errorf("%w: caller %s has neither the %s nor the %s role, one of which %s needs", ErrPermissionDenied, quote(id.Caller), RoleAdmin, RoleClient, action)
		}
		return nil
	}
	role := RoleAdmin
	if class == ClassData {
		role = RoleClient
	}
	if !g.Has(role) {
		return fmt.Errorf("%w: caller %s lacks the %s role, which %s needs", ErrPermissionDenied, quote(id.Caller), role, action)
	}
	if class != ClassData || !g.Limited() {
		return nil
	}
	if len(policies) == 0 && action.NeedsPolicies() {
		return fmt.Errorf("%w: caller %s may use only some policies, and this %s names none", ErrPermissionDenied, quote(id.Caller), action)
	}
	for _, p := range policies {
		if !g.AllowsPolicy(p) {
			return fmt.Errorf("%w: caller %s may not use policy %s", ErrPermissionDenied, quote(id.Caller), quote(p))
		}
	}
	return nil
}

// ResolveCaller returns the caller that namespaces the request IDs of a
// request from id that names requested: id's caller when requested is
// empty or the same, and an error wrapping ErrPermissionDenied when it
// names another (ErrUnauthenticated when id is not authenticated). In open
// mode it returns requested as it is.
func (a *Authorizer) ResolveCaller(id Identity, requested string) (string, error) {
	switch {
	case a.IsOpen():
		return requested, nil
	case !id.authenticated():
		return "", fmt.Errorf("%w: a request ID namespace needs a client certificate or a bearer token", ErrUnauthenticated)
	case requested == "" || requested == id.Caller:
		return id.Caller, nil
	}
	return "", fmt.Errorf("%w: caller %s may not send requests as caller %s", ErrPermissionDenied, quote(id.Caller), quote(requested))
}

// MayUse reports whether id's data calls may use policy: always in open
// mode; otherwise when id's grant holds the client role and, if it is
// limited to some policies, lists policy. A caller the rules do not know
// may use none.
func (a *Authorizer) MayUse(id Identity, policy string) bool {
	if a.IsOpen() {
		return true
	}
	if !id.authenticated() || a == nil || a.rules == nil {
		return false
	}
	g, ok := a.rules().Lookup(id.Caller)
	return ok && g.Has(RoleClient) && g.AllowsPolicy(policy)
}
