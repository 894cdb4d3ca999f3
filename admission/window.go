package admission

import "time"

// Window is the length of p's window for a decision at now (Unix
// nanoseconds, from the log), as quota headers state it (the w of
// RateLimit-Policy): the period of a rate policy (token_bucket,
// fixed_window, sliding_window, sliding_log); for a quota, the length of
// the calendar period holding now (a day, a week, 28 to 31 days, 365 or 366
// days); 0 for a concurrency policy, and for a quota whose period does not
// fit in int64 nanoseconds. It reads no clock.
func (p Policy) Window(now int64) time.Duration {
	switch p.Algorithm {
	case AlgorithmTokenBucket, AlgorithmFixedWindow, AlgorithmSlidingWindow, AlgorithmSlidingLog:
		return p.Period
	case AlgorithmQuota:
		if start, end, ok := calendarPeriod(p.Calendar, now); ok {
			return time.Duration(end - start)
		}
	}
	return 0
}
