package admission

import "time"

// Bounds of a concurrency policy. A key's state holds one entry per live
// lease, so its slots are capped like a sliding log's entries.
const (
	MaxConcurrencyLimit = 10_000
	DefaultLeaseTTL     = time.Minute
	MinLeaseTTL         = time.Second
	MaxLeaseTTL         = 24 * time.Hour
)

// checkConcurrency checks a concurrency policy (leases, decided by package
// lease through the FSM, not by Decide): limit is the number of slots per
// key, lease_ttl how long a lease lives unless renewed. Rate fields must be
// unset. Defaults are applied.
func checkConcurrency(p Policy) *FieldError {
	if p.Calendar != "" {
		return policyError("calendar", "is only for algorithm quota")
	}
	if p.Limit < 1 || p.Limit > MaxConcurrencyLimit {
		return policyError("limit", "must be between 1 and %d slots for concurrency (got %d)", MaxConcurrencyLimit, p.Limit)
	}
	if p.Period != 0 {
		return policyError("period", "must be unset for concurrency, which limits leases held at once; use lease_ttl for how long one lives (got %v)", p.Period)
	}
	if p.Burst != p.Limit {
		return policyError("burst", "must be unset or equal to limit %d for concurrency (got %d)", p.Limit, p.Burst)
	}
	if p.MaxCost != p.Limit && p.MaxCost != 1 {
		return policyError("max_cost", "must be unset for concurrency: a lease takes one slot (got %d)", p.MaxCost)
	}
	return CheckLeaseTTL("lease_ttl", p.LeaseTTL)
}

// CheckLeaseTTL checks a lease time to live (a policy's lease_ttl, or a
// request's ttl), naming field in the error.
func CheckLeaseTTL(field string, ttl time.Duration) *FieldError {
	if ttl < MinLeaseTTL || ttl > MaxLeaseTTL {
		return &FieldError{Field: field, Err: ErrInvalidPolicy,
			Reason: "must be between 1s and 24h (got " + ttl.String() + ")"}
	}
	return nil
}
