package admission

import (
	"math"
	"time"
)

// quota: up to limit units per calendar period in UTC: a day (from 00:00),
// a week (from Monday 00:00), a month (from the 1st, 28 to 31 days) or a
// year (from January 1st, 365 or 366 days), with the Gregorian calendar's
// leap years. The state is State.Start, the period's start, and State.Count,
// the units admitted in it; a state of any other period counts as empty.
// Like fixed_window, up to 2 × limit units can be admitted around a
// boundary.

// maxQuotaLimit is the largest quota limit: a quota may count large units
// (tokens per month). Counts and costs stay at most 1e12, sums at most 2e12.
const maxQuotaLimit = 1_000_000_000_000

// calendars is listed in error messages.
const calendars = "day, week, month, year"

// checkQuota checks a quota policy with defaults applied, in the order
// calendar, limit, period, burst, max_cost:
//
//   - calendar: required, one of day, week, month, year.
//   - limit: 1..1e12.
//   - period: unset (quota uses calendar).
//   - burst: unset or equal to limit (checkCounterCaps).
//   - max_cost: 1..limit (checkCounterCaps).
func checkQuota(p Policy) *FieldError {
	switch p.Calendar {
	case CalendarDay, CalendarWeek, CalendarMonth, CalendarYear:
	case "":
		return policyError("calendar", "is required for algorithm quota; one of %s", calendars)
	default:
		return policyError("calendar", "must be one of %s (got %s)", calendars, Quote(string(p.Calendar)))
	}
	if p.Limit < 1 || p.Limit > maxQuotaLimit {
		return policyError("limit", "must be between 1 and %d for quota (got %d)", int64(maxQuotaLimit), p.Limit)
	}
	if p.Period != 0 {
		return policyError("period", "must be unset for quota, which counts per calendar %s in UTC (got %v)", p.Calendar, p.Period)
	}
	return checkCounterCaps(p)
}

// decideQuota decides a request of cost at now under a quota policy:
// allowed iff the units already admitted in now's calendar period plus cost
// are at most limit. See decideCounter for the decision's fields; the
// window is the calendar period, so ResetAfter (and a denial's RetryAfter)
// is the exact time until the next period starts.
//
// It is total: it never panics or overflows for any p, s, cost and now, and
// fails closed (denied, state unchanged, RetryAfter NeverRetry) for an
// invalid policy, a cost outside 1..limit, or a now whose period does not
// fit in int64 nanoseconds (1677-09-21 to 2262-04-11). So it is exact for
// every now from 1678 through 2261 (year 2200 is far inside), except that a
// denial's RetryAfter is NeverRetry when the next period does not fit
// either (in the last representable periods, e.g. during 2261 for a yearly
// quota).
func decideQuota(p Policy, s State, cost, now int64) (State, Decision) {
	p = p.WithDefaults()
	if checkQuota(p) != nil {
		return s, Decision{RetryAfter: NeverRetry}
	}
	start, end, ok := calendarPeriod(p.Calendar, now)
	if !ok {
		return s, Decision{Limit: p.Limit, RetryAfter: NeverRetry}
	}
	next, d := decideCounter(p.Limit, KindQuota, s, cost, now, start, end)
	if !d.Allowed && d.RetryAfter != NeverRetry {
		if _, _, ok := calendarPeriod(p.Calendar, end); !ok {
			d.RetryAfter = NeverRetry // the next period does not fit in an int64
		}
	}
	return next, d
}

// expiresQuota is the end of s's calendar period: from then on s counts as
// empty. A state that cannot be the current period of any now (no units, a
// start that is not a period start, a period that does not fit, or an
// invalid policy, under which every decision fails closed) is equivalent to
// none already: 0.
func expiresQuota(p Policy, s State) int64 {
	if checkQuota(p.WithDefaults()) != nil || s.Count <= 0 {
		return 0
	}
	start, end, ok := calendarPeriod(p.Calendar, s.Start)
	if !ok || start != s.Start {
		return 0
	}
	return end
}

// calendarPeriod returns the calendar period [start, end) in UTC that
// contains now, in Unix nanoseconds, and whether c is a calendar and both
// ends fit in an int64. It reads no clock: it only does calendar arithmetic
// on now (time.Date normalises day d+1 past a month's end, month 13, and so
// on).
func calendarPeriod(c Calendar, now int64) (start, end int64, ok bool) {
	t := time.Unix(0, now).UTC()
	y, m, d := t.Date()
	var s, e time.Time
	switch c {
	case CalendarDay:
		s, e = midnight(y, m, d), midnight(y, m, d+1)
	case CalendarWeek:
		sinceMonday := (int(t.Weekday()) + 6) % 7 // Sunday is 0 in package time
		s, e = midnight(y, m, d-sinceMonday), midnight(y, m, d-sinceMonday+7)
	case CalendarMonth:
		s, e = midnight(y, m, 1), midnight(y, m+1, 1)
	case CalendarYear:
		s, e = midnight(y, time.January, 1), midnight(y+1, time.January, 1)
	default:
		return 0, 0, false
	}
	start, ok1 := unixNanoOf(s)
	end, ok2 := unixNanoOf(e)
	return start, end, ok1 && ok2
}

func midnight(y int, m time.Month, d int) time.Time {
	return time.Date(y, m, d, 0, 0, 0, 0, time.UTC)
}

// unixNanoOf returns t (a whole second) in Unix nanoseconds, and whether
// that fits in an int64 (t.UnixNano is undefined when it does not).
func unixNanoOf(t time.Time) (int64, bool) {
	const maxSec = math.MaxInt64 / int64(time.Second) // 9223372036: 2262-04-11
	sec := t.Unix()
	if sec < -maxSec || sec > maxSec {
		return 0, false
	}
	return sec * int64(time.Second), true
}
