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
// answered leaves the outcome unknown, reported as *OutcomeUnknownError.
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
// the policies it needs for this, with their versions: listed from the
// cluster when the caller may read them, else given in Config.Policies. The
// local mode admits from an in-process token bucket sized to
// Config.LocalShare of the policy. A TLS or protocol mismatch is reported at
// once as a *MismatchError (AsMismatch classifies an error), never retried
// nor hidden by a fallback.
//
// Peek, Refund, Reserve, Commit, AdmitBatch and the lease calls go through
// the same routing and retry loop. AcquireLease returns a Lease that renews
// itself at about a third of its ttl, exposes its fencing token, and ends
// its Context when it is lost or released. Invoke sends a request the
// caller built itself (any RPC of the API) through the same routing and
// retries, for programs that print the API's own messages, such as the
// quorate CLI. Config.DisableRouting sends the calls to the configured
// servers in turn instead of to leaders, Config.DisableCoalescing each Admit
// as its own call (the benchmark's --route any and unary runs).
//
// The package imports no server package of Quorate; only the leaf package
// shard (for the slot a key hashes to) and the generated API.
package client
