package admission

import (
	"math"
	"time"
)

// LocalMode names how clients decide a policy's requests locally. The zero
// value means none: every request is decided by the cluster.
type LocalMode string

// LocalReserve is the budget-lease mode: the cluster grants a holder units
// it spends in memory, spent from the key's state when granted, so strict
// and local decisions together never exceed the policy.
const LocalReserve LocalMode = "reserve"

// Bounds and default of Local.TTL, the life of a budget lease.
const (
	DefaultGrantTTL = 10 * time.Second
	MinGrantTTL     = 100 * time.Millisecond
	MaxGrantTTL     = time.Hour
)

// Local is a policy's local decisions (yaml/json "local"). It is a value,
// so that Policy stays comparable with ==.
type Local struct {
	Mode     LocalMode     // mode: "" (none) or reserve
	MaxGrant int64         // max_grant: most units one holder holds; 0 = max(1, burst/10)
	TTL      time.Duration // ttl: a grant's life; 0 = DefaultGrantTTL
}

// localAlgorithms is listed in error messages.
const localAlgorithms = "token_bucket, fixed_window, sliding_window, quota"

// withDefaults fills MaxGrant and TTL of a policy's Local when its Mode is
// set; burst is the policy's defaulted burst.
func (l Local) withDefaults(burst int64) Local {
	if l.Mode == "" {
		return l
	}
	if l.MaxGrant == 0 {
		l.MaxGrant = max(1, burst/10)
	}
	if l.TTL == 0 {
		l.TTL = DefaultGrantTTL
	}
	return l
}

// checkLocal checks p.Local of a policy with defaults applied: local.mode
// (none or reserve, reserve only for token_bucket, fixed_window,
// sliding_window and quota), local.max_grant (1..burst) and local.ttl
// (MinGrantTTL..MaxGrantTTL). Without a mode, max_grant and ttl must be
// unset.
func checkLocal(p Policy) *FieldError {
	l := p.Local
	switch l.Mode {
	case "":
		if l.MaxGrant != 0 {
			return policyError("local.max_grant", "is only for a local mode")
		}
		if l.TTL != 0 {
			return policyError("local.ttl", "is only for a local mode")
		}
		return nil
	case LocalReserve:
	default:
		return policyError("local.mode", "unknown mode %s; supported: %s", Quote(string(l.Mode)), LocalReserve)
	}
	switch p.Algorithm {
	case AlgorithmTokenBucket, AlgorithmFixedWindow, AlgorithmSlidingWindow, AlgorithmQuota:
	default:
		return policyError("local.mode", "%s is not for algorithm %s; supported: %s", l.Mode, p.Algorithm, localAlgorithms)
	}
	if l.MaxGrant < 1 || l.MaxGrant > p.Burst {
		return policyError("local.max_grant", "must be between 1 and burst %d (got %d)", p.Burst, l.MaxGrant)
	}
	if l.TTL < MinGrantTTL || l.TTL > MaxGrantTTL {
		return policyError("local.ttl", "must be between %v and %v (got %v)", MinGrantTTL, MaxGrantTTL, l.TTL)
	}
	return nil
}

// WindowEnd is the end (Unix ns) of the window of p holding now: the fixed
// window of one period aligned to the Unix epoch for fixed_window and
// sliding_window (whose counts roll over at those boundaries), the calendar
// period for a quota. ok is false for the other algorithms, and when the
// end does not fit in an int64. It reads no clock.
func (p Policy) WindowEnd(now int64) (end int64, ok bool) {
	switch p.Algorithm {
	case AlgorithmFixedWindow, AlgorithmSlidingWindow:
		if p.Period <= 0 {
			return 0, false
		}
		_, end, ok = fixedWindowAt(int64(p.Period), now)
		return end, ok
	case AlgorithmQuota:
		_, end, ok = calendarPeriod(p.Calendar, now)
		return end, ok
	}
	return 0, false
}

// GrantExpiry is when a budget lease of p granted or renewed at now
// expires: now + local.ttl, and for a window or a quota no later than the
// end of the window holding now, so that every unit of a grant is spent in
// one window and a release gives them back in it. p must have defaults
// applied.
func (p Policy) GrantExpiry(now int64) int64 {
	at := int64(math.MaxInt64)
	if ttl := int64(p.Local.TTL); now <= math.MaxInt64-ttl {
		at = now + ttl
	}
	if end, ok := p.WindowEnd(now); ok {
		at = min(at, end)
	}
	return at
}
