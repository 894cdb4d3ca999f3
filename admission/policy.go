package admission

import (
	"fmt"
	"time"
	"unicode/utf8"
)

// Algorithm names an admission algorithm.
type Algorithm string

// The algorithms. AlgorithmConcurrency is decided by package lease through
// the FSM's lease operations, not by Decide.
const (
	// AlgorithmTokenBucket is the token bucket as GCRA (DecideTokenBucket):
	// limit per period sustained, bursts up to burst.
	AlgorithmTokenBucket Algorithm = "token_bucket"
	// AlgorithmFixedWindow counts units in windows of one period aligned to
	// the Unix epoch; up to limit per window.
	AlgorithmFixedWindow Algorithm = "fixed_window"
	// AlgorithmSlidingWindow weighs the previous fixed window's count by how
	// much of it the rolling period still covers (an approximation: at most
	// 2×limit−1 units in any rolling period; see slidingwindow.go).
	AlgorithmSlidingWindow Algorithm = "sliding_window"
	// AlgorithmSlidingLog keeps every admitted request of the last period:
	// an exact rolling window, for small limits.
	AlgorithmSlidingLog Algorithm = "sliding_log"
	// AlgorithmQuota counts units per calendar period in UTC (day, week from
	// Monday, month, year).
	AlgorithmQuota Algorithm = "quota"
	// AlgorithmConcurrency is a semaphore of limit leases per key, each with
	// a fencing token and a lease_ttl.
	AlgorithmConcurrency Algorithm = "concurrency"
)

// Calendar is the period of a quota.
type Calendar string

// The calendar periods of a quota, all in UTC.
const (
	CalendarDay   Calendar = "day"
	CalendarWeek  Calendar = "week" // from Monday 00:00 UTC
	CalendarMonth Calendar = "month"
	CalendarYear  Calendar = "year"
)

// OnUnavailable says what a client does when the cluster cannot decide. It
// is carried by the policy for clients; the algorithms ignore it.
type OnUnavailable string

// The values of OnUnavailable. The empty value means OnUnavailableDeny.
const (
	OnUnavailableAllow OnUnavailable = "allow" // let the request through
	OnUnavailableDeny  OnUnavailable = "deny"  // refuse the request (fail closed)
	OnUnavailableLocal OnUnavailable = "local" // decide from a local budget
)

// MaxNameBytes is the longest policy name, in bytes.
const MaxNameBytes = 64

// MaxKeyBytes is the largest key, in bytes, that CheckRequest accepts.
const MaxKeyBytes = 512

// MaxChecks is the most checks one Admit decides atomically: its own
// (policy, key, cost) and up to MaxChecks-1 more in also. Every bound on
// checks (the node's, the state machine's, Envoy's counted descriptors)
// is this one.
const MaxChecks = 9

// Bounds enforced by Validate. They are chosen so that every computation in
// this package fits in an int64 (see Validate).
const (
	minPeriod = time.Millisecond
	maxPeriod = 366 * 24 * time.Hour // 3.16224e16 ns
	maxLimit  = 1_000_000_000
	maxBurst  = 1_000_000_000
	// maxBurstWindow bounds Burst × EmissionInterval, the time an empty
	// bucket takes to refill (and the span of a bucket's state): 3660 days,
	// 3.16224e17 ns, about 2^58.1.
	maxBurstWindow = int64(10 * maxPeriod)
)

// supportedAlgorithms is listed in error messages.
const supportedAlgorithms = "token_bucket, fixed_window, sliding_window, sliding_log, quota, concurrency"

// Policy is one admission policy. Field comments give the yaml/json names
// used in errors; Validate documents the accepted ranges.
type Policy struct {
	Name          string        // name: 1..64 bytes of [a-z0-9._-], starting with a letter or digit
	Algorithm     Algorithm     // algorithm: token_bucket, fixed_window, sliding_window, sliding_log, quota
	Limit         int64         // limit: units per Period, sustained
	Period        time.Duration // period
	Burst         int64         // burst: most units at once (the bucket's capacity); 0 = Limit
	MaxCost       int64         // max_cost: largest single cost; 0 = Burst
	OnUnavailable OnUnavailable // on_unavailable: "" = deny
	Calendar      Calendar      // calendar: quota only (day, week, month, year)
	Shadow        bool          // shadow: decide and count, never deny
	LeaseTTL      time.Duration // lease_ttl: concurrency only; 0 = DefaultLeaseTTL
	// dedupe_retention: how long (logged time) a decision under this policy
	// is remembered by request ID, so a retry gets the same answer; 0 =
	// DefaultDedupeRetention.
	DedupeRetention time.Duration
	// local: decisions clients may take locally (budget leases); the zero
	// value (no mode) means none.
	Local Local
}

