// Package client is Quorate's Go client: the one way a Go program, the
// quorate CLI, the benchmark and the fault-injection harness talk to a
// cluster.
//
// A Client connects to any list of nodes, learns the shard map from
// AdmissionService.Routes and sends each call straight to the leader of its
// key's group, asking again when an answer shows the map is stale. Every
// call has a deadline. Every Admit carries a request ID (generated when the
// caller gives none) and is retried with that same ID, with exponential
// backoff and jitter, across nodes until the deadline: a retry that reaches
// a leader which already applied the request gets the recorded answer and
// spends nothing. An attempt that may have been applied and was never
// answered leaves the outcome unknown, reported as *OutcomeUnknownError
// (also when a later attempt got an answer that does not say whether the
// earlier one was applied). Any other error means no attempt was applied. A
// request that certainly never left this process (its context ended while
// it waited to join a batch) matches ErrNotSent; a call out of time whose
// outcome is known matches context.DeadlineExceeded (errors.Is) besides
// carrying its last attempt's error.
//
// Admits bound for one leader that overlap in time are coalesced: a call
// that finds nothing in flight to its leader goes at once, alone; calls that
// arrive meanwhile go together as the next AdmitBatch call (up to 1000),
// each getting its own answer or error. There is no timer.
//
// When no decision is possible before the deadline, Admit applies the
// policy's on_unavailable mode (deny, allow, local) and says so in
// Decision.Outcome: a bypass or a local decision is never reported as a
// verified admission, and Stats counts each outcome apart. The client keeps
// the policies it needs for this, with their versions: those the caller may
// use, read from the cluster with its own role (AdmissionService.Policies,
// a data call), else given in Config.Policies. A policy it decides under
// but cannot read is reported once: a warning on Config.Logger and
// Stats.PoliciesUnknown. The
// local mode admits from an in-process token bucket sized to
// Config.LocalShare of the policy. A TLS or protocol mismatch is reported at
// once as a *MismatchError (AsMismatch classifies an error), never retried
// nor hidden by a fallback.
//
// For a policy whose local.mode is grant the client holds budget leases
// (AdmissionService.Grant): per (policy, key) it admits, a grant of units
// already spent in the key's log, acquired in the background at the key's
// first request and decided from in memory (Outcome LocalGrant, no call)
// only when the request has no MaxWait and the grant holds its cost, else by
// the normal call, so every denial comes from the cluster. A request with
// Also is decided so only when every check's grant holds its check's cost,
// all or nothing. The client renews the grant in the background through the
// same retry loop when the unspent units fall under a quarter of the last
// grant or at half its local lifetime, reporting the units used and the
// demand (units per second, averaged over the recent renewals) and asking
// for twice the demand over half a ttl (1 to max_grant). A grant stops being
// spent at its local deadline (the call's send time plus expires_at -
// decided_at, less a margin), is wasted when an answer shows a new
// started_at, and is released (total - used given back) when its key was
// idle for a ttl and at Close. Grant answered Unimplemented, InvalidArgument
// or FailedPrecondition makes the policy strict for a while; a
// FailedPrecondition to a renewal (a seq behind the grant's) first drops the
// grant and asks for a new one. Stats and Collector count the local
// decisions, grants acquired, renewed and released, and units granted,
// returned and wasted; Config.DisableGrants turns grants off; AdmitInto
// writes the decision into the caller's Decision (a local one allocates
// nothing). A LocalGrant Decision's DecidedAt is the log time its units were
// granted (the latest answer of the grant they came from: every top-up of a
// window grant lies in one window, so it names the unit's window).
//
// A Holder is the same grant machinery for a process that decides for
// callers who cannot hold grants of their own (a Quorate node answering
// JSON, gRPC and Envoy callers): it sends Grant with the process's own call
// and knows policies as the process does; Holder.Decide is Admit's local
// path without the call, nil meaning decide strictly.
//
// For a policy whose local.mode is sync (local-plus-global) the client holds
// an allowance instead of a grant: units the client may admit until its next
// report, nothing spent ahead. The caller sees the same thing (Outcome
// LocalGrant, the strict call once the allowance is spent). Every
// local.sync_interval (default 1s), and early — at most every quarter
// interval — when the allowance runs out while the key is in demand, the
// client reports the units admitted over the state's life (used) and its
// demand, asking for twice the demand over an interval; the answer's
// allowance replaces the last, less what was admitted while the report was
// in flight. It stops being used at its local deadline, as a grant; a key
// idle for two sync intervals, and Close, send a final report (release). A
// key may then be over-admitted by at most the policy's bound, ceil(limit ×
// sync_interval / period) units per window: a bound, not exactness. Stats
// counts allowances and reports in GrantsAcquired/Renewed/Released and
// UnitsAllowed/UnitsReported; UnitsGranted, UnitsReturned and UnitsWasted
// are grant-mode counts (the cluster counts what it charged for allowances
// never reported).
//
// Peek, Refund, Reserve, Commit, AdmitBatch and the lease calls go through
// the same routing and retry loop. AcquireLease returns a Lease that renews
// itself at about a third of its ttl, exposes its fencing token, and ends
// its Context when it is lost, released or abandoned (Abandon: no more
// renewals, the slot held until it expires). A Lease also exposes its
// acquire's answer — log times (DecidedAt, ExpiresAt, the latter updated by
// each renewal) and whether it was a duplicate — and AcquireLeaseWith takes
// the caller's request ID and LeaseOptions.ManualRenew, which leaves the
// renewals to Renew (or RenewWithID), each returning its answer's log
// times. LeaseOptions.MaxWait parks the acquire until a slot frees (the
// call's default deadline grows by it), and ReservePolicy/ReserveEstimate
// hold units of a rate or quota policy with the lease, which ReleaseWith
// settles at the work's real cost (ReleaseOptions.ActualCost) and Release
// at the whole estimate. Lease.CheckFence answers a FenceCheck (held,
// expiry, decided_at); only the lease's holder may ask. A lease's ID
// (and a reservation's) carries a secret: keep it as private as a
// credential.
// Config.NoPolicyFetch keeps a short-lived client from asking for
// policies it will not use. Invoke sends a request the
// caller built itself (any RPC of the API) through the same routing and
// retries, for programs that print the API's own messages, such as the
// quorate CLI. Config.DisableRouting sends the calls to the configured
// servers in turn instead of to leaders, Config.DisableCoalescing each Admit
// as its own call (the benchmark's --route any and unary runs).
//
// The package is in the Go module github.com/quorate/quorate/client, with
// the middleware (package middleware) and the slot hash (package slot). A
// service that imports it requires only what the client imports — the
// generated API (module github.com/quorate/quorate/proto), Connect,
// protobuf, Prometheus' client library and a few small packages — none of
// the server's dependencies.
package client
