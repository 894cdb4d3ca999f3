package admission

import "time"

// Kind tags which algorithm wrote a State, so that a policy whose algorithm
// changed never reads another algorithm's state: it starts afresh.
type Kind uint8

// The kinds of State. KindNone is the zero State: a key never seen, or
// whose state expired.
const (
	KindNone Kind = iota
	KindTokenBucket
	KindFixedWindow
	KindSlidingWindow
	KindSlidingLog
	KindQuota
)

// kindOf is the Kind of state an algorithm writes.
func kindOf(a Algorithm) Kind {
	switch a {
	case AlgorithmTokenBucket:
		return KindTokenBucket
	case AlgorithmFixedWindow:
		return KindFixedWindow
	case AlgorithmSlidingWindow:
		return KindSlidingWindow
	case AlgorithmSlidingLog:
		return KindSlidingLog
	case AlgorithmQuota:
		return KindQuota
	default:
		return KindNone
	}
}

// State is one key's state under one policy, whatever the algorithm. The
// zero State is a key never seen. Each algorithm uses some fields and leaves
// the others zero:
//
//   - token_bucket: TAT (the GCRA theoretical arrival time), and what its
//     refunds moved the schedule (Shifted, Refunds; refund.go).
//   - fixed_window and quota: Start (the current window's start, Unix ns)
//     and Count (units admitted in it).
//   - sliding_window: Start and Count of the current window, Prev (units
//     admitted in the window before it).
//   - sliding_log: Log, the admitted requests of the last period, oldest
//     first.
//
// States are values: algorithms never modify the State they are given (Log
// is copied before it changes).
type State struct {
	Kind  Kind
	TAT   int64
	Start int64
	Count int64
	Prev  int64
	Log   []LogEntry
	// Shifted is how far refunds have moved a token bucket's schedule back
	// in all (ns, saturating); Refunds the latest of those refunds, oldest
	// first, that a spend made before them may still need (RefundMark);
	// Forgotten the latest Until of the marks forgotten past MaxRefundMarks
	// (the state lives until then: a spend made before them may end then).
	Shifted   int64
	Refunds   []RefundMark
	Forgotten int64
}

// LogEntry is one admitted request of a sliding log.
type LogEntry struct {
	At   int64 // Unix ns
	Cost int64
}

// Decide decides a request of cost at now (Unix ns, from the log) for a key
// in state s under policy p, and returns the key's new state and the
// decision. p must be valid and cost checked (CheckRequest). A denial never
// spends: the returned state is s. A state written by another algorithm (the
// policy's algorithm changed) counts as a new key.
func Decide(p Policy, s State, cost, now int64) (State, Decision) {
	k := kindOf(p.Algorithm)
	if s.Kind != k {
		s = State{}
	}
	var next State
	var d Decision
	switch p.Algorithm {
	case AlgorithmTokenBucket:
		var b Bucket
		b, d = DecideTokenBucket(p, Bucket{TAT: s.TAT}, cost, now)
		next = s.withTAT(b.TAT, now)
	case AlgorithmFixedWindow:
		next, d = decideFixedWindow(p, s, cost, now)
	case AlgorithmSlidingWindow:
		next, d = decideSlidingWindow(p, s, cost, now)
	case AlgorithmSlidingLog:
		next, d = decideSlidingLog(p, s, cost, now)
	case AlgorithmQuota:
		next, d = decideQuota(p, s, cost, now)
	default:
		return s, Decision{RetryAfter: NeverRetry}
	}
	if !d.Allowed {
		return s, d
	}
	next.Kind = k
	return next, d
}

// ExpiresAt is the Unix-ns time from which s under p is equivalent to the
// zero State (a new key): a caller may delete it once its logged now
// reaches that time without changing any later decision. Deciding or
// peeking refreshes it (the new state has its own ExpiresAt).
func ExpiresAt(p Policy, s State) int64 {
	if s.Kind != kindOf(p.Algorithm) {
		return 0 // another algorithm's state: already equivalent to none
	}
	switch p.Algorithm {
	case AlgorithmTokenBucket:
		return s.bucketExpiresAt()
	case AlgorithmFixedWindow:
		return expiresFixedWindow(p, s)
	case AlgorithmSlidingWindow:
		return expiresSlidingWindow(p, s)
	case AlgorithmSlidingLog:
		return expiresSlidingLog(p, s)
	case AlgorithmQuota:
		return expiresQuota(p, s)
	default:
		return 0
	}
}

// Peek describes s under p at now without spending: Allowed reports whether
// a request of cost 1 would be allowed now, and the other fields are what
// Decide would report for it, except that nothing changes.
func Peek(p Policy, s State, now int64) Decision {
	_, d := Decide(p, s, 1, now)
	if d.Allowed {
		// Describe the state as it is, not after the probe.
		d.Remaining++
		d.Remaining = min(d.Remaining, d.Limit)
		d.ResetAfter = max(0, time.Duration(SpentUntil(p, s)-now))
	}
	return d
}