// Bounds of Policy.DedupeRetention.
const (
	DefaultDedupeRetention = 10 * time.Minute
	MinDedupeRetention     = time.Second
	MaxDedupeRetention     = 24 * time.Hour
)

// WithDefaults returns a copy of p with Burst (0 → Limit), then MaxCost
// (0 → Burst), OnUnavailable ("" → deny), DedupeRetention (0 →
// DefaultDedupeRetention) and, in local.mode grant, Local.MaxGrant (0 →
// max(1, burst/10)) and Local.TTL (0 → DefaultGrantTTL), in local.mode
// sync, Local.SyncInterval (0 → DefaultSyncInterval) filled in. It does
// not validate.
func (p Policy) WithDefaults() Policy {
	if p.Burst == 0 {
		p.Burst = p.Limit
	}
	if p.MaxCost == 0 {
		p.MaxCost = p.Burst
	}
	if p.OnUnavailable == "" {
		p.OnUnavailable = OnUnavailableDeny
	}
	if p.DedupeRetention == 0 {
		p.DedupeRetention = DefaultDedupeRetention
	}
	if p.Algorithm == AlgorithmConcurrency && p.LeaseTTL == 0 {
		p.LeaseTTL = DefaultLeaseTTL
	}
	p.Local = p.Local.withDefaults(p.Burst)
	return p
}

// Validate checks p.WithDefaults() and returns the first problem found, in
// the order name, algorithm, the algorithm's own fields (for every
// algorithm: calendar, limit, period, burst, max_cost),
// on_unavailable, dedupe_retention, local, as a *FieldError wrapping
// ErrInvalidPolicy. It does not modify p.
//
// Accepted values:
//
//   - name: 1..64 bytes of [a-z0-9._-], starting with a letter or digit.
//   - algorithm: token_bucket, fixed_window, sliding_window, sliding_log or
//     quota; concurrency is "not implemented yet"; any other name is unknown.
//
// For token_bucket:
//
//   - calendar: unset.
//   - limit: 1..1e9, and at most the period in nanoseconds, so that the
//     emission interval ceil(period/limit) is at least 1ns.
//   - period: 1ms..366 days.
//   - burst: 1..1e9 (0 means limit), and burst × emission interval (the time
//     an empty bucket takes to refill) at most 3660 days (3.16224e17ns).
//   - max_cost: 1..burst (0 means burst).
//
// For fixed_window (counts are at most 1e9, so no sum can overflow):
//
//   - calendar: unset.
//   - limit: 1..1e9.
//   - period: a whole number of seconds, 1s..366 days.
//   - burst: unset (0) or equal to limit: a fixed window admits up to limit
//     per window at any pace, so it has no burst separate from its limit.
//   - max_cost: 1..limit (0 means limit).
//
// For quota (counts are at most 1e12):
//
//   - calendar: required; day, week (from Monday), month or year, in UTC.
//   - limit: 1..1e12.
//   - period: unset (0); the calendar sets the period.
//   - burst: unset (0) or equal to limit, as for fixed_window.
//   - max_cost: 1..limit (0 means limit).
//
// For sliding_window (counts are at most 1e9; products of a count and a
// period are taken in 128 bits):
//
//   - calendar: unset.
//   - limit: 1..1e9.
//   - period: a whole number of milliseconds, 1s..366 days.
//   - burst: unset (0) or equal to limit, as for fixed_window.
//   - max_cost: 1..limit (0 means limit).
//
// For sliding_log (the state is one entry per admitted request, so at most
// limit entries per key):
//
//   - calendar: unset.
//   - limit: 1..10000, a cap that keeps the state small: sliding_log is for
//     small limits such as login attempts; use sliding_window above it.
//   - period: 1ms..366 days.
//   - burst: unset (0) or equal to limit, as for fixed_window.
//   - max_cost: 1..limit (0 means limit).
//
// For every algorithm:
//
//   - on_unavailable: "allow", "deny" or "local" ("" means deny).
//   - dedupe_retention: 1s..24h (0 means 10m).
//   - local.mode: unset, grant (budget leases) or sync (local-plus-global)
//     for token_bucket, fixed_window, sliding_window or quota; grant mode only:
//     local.max_grant 1..burst (0 means max(1, burst/10)) and local.ttl
//     100ms..1h (0 means 10s); sync only: local.sync_interval 10ms..1m (0
//     means 1s); all unset without a mode.
//
// No overflow: the emission interval T is at most 366 days (3.2e16ns) and
// burst × T, which bounds every cost × T and every offset of a bucket's state
// from now, is at most 3.2e17ns < 2^59. DecideTokenBucket adds such a span to
// now only after checking that the sum fits, and computes differences of
// arbitrary int64 times in uint64, so no input can make it wrap.
func (p Policy) Validate() error {
	p = p.WithDefaults()
	if fe := checkName(p.Name); fe != nil {
		return fe
	}
	if fe := checkAlgorithm(p.Algorithm); fe != nil {
		return fe
	}
	if fe := checkAlgorithmFields(p); fe != nil {
		return fe
	}
	switch p.OnUnavailable {
	case OnUnavailableAllow, OnUnavailableDeny, OnUnavailableLocal:
	default:
		return policyError("on_unavailable", "must be one of allow, deny, local (got %s)", Quote(string(p.OnUnavailable)))
	}
	if p.DedupeRetention < MinDedupeRetention || p.DedupeRetention > MaxDedupeRetention {
		return policyError("dedupe_retention", "must be between %v and %v (got %v)", MinDedupeRetention, MaxDedupeRetention, p.DedupeRetention)
	}
	if fe := checkLocal(p); fe != nil {
		return fe
	}
	return nil
}

