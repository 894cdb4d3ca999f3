package jepsen

import (
	"fmt"
	"sort"
	"time"
)

// CheckFixedWindow checks that, per key and fixed window of log time
// (window index = DecidedAt / window, aligned to the Unix epoch as the
// server aligns them), the distinct request IDs acknowledged allowed do not
// exceed limit. Only admits count (Kind admit or empty); a request whose
// answers disagree on the window (an at-most-once violation) counts in each.
func CheckFixedWindow(ops []Op, limit int64, window time.Duration) Verdict {
	v := Verdict{Checker: "no-over-admission-per-window", OK: true}
	if window <= 0 || limit < 1 {
		v.violate("invalid bound: limit %d per window %s", limit, window)
		v.Summary = "not checked"
		return v
	}
	type keyWindow struct {
		key string
		w   int64
	}
	admitted := map[keyWindow]map[reqKey]bool{}
	keys := map[string]bool{}
	for _, op := range ops {
		if !isAdmitOp(op) {
			continue
		}
		keys[op.Key] = true
		if op.Outcome != OutcomeAllowed {
			continue
		}
		kw := keyWindow{op.Key, windowOf(op.DecidedAt, int64(window))}
		if admitted[kw] == nil {
			admitted[kw] = map[reqKey]bool{}
		}
		k := reqKey{op.Caller, op.RequestID}
		if op.RequestID == "" {
			k.id = fmt.Sprintf("#op%d", op.ID) // cannot be a retry of anything
		}
		admitted[kw][k] = true
	}
	kws := make([]keyWindow, 0, len(admitted))
	for kw := range admitted {
		kws = append(kws, kw)
	}
	sort.Slice(kws, func(i, j int) bool {
		if kws[i].key != kws[j].key {
			return kws[i].key < kws[j].key
		}
		return kws[i].w < kws[j].w
	})
	total, fullest := 0, 0
	for _, kw := range kws {
		n := len(admitted[kw])
		total += n
		fullest = max(fullest, n)
		if int64(n) > limit {
			start := kw.w * int64(window)
			v.violate("key %q, window [%s, %s): %d distinct request IDs acknowledged allowed > limit %d",
				kw.key, fmtNanos(start), fmtNanos(start+int64(window)), n, limit)
		}
	}
	v.Summary = fmt.Sprintf("%d keys, %d windows with admits, %d acknowledged admits, at most %d in one window, limit %d per %s",
		len(keys), len(kws), total, fullest, limit, window)
	return v
}
