// Package admission holds Quorate's admission algorithms as pure decision
// functions, plus the Policy type and its validation.
//
// # What it owns
//
//   - Policy: one admission policy as an operator writes it (name,
//     algorithm, limit, period, burst, max_cost, on_unavailable), its
//     defaults (Policy.WithDefaults) and its validation (Policy.Validate),
//     which rejects nonsense with the field's yaml/json name and bounds every
//     field so that no integer arithmetic in this package can overflow.
//   - Request validation (Policy.CheckRequest): key and cost.
//   - The algorithms, each a function of the shape
//     Decide(policy, state, cost, now) (state, decision). Only the token
//     bucket (GCRA, DecideTokenBucket) is built; the other algorithm names of
//     the design are recognised and rejected as "not implemented yet".
//
// It does not own storage, expiry indexes, deduplication, leases or the
// clock: the caller (the FSM) keeps the per-key state, stamps the time and
// reclaims state whose ExpiresAt has passed.
//
// # Determinism and threading
//
// Everything here is pure and deterministic, because it runs inside Raft's
// FSM.Apply on every replica: no clock reads (time is passed in as int64 Unix
// nanoseconds, taken from the log), no floating point, no randomness, no
// goroutines, no package-level mutable state. Functions never modify their
// arguments; new state is returned. All functions are safe to call
// concurrently; callers serialize access to the state they store (one
// Bucket per key, applied in log order).
//
// # Errors
//
// Invalid policies and requests are reported as *FieldError, which names the
// offending field and wraps ErrInvalidPolicy or ErrInvalidRequest; use
// errors.Is and errors.As, never the message text. Being over the limit is
// not an error: it is a Decision with Allowed false.
package admission