// EmissionInterval returns T, the nanoseconds per unit: ceil(Period/Limit).
//
// It is rounded up, never down, so that the effective rate (one unit per T)
// never exceeds Limit per Period: the limiter is strict. The price is that
// when Limit does not divide Period it sustains slightly less than Limit per
// Period; the shortfall is below Limit²/Period units per Period (in ns), so
// under one unit whenever Limit² ≤ Period, e.g. 60/min loses nothing and
// 7 per 1ms sustains 6.99996. It returns 0 when Limit or Period is not positive
// (an invalid policy).
func (p Policy) EmissionInterval() int64 {
	period := int64(p.Period)
	if p.Limit < 1 || period < 1 {
		return 0
	}
	t := period / p.Limit
	if period%p.Limit != 0 {
		t++
	}
	return t
}

// Capacity returns the bucket's capacity in units: p.WithDefaults().Burst.
func (p Policy) Capacity() int64 { return p.WithDefaults().Burst }

// CheckRequest validates a request against p, which must be valid: key must
// be 1..MaxKeyBytes bytes of valid UTF-8 (field "key") and cost must be
// 1..max_cost (field "cost"). It returns a *FieldError wrapping
// ErrInvalidRequest, or nil.
func (p Policy) CheckRequest(key string, cost int64) error {
	if err := CheckKeyCost(key, cost); err != nil {
		return err
	}
	if maxCost := p.WithDefaults().MaxCost; cost > maxCost {
		return requestError("cost", "must not exceed the policy's max_cost of %d (got %d)", maxCost, cost)
	}
	return nil
}

// CheckKeyCost is the part of CheckRequest that needs no policy: key is
// 1..MaxKeyBytes bytes of valid UTF-8 and cost is at least 1. Servers use it
// to refuse bad requests before they reach the log.
func CheckKeyCost(key string, cost int64) error {
	switch {
	case key == "":
		return requestError("key", "must not be empty")
	case len(key) > MaxKeyBytes:
		return requestError("key", "must be at most %d bytes (got %d)", MaxKeyBytes, len(key))
	case !utf8.ValidString(key):
		return requestError("key", "must be valid UTF-8")
	case cost < 1:
		return requestError("cost", "must be at least 1 (got %d)", cost)
	}
	return nil
}

