package client

import (
	"errors"
	"fmt"
	"time"
)

// Request is one admission: a policy, a key and a cost, and optionally more
// checks decided atomically with it.
type Request struct {
	Policy string
	Key    string
	// Cost is the units the request spends; 0 means 1.
	Cost int64
	// RequestID identifies the request for retries; the client generates one
	// (128 random bits) when it is empty. Give your own to make a retry of
	// your own (e.g. after a crash) spend nothing.
	RequestID string
	// Also are more checks decided atomically with the first: all admitted
	// and charged, or none charged. Every key must share the first key's
	// hash tag (the part in {...}).
	Also []Check
	// MaxWait paces a token-bucket request instead of denying it (see
	// AdmitRequest.max_wait).
	MaxWait time.Duration
	// NoFallback returns the error when no decision is possible instead of
	// applying the policy's on_unavailable mode.
	NoFallback bool
}

// Check is one more (policy, key, cost) of a multi-check Request.
type Check struct {
	Policy string
	Key    string
	// Cost is the units the check spends; 0 means 1.
	Cost int64
}

// Outcome says who decided.
type Outcome int

const (
	// Verified: the cluster decided, through the key's Raft log.
	Verified Outcome = iota
	// Unavailable: no decision was possible and the policy's on_unavailable
	// is deny: the request is denied without the cluster.
	Unavailable
	// Bypassed: no decision was possible and the policy's on_unavailable is
	// allow: the request is allowed without being counted anywhere.
	Bypassed
	// LocalDecision: no decision was possible and the policy's on_unavailable
	// is local: this process decided with its own token bucket, sized to its
	// configured share of the policy.
	LocalDecision
	// LocalGrant: the request was allowed by this process from units of a
	// budget lease (grant) it holds for the policy and key, already spent
	// in the key's log when granted: exact, but without a call. Only
	// allowed requests are decided so; every denial comes from the
	// cluster.
	LocalGrant
)

func (o Outcome) String() string {
	switch o {
	case Verified:
		return "verified"
	case Unavailable:
		return "unavailable"
	case Bypassed:
		return "bypassed"
	case LocalDecision:
		return "local"
	case LocalGrant:
		return "grant"
	}
	return fmt.Sprintf("Outcome(%d)", int(o))
}

// Decision is the answer to a Request.
type Decision struct {
	// Allowed says whether the request may proceed; when false nothing was
	// spent.
	Allowed bool
	// Outcome says who decided; only Verified decisions were counted by the
	// cluster.
	Outcome Outcome
	// Cause is why the decision is not Verified: the last attempt's error.
	Cause error
	// RequestID is the request's ID (the one generated, when the caller gave
	// none; a LocalGrant decision generates none: it made no call).
	RequestID string

	Limit int64
	// Remaining is what the policy leaves for the key after this request.
	// A LocalGrant decision estimates it: the key's units at the grant's
	// last answer, less what this client spent of its grant since (other
	// clients spend meanwhile, and a bucket refills).
	Remaining int64
	// ResetAfter is when the key is whole again (a bucket full, a window
	// over); for a LocalGrant decision, as of the grant's last answer.
	ResetAfter time.Duration
	// RetryAfter is, when denied, the time after which the same request
	// would be allowed if nothing else spends meanwhile.
	RetryAfter time.Duration
	// Window is the policy's window (period of a rate policy, the current
	// calendar period of a quota; zero for a concurrency policy).
	Window time.Duration
	// Quota is the policy's units per Window a key may sustain: its limit
	// (Limit above is a token bucket's burst); 0 when the answer does not
	// say (a policy changed since the decision).
	Quota         int64
	PolicyVersion uint64
	// DecidedAt is the server time of the decision, from the log; zero
	// unless Verified or LocalGrant. For LocalGrant it is the log time at
	// which the units were granted: that of the latest answer of the grant
	// they came from. Every top-up of a window grant lies in one window
	// (a grant expires at the latest at the end of the window it began
	// in), so it names the window the unit was spent in.
	DecidedAt time.Time
	// Duplicate: the recorded answer to an earlier attempt with this
	// request ID; nothing was spent now.
	Duplicate bool
	// Wait is how long to wait before proceeding (pacing with MaxWait).
	Wait         time.Duration
	ShadowDenied bool
	// Checks are every check's own decision for a multi-check Request, the
	// request's own (Policy, Key) first.
	Checks []CheckResult
	// DeniedCheck is the index in Checks of the first check that denied, -1
	// when none did (or the request had no Also).
	DeniedCheck int
}

// CheckResult is one check's decision in a multi-check Decision.
type CheckResult struct {
	Policy        string
	Key           string
	Allowed       bool
	Limit         int64
	Remaining     int64
	ResetAfter    time.Duration
	RetryAfter    time.Duration
	Window        time.Duration
	Quota         int64
	PolicyVersion uint64
	ShadowDenied  bool
}

// OutcomeUnknownError is the failure of a request some attempt of which may
// have been applied: the deadline ended before an answer. Retrying with the
// same RequestID is the only way to learn the outcome without spending
// twice.
type OutcomeUnknownError struct {
	RequestID string
	Attempts  int
	// Last is the last attempt's error.
	Last error
}

func (e *OutcomeUnknownError) Error() string {
	return fmt.Sprintf("outcome unknown after %d attempts (request ID %q): the request may or may not have been applied; retry with the same request ID: %v", e.Attempts, e.RequestID, e.Last)
}

func (e *OutcomeUnknownError) Unwrap() error { return e.Last }

// ErrNoServers is returned by New when Config lists no server.
var ErrNoServers = errors.New("client: no server given")
