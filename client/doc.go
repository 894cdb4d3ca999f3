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
// When no decision is possible before the deadline, Admit applies the
// policy's on_unavailable mode (deny, allow, local) and says so in
// Decision.Outcome: a bypass or a local decision is never reported as a
// verified admission.
//
// The package imports no server package of Quorate; only the leaf package
// shard (for the slot a key hashes to) and the generated API.
package client
