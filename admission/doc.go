// Package admission holds Quorate's admission algorithms as pure decision
// functions, plus the Policy type and its validation.
//
// # What it owns
//
//   - Policy: one admission policy as an operator writes it (name,
//     algorithm, limit, period, burst, max_cost, calendar, shadow,
//     on_unavailable, dedupe_retention, local), its defaults (Policy.WithDefaults)
//     and its validation (Policy.Validate), which rejects nonsense with the
//     field's yaml/json name and bounds every field so that no integer
//     arithmetic in this package can overflow.
//   - Request validation (Policy.CheckRequest, CheckKeyCost): key and cost.
//   - Local decisions (Local, local.go): a policy's budget leases (mode
//     grant, max_grant, ttl) and when a grant expires (GrantExpiry: no
//     later than the end of a window or quota period, WindowEnd); the
//     local-plus-global mode (sync, sync_interval), its over-admission
//     bound (SyncBound) and allowance expiry (SyncExpiry).
//   - The algorithms, all strict and in integer nanoseconds, behind one
//     dispatch: Decide(policy, state, cost, now) (state, decision),
//     ExpiresAt(policy, state), Peek(policy, state, now) and
//     Refund(policy, state, spend, now), Charge(policy, state, cost, now)
//     (consumption already admitted, spent even past the limit), where a
//     Spend records what one
//     admitted request took (SpendOf: its cost, when it was decided, where
//     its share of the state ends, and for a token bucket which refunds
//     came after it: State.Shifted and RefundMark, refund.go). State is
//     one value type for every
//     algorithm, tagged with the Kind that wrote it:
//   - token_bucket: GCRA, one theoretical arrival time per key; bursts up to
//     burst, limit per period sustained, weighted costs, exact retry_after.
//   - fixed_window: a counter per window of one period aligned to the Unix
//     epoch. It admits up to 2×limit around a window boundary.
//   - sliding_window: the previous window's count weighted by how much of
//     it the rolling period still covers, plus the current count, evaluated
//     exactly in 128-bit integers. Any rolling period holds at most
//     2×limit−1 units (the proof is in slidingwindow.go); shorter spans far
//     fewer.
//   - sliding_log: every admitted request of the last period (at most limit
//     entries per key, limit ≤ 10000): an exact rolling window that never
//     admits more than limit in any period.
//   - quota: a counter per calendar period in UTC — day, week from Monday,
//     month, year — not "30 days".
//
// When a policy changes, a key keeps its state and the new definition
// applies from the next decision: a token bucket keeps its theoretical
// arrival time (a smaller burst may deny until it drains); counters keep
// their counts for the current window (a smaller limit denies until the
// window ends; a different period or calendar starts a new window); a
// sliding log keeps its entries. A state written by another algorithm counts
// as a new key.
//
// It does not own storage, expiry indexes, deduplication, leases or the
// clock: the caller (the FSM) keeps the per-key state, stamps the time and
// reclaims state whose ExpiresAt has passed — expired state decides exactly
// like a new key.
//
// # Determinism and threading
//
// Everything here is pure and deterministic, because it runs inside Raft's
// FSM.Apply on every replica: no clock reads (time is passed in as int64 Unix
// nanoseconds, taken from the log), no floating point, no randomness, no
// goroutines, no package-level mutable state. Functions never modify their
// arguments; new state is returned. All functions are safe to call
// concurrently; callers serialize access to the state they store (one
// State per key, applied in log order).
//
// # Errors
//
// Invalid policies and requests are reported as *FieldError, which names the
// offending field and wraps ErrInvalidPolicy or ErrInvalidRequest; use
// errors.Is and errors.As, never the message text. Being over the limit is
// not an error: it is a Decision with Allowed false.
package admission
