package client

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"time"

	quoratev1 "github.com/quorate/quorate/proto/quorate/v1"
)

// Holder holds budget leases for a process that decides for callers who
// cannot hold their own (a Quorate node answering JSON, gRPC and Envoy
// callers). It is the Client's grant machinery — the same protocol, sizing
// by demand share, renewal, expiry, release, sync mode, stripes, multi-check
// all or nothing and accounting — with the process's own Grant call and
// policies instead of the Client's routing and policy table. It keeps
// grant state for at most 10,000 keys at once (those idle make room);
// requests of keys beyond are decided strictly. Safe for concurrent use.
type Holder struct {
	g *grants
}

// HolderConfig configures a Holder. Grant and Policy are required.
type HolderConfig struct {
	// Grant makes one AdmissionService.Grant call (the holder retries on
	// its own schedule). Its errors are Connect errors (*connect.Error with
	// the node's codes): a refusal (Unimplemented, InvalidArgument,
	// FailedPrecondition, NotFound, PermissionDenied, Unauthenticated)
	// makes the policy strict for a while, as it does for a Client.
	Grant func(ctx context.Context, req *quoratev1.GrantRequest) (*quoratev1.GrantResponse, error)
	// Policy is the policy named as the process knows it; false when it
	// does not (the policy's requests are then never decided from grants).
	// Asked, as Want is, only at a request of a key the holder keeps no
	// grant state for, never for a decision from a grant.
	Policy func(name string) (*quoratev1.Policy, bool)
	// Want, if set, is asked at a key's request when the holder keeps no
	// grant state for it, before it starts acquiring a grant: false keeps
	// the key strict (it is asked again at the key's next request). For a
	// hot-key filter; nil means every key of a policy with local decisions.
	Want func(policy, key string) bool
	// Caller is who the grants are held as (GrantRequest.caller), e.g. the
	// node's caller name.
	Caller string
	// Timeout is each Grant call's deadline; 0 means 2s, as Config's.
	Timeout time.Duration
	// Logger gets the Grant calls' failures at Debug; nil means
	// slog.Default().
	Logger *slog.Logger
}

// NewHolder returns a Holder holding no grant yet: each key's first
// request to Decide starts acquiring one.
func NewHolder(cfg HolderConfig) (*Holder, error) {
	switch {
	case cfg.Grant == nil:
		return nil, errors.New("client: HolderConfig.Grant is required")
	case cfg.Policy == nil:
		return nil, errors.New("client: HolderConfig.Policy is required")
	case cfg.Timeout < 0:
		return nil, fmt.Errorf("client: HolderConfig.Timeout must not be negative (got %v)", cfg.Timeout)
	case cfg.Timeout == 0:
		cfg.Timeout = 2 * time.Second
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	policy := cfg.Policy
	src := grantSource{
		send: cfg.Grant,
		policy: func(name string) (Policy, bool) {
			p, ok := policy(name)
			if !ok || p == nil {
				return Policy{}, false
			}
			return policyOf(p), true
		},
		want: cfg.Want, caller: cfg.Caller, timeout: cfg.Timeout, logger: cfg.Logger,
	}
	return &Holder{g: newGrants(src)}, nil
}

// Decide decides r from its key's grant when it can, as a Client's Admit
// does before calling: an allowed Decision with Outcome LocalGrant, its
// units spent in the key's log before the holder got them. nil means the
// caller must decide r strictly (through the key's log), and so every
// denial comes from the cluster; a key's first request (that Want accepts,
// of a policy with local decisions) starts acquiring a grant in the
// background. A request with a RequestID (a grant records none), MaxWait
// or a negative cost is never decided from a grant; a request with Also
// is, only when every check's grant holds its check's cost, all or
// nothing. Decide never blocks on a call.
func (h *Holder) Decide(r *Request) *Decision { return h.g.admit(r) }

// HolderStats are a Holder's counters, as Stats counts a Client's (see
// Stats for each field's meaning).
type HolderStats struct {
	// GrantsHeld are the grants (or sync-mode allowances) held now.
	GrantsHeld uint64
	// LocalGrant are the requests Decide allowed from grants.
	LocalGrant uint64
	// GrantsAcquired, GrantsRenewed and GrantsReleased count the grants
	// begun, renewed and given back.
	GrantsAcquired, GrantsRenewed, GrantsReleased uint64
	// UnitsGranted, UnitsReturned and UnitsWasted are grant mode's units by
	// fate: once every grant has ended, UnitsGranted = the units of the
	// LocalGrant decisions + UnitsReturned + UnitsWasted.
	UnitsGranted, UnitsReturned, UnitsWasted uint64
	// UnitsAllowed and UnitsReported are sync mode's allowances and
	// reports.
	UnitsAllowed, UnitsReported uint64
}

// Stats returns the holder's counters.
func (h *Holder) Stats() HolderStats {
	var s Stats
	h.g.stats(&s)
	return HolderStats{GrantsHeld: s.GrantsHeld, LocalGrant: s.LocalGrant,
		GrantsAcquired: s.GrantsAcquired, GrantsRenewed: s.GrantsRenewed, GrantsReleased: s.GrantsReleased,
		UnitsGranted: s.UnitsGranted, UnitsReturned: s.UnitsReturned, UnitsWasted: s.UnitsWasted,
		UnitsAllowed: s.UnitsAllowed, UnitsReported: s.UnitsReported}
}

// Close releases every grant held, giving back its unspent units, waiting
// at most the shorter of Timeout and a second for the answers (as
// Client.Close does), and ends the holder's background work. Decide
// returns nil after Close.
func (h *Holder) Close() { h.g.close() }
