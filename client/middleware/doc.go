// Package middleware puts Quorate in front of an HTTP or Connect/gRPC
// service: every request is admitted by one atomic multi-limit check before
// the handler runs, and every answer advertises the limits in the IETF
// RateLimit-Policy and RateLimit fields (draft-ietf-httpapi-ratelimit-headers).
//
// # Keys
//
// A Limiter has one identity extractor list and a list of Limits. The
// identity (the first extractor of WithIdentity that yields a value: an
// authenticated principal, a header set by a trusted proxy, the client IP)
// is the hash tag of every key of the request, so all its checks live on
// one slot and are decided atomically: a limit's key is
// "{<identity>}" followed by ":<part>" for each of the limit's key parts
// (the route template, a constant). The cost of the check on the whole
// request is spent on every limit or on none. A limit shared by every
// identity (one global budget) has another tag and cannot join the same
// atomic check; give it its own Limiter.
//
// The extractors:
//   - Principal: the authenticated principal your authentication middleware
//     put in the request context ("user:<name>").
//   - Proxies.Header: a header, only when the immediate peer (RemoteAddr) is
//     a trusted proxy ("<header-name>:<value>").
//   - Proxies.ClientIP: the client address, normalized: an IPv4 address, or
//     the IPv6 /64 it lies in (one host usually owns a whole /64). Through
//     trusted proxies only, it walks X-Forwarded-For (or Forwarded) from the
//     right and takes the first hop that is not a trusted proxy; an
//     untrusted peer's forwarding headers are ignored.
//   - Route: the route template (http.Request.Pattern of a Go 1.22+
//     ServeMux, the procedure name under Connect), never the raw path.
//     Route reads r.Pattern, so the limiter must wrap each handler inside
//     the mux; MuxRoute(mux) serves a limiter wrapping the whole mux.
//
// A request whose identity or key part cannot be extracted is answered 400
// (InvalidArgument under Connect) by default; WithMissingKey(SkipMissing)
// lets it through without that limit instead (without any limit when the
// identity is missing).
//
// # Answers
//
// A verified decision (client.Verified) and one the client made from
// budget leases (client.LocalGrant: a request every limit of which is under
// a policy with local decisions, each limit's grant holding its cost, all
// or nothing; exact, as the units were spent in the log when granted) set
// on every answer
//
//	RateLimit-Policy: "per-user";q=60;w=60;quorate-burst=20, "per-route";q=5;w=1
//	RateLimit: "per-user";r=12;t=9, "per-route";r=0;t=1
//
// one item per limit, in the order of the limits. q is what a client may
// sustain per window w: the policy's limit per period (a quota's per
// calendar period, w that period's length), for a token bucket its refill,
// with its burst (the most at once) as the vendor parameter quorate-burst
// when it differs. r is what is left now and t, in whole seconds rounded
// up, the time until every spent unit is back (the window's end for a
// fixed window or a quota; a token bucket, a sliding window or log gives
// units back sooner, one by one), except that the denied limit's t is its
// Retry-After (the draft wants Retry-After no earlier than the end of t).
// A LocalGrant answer's r is the key's remaining as the client knows it
// (at its grant's last answer, less what it spent of the grant since) and
// t the reset as of that answer.
// On a denial nothing is spent, and r shows every limit as it stands (the cluster reports a passing check with
// its cost taken off; the middleware adds it back). WithXRateLimitHeaders
// adds X-RateLimit-Limit (q), X-RateLimit-Remaining (r) and
// X-RateLimit-Reset (t, seconds from now) of one limit, for clients that
// know only those. A denial is 429 Too Many Requests with Retry-After in
// whole seconds, rounded up and at least 1, and names the limit that denied
// in the body and in Quorate-Denied-By: "per-route". Under Connect a denial is
// ResourceExhausted with a google.rpc.RetryInfo and a google.rpc.QuotaFailure
// (whose subject is the limit's name) detail, and the fields above in the
// response headers (in the trailers of a gRPC error).
//
// A decision the cluster did not make (Bypassed, LocalDecision, Unavailable:
// the policy's on_unavailable mode applied by the client) is passed to the
// WithOnUnverified hook and carries no RateLimit fields: nobody counted it.
// A bypass or an allowed local decision lets the request through; a denied
// local decision is 429 with Retry-After; Unavailable (on_unavailable: deny)
// is 503. An error from Admit (the deadline ended, outcome unknown, a bad
// key) goes to the WithOnError hook and is 503 (Unavailable) by default, or
// lets the request through with WithFailMode(FailOpen). A key longer than
// the cluster accepts (512 bytes) is such an error: keep key parts short.
// Every 503 carries Retry-After (1 s, or WithUnavailableRetryAfter's), and
// under Connect a RetryInfo.
//
// # Retries and failures
//
// WithIdempotencyKey makes the Idempotency-Key field of a POST or PATCH (a
// structured-field String, or Stripe's bare value) the admission's request
// ID: an HTTP retry with the same key gets the first attempt's answer and
// is not charged again; the key used again for another request is 422. A
// retry of a denied request is denied until its Retry-After has passed,
// then decided anew. Every repeat of a key passes uncharged: use it before
// handlers that replay a key's first answer rather than redo the work. WithRefundOnServerError gives back what a request
// spent when the handler answers 5xx (under Connect: Unknown, Internal,
// Unimplemented, Unavailable, DataLoss, DeadlineExceeded), through the
// client's Refund with the request's ID; a request admitted from a budget
// lease has no ID and is not refunded. A keyed request refunded after a 5xx
// and retried under its key is not charged again.
//
// # Connect
//
// Limiter.Interceptor limits unary calls and, once at stream start, streams
// handled by the server (a stream is one request however many messages it
// carries). Client-side calls pass through untouched. Key extractors and Cost
// see a request built from the call: its context, headers, peer address,
// HTTP method, and the procedure as Pattern; it has no body.
package middleware