func checkName(name string) *FieldError {
	switch {
	case name == "":
		return policyError("name", "is required")
	case len(name) > MaxNameBytes:
		return policyError("name", "must be at most %d bytes (got %d)", MaxNameBytes, len(name))
	}
	for i := 0; i < len(name); i++ {
		c := name[i]
		alnum := c >= 'a' && c <= 'z' || c >= '0' && c <= '9'
		if i == 0 && !alnum {
			return policyError("name", "must start with a lowercase letter or digit (got %s)", Quote(name))
		}
		if !alnum && c != '.' && c != '_' && c != '-' {
			return policyError("name", "may contain only a-z, 0-9, '.', '_' and '-' (got %s)", Quote(name))
		}
	}
	return nil
}

func checkAlgorithm(a Algorithm) *FieldError {
	switch a {
	case AlgorithmTokenBucket, AlgorithmFixedWindow, AlgorithmSlidingWindow, AlgorithmSlidingLog, AlgorithmQuota, AlgorithmConcurrency:
		return nil
	case "":
		return policyError("algorithm", "is required; supported: %s", supportedAlgorithms)
	default:
		return policyError("algorithm", "unknown algorithm %s; supported: %s", Quote(string(a)), supportedAlgorithms)
	}
}

// checkAlgorithmFields checks the fields each algorithm uses, with defaults
// applied, and that it leaves unset the ones it does not use.
func checkAlgorithmFields(p Policy) *FieldError {
	if p.Algorithm != AlgorithmConcurrency && p.LeaseTTL != 0 {
		return policyError("lease_ttl", "is only for algorithm concurrency")
	}
	switch p.Algorithm {
	case AlgorithmTokenBucket:
		if p.Calendar != "" {
			return policyError("calendar", "is only for algorithm quota")
		}
		return checkNumbers(p)
	case AlgorithmFixedWindow:
		return checkFixedWindow(p)
	case AlgorithmSlidingWindow:
		return checkSlidingWindow(p)
	case AlgorithmSlidingLog:
		return checkSlidingLog(p)
	case AlgorithmQuota:
		return checkQuota(p)
	case AlgorithmConcurrency:
		return checkConcurrency(p)
	default:
		return checkAlgorithm(p.Algorithm)
	}
}

// checkNumbers checks the numeric fields of a policy with defaults applied:
// limit, period, burst, max_cost, in that order. DecideTokenBucket relies on
// it too, so the algorithm and Validate agree on what is safe.
func checkNumbers(p Policy) *FieldError {
	if p.Limit < 1 || p.Limit > maxLimit {
		return policyError("limit", "must be between 1 and %d (got %d)", maxLimit, p.Limit)
	}
	if p.Period < minPeriod || p.Period > maxPeriod {
		return policyError("period", "must be between %v and 366 days (got %v)", minPeriod, p.Period)
	}
	if p.Limit > int64(p.Period) {
		return policyError("limit", "must not exceed one unit per nanosecond of period (got %d per %v)", p.Limit, p.Period)
	}
	if p.Burst < 1 || p.Burst > maxBurst {
		return policyError("burst", "must be between 1 and %d (got %d)", maxBurst, p.Burst)
	}
	if t := p.EmissionInterval(); p.Burst > maxBurstWindow/t {
		return policyError("burst", "refilling %d units at one per %v would take more than 3660 days; lower burst or raise the rate", p.Burst, time.Duration(t))
	}
	if p.MaxCost < 1 || p.MaxCost > p.Burst {
		return policyError("max_cost", "must be between 1 and burst %d (got %d)", p.Burst, p.MaxCost)
	}
	return nil
}

func policyError(field, format string, args ...any) *FieldError {
	return &FieldError{Field: field, Reason: fmt.Sprintf(format, args...), Err: ErrInvalidPolicy}
}

func requestError(field, format string, args ...any) *FieldError {
	return &FieldError{Field: field, Reason: fmt.Sprintf(format, args...), Err: ErrInvalidRequest}
}
