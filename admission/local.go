package admission

import (
	"math"
	"math/bits"
	"time"
)

// LocalMode names how clients decide a policy's requests locally. The zero
// value means none: every request is decided by the cluster.
type LocalMode string

// LocalGrant is the budget-lease mode: the cluster grants a holder units
// it spends in memory, spent from the key's state when granted, so strict
// and local decisions together never exceed the policy.
const LocalGrant LocalMode = "grant"

// LocalSync is the local-plus-global mode: the cluster gives each holder an
// allowance sized to its share of the key's demand, nothing is spent ahead,
// and the holder reports what it admitted every sync interval, charged as
// reported. A key may be over-admitted by at most Policy.SyncBound units.
const LocalSync LocalMode = "sync"

// Bounds and default of Local.SyncInterval, how often a holder of a sync
// policy reports.
const (
	DefaultSyncInterval = time.Second
	MinSyncInterval     = 10 * time.Millisecond
	MaxSyncInterval     = time.Minute
)

// Bounds and default of Local.TTL, the life of a budget lease.
const (
	DefaultGrantTTL = 10 * time.Second
	MinGrantTTL     = 100 * time.Millisecond
	MaxGrantTTL     = time.Hour
)

// Local is a policy's local decisions (yaml/json "local"). It is a value,
// so that Policy stays comparable with ==.
type Local struct {
	Mode     LocalMode     // mode: "" (none), grant or sync
	MaxGrant int64         // max_grant: grant mode only; most units one holder holds; 0 = max(1, burst/10)
	TTL      time.Duration // ttl: grant mode only; a grant's life; 0 = DefaultGrantTTL
	// sync_interval: sync only; how often a holder reports; 0 =
	// DefaultSyncInterval.
	SyncInterval time.Duration
}

// localAlgorithms is listed in error messages.
const localAlgorithms = "token_bucket, fixed_window, sliding_window, quota"

// withDefaults fills MaxGrant and TTL of a policy's Local in grant mode,
// SyncInterval in sync mode; burst is the policy's defaulted burst.
func (l Local) withDefaults(burst int64) Local {
	switch l.Mode {
	case LocalSync:
		if l.SyncInterval == 0 {
			l.SyncInterval = DefaultSyncInterval
		}
		return l
	case LocalGrant:
	default:
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
// (none, grant or sync, both only for token_bucket, fixed_window,
// sliding_window and quota); in grant mode local.max_grant (1..burst) and
// local.ttl (MinGrantTTL..MaxGrantTTL), with sync_interval unset; in sync
// mode local.sync_interval (MinSyncInterval..MaxSyncInterval), with
// max_grant and ttl unset. Without a mode, all three must be unset.
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
		if l.SyncInterval != 0 {
			return policyError("local.sync_interval", "is only for a local mode")
		}
		return nil
	case LocalGrant, LocalSync:
	default:
		return policyError("local.mode", "unknown mode %s; supported: %s, %s", Quote(string(l.Mode)), LocalGrant, LocalSync)
	}
	switch p.Algorithm {
	case AlgorithmTokenBucket, AlgorithmFixedWindow, AlgorithmSlidingWindow, AlgorithmQuota:
	default:
		return policyError("local.mode", "%s is not for algorithm %s; supported: %s", l.Mode, p.Algorithm, localAlgorithms)
	}
	if l.Mode == LocalSync {
		if l.MaxGrant != 0 {
			return policyError("local.max_grant", "is for local.mode grant mode only")
		}
		if l.TTL != 0 {
			return policyError("local.ttl", "is for local.mode grant mode only")
		}
		if l.SyncInterval < MinSyncInterval || l.SyncInterval > MaxSyncInterval {
			return policyError("local.sync_interval", "must be between %v and %v (got %v)", MinSyncInterval, MaxSyncInterval, l.SyncInterval)
		}
		return nil
	}
	if l.SyncInterval != 0 {
		return policyError("local.sync_interval", "is for local.mode sync only")
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

// SyncExpiry is when a local-plus-global allowance of p given at now
// expires: now + 2 × local.sync_interval (a holder that missed one report
// keeps it until the next), and for a window or a quota no later than the
// end of the window holding now, so that an allowance is spent in the
// window it was sized for. p must have defaults applied.
func (p Policy) SyncExpiry(now int64) int64 {
	at := int64(math.MaxInt64)
	if span := 2 * int64(p.Local.SyncInterval); now <= math.MaxInt64-span {
		at = now + span
	}
	if end, ok := p.WindowEnd(now); ok {
		at = min(at, end)
	}
	return at
}

// shortestPeriod is the length of p's period, for a quota its calendar's
// shortest: day 24h, week 7 days, month 28 days, year 365 days.
func (p Policy) shortestPeriod() time.Duration {
	const day = 24 * time.Hour
	if p.Algorithm != AlgorithmQuota {
		return p.Period
	}
	switch p.Calendar {
	case CalendarDay:
		return day
	case CalendarWeek:
		return 7 * day
	case CalendarMonth:
		return 28 * day
	case CalendarYear:
		return 365 * day
	}
	return 0
}

// SyncBound is the most a key of p (local.mode sync, defaults applied) may
// be over-admitted by: max(1, ceil(limit × sync_interval / period)), with
// a quota's shortest calendar period. It is a bound, not an exact figure:
// the live allowances of a key never add up to more, and every local admit
// is either charged to the key or within a live allowance. The product is
// taken in 128 bits; the result saturates at math.MaxInt64.
func (p Policy) SyncBound() int64 {
	period, iv := p.shortestPeriod(), p.Local.SyncInterval
	if p.Limit <= 0 || period <= 0 || iv <= 0 {
		return 1
	}
	hi, lo := bits.Mul64(uint64(p.Limit), uint64(iv))
	if hi >= uint64(period) {
		return math.MaxInt64
	}
	q, r := bits.Div64(hi, lo, uint64(period))
	if r != 0 {
		q++
	}
	if q > math.MaxInt64 {
		return math.MaxInt64
	}
	return max(1, int64(q))
}
