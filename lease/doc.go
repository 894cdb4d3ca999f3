// Package lease is the per-key semaphore behind Quorate's concurrency
// leases: limit slots per key, each held by a lease with a fencing token and
// a TTL of log time, renewed and released by its holder.
//
// # What it owns
//
//   - Semaphore: one key's state, its leases sorted by Token and the last
//     token issued. The zero Semaphore is a key never seen.
//   - Acquire, Renew, Release, Holds (CheckFence) and Live: pure functions
//     of a Semaphore and the log time now.
//   - ExpiresAt: when a Semaphore decides like the zero Semaphore, so that
//     the caller may reclaim it; Shift: the leader-change rule.
//   - Check: the bounds on limit (1..MaxLimit) and ttl (1..MaxTTL).
//
// It does not own storage, the expiry index, request-ID deduplication or the
// clock: the FSM keeps one Semaphore per key, stamps the time and reclaims
// state once its logged now reaches ExpiresAt.
//
// # Invariants
//
// A lease is live at now iff now < ExpiresAt, where now is the log time
// passed in; nothing else expires a lease. Acquire never makes more than
// limit leases live. Tokens are unique and strictly increasing per key: a new
// token is max(LastToken+1, now+jitter) (Claim.Jitter, random, so that a
// token does not follow from the expiry a denial shows), so it is above
// every earlier token of the key and never below the log time; a Semaphore
// reclaimed at now ≥ ExpiresAt(s) ≥ LastToken+1 and recreated therefore
// still issues greater tokens. Renew, Release and Holds refuse (ErrStale,
// false) a token that is not live at now (expired, released, never issued,
// or another key's) or not held by the Holder asking: to anyone but the
// caller that acquired it, with its secret, a lease does not exist.
//
// # Leader changes
//
// A new leader never expires a lease earlier than the old leader would have.
// On a leader change the FSM calls Shift(s, N−L), where L is the old
// leader's last log time and N ≥ L the new leader's first: every lease live
// at L then has, at N, exactly the time it had left at L in the old leader's
// log time, so lease time does not run while no leader could renew; leases
// expired at L stay expired. A lease may thus outlive its TTL in wall-clock
// time; that is safe because the resource checks the fencing token, which a
// later holder always has greater. See DESIGN.md.
//
// # Determinism and threading
//
// Everything runs inside Raft's FSM.Apply on every replica, so it is pure and
// deterministic: time is passed in (int64 Unix nanoseconds from the log),
// integer arithmetic only (sums saturate at math.MaxInt64), no randomness, no
// goroutines, no maps, no package-level mutable state. Functions never
// modify their arguments (a returned Semaphore may share its Leases array
// with the argument, so callers treat Leases as read-only) and are safe to
// call concurrently; callers serialize the state they store.
//
// # Errors
//
// Renew and Release return errors wrapping ErrStale (not the holder: Connect
// FailedPrecondition) or ErrInvalid (bad ttl: InvalidArgument); use
// errors.Is. A full semaphore is not an error: Acquire returns a Decision
// with Allowed false and an exact RetryAfter. Acquire fails closed on an
// invalid limit or ttl (RetryAfter NeverRetry); callers Check first.
package lease
