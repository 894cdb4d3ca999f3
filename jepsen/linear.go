package jepsen

import (
	"fmt"
	"runtime"
	"sort"
	"strings"
	"sync"
	"time"

	"github.com/anishathalye/porcupine"
)

// LinearSpec describes the sequential model CheckLinearizable checks a
// history of admits against.
type LinearSpec struct {
	Algorithm string        // "token_bucket" or "fixed_window"
	Capacity  int64         // token_bucket: tokens per key, refill negligible (cost 1 per admit)
	Limit     int64         // fixed_window: units per window
	Window    time.Duration // fixed_window: window length; windows aligned to the Unix epoch in log time (window index = DecidedAt / Window)
	Timeout   time.Duration // porcupine time budget per key; 0 = 30s; a timeout is reported as "unknown", not a failure
}

// LinearOutcome is porcupine's answer for one key.
type LinearOutcome string

// Outcomes of CheckLinearizable per key.
const (
	LinearOK      LinearOutcome = "ok"      // a linearization exists
	LinearIllegal LinearOutcome = "illegal" // no linearization exists: a violation
	LinearUnknown LinearOutcome = "unknown" // the time budget ran out first: not a violation
)

// KeyLinearResult is CheckLinearizable's result for one key.
type KeyLinearResult struct {
	Key        string
	Outcome    LinearOutcome
	Requests   int           // logical requests (merged attempts) on the key
	Unanswered int           // of which never answered: maybe applied
	Partitions int           // porcupine partitions: 1, or the key's windows (fixed_window)
	Elapsed    time.Duration // porcupine's time on the key
	Hint       string        // when illegal: where the longest linearization stops

	model       porcupine.Model
	info        porcupine.LinearizationInfo
	first, last int64 // earliest call and latest return (wall clock, for the timeline)
}

// LinearResult is CheckLinearizable's full result: per key outcomes and
// what WriteLinearHTML needs to draw porcupine's timelines.
type LinearResult struct {
	Spec        LinearSpec
	Keys        []*KeyLinearResult // sorted by key
	FailingKeys []string           // keys whose history is not linearizable
	UnknownKeys []string           // keys porcupine gave up on (timeout)
}

// Key returns the result for key, or nil.
func (r *LinearResult) Key(key string) *KeyLinearResult {
	if r == nil {
		return nil
	}
	for _, k := range r.Keys {
		if k.Key == key {
			return k
		}
	}
	return nil
}

// admitInput is one logical Admit request: a porcupine operation's input.
type admitInput struct {
	id      int    // index among the key's requests
	request string // request ID
	window  int64  // fixed_window: the partition's window index
	client  int
}

// admitOutput is the first answer to a request, or unknown.
type admitOutput struct {
	answered  bool
	allowed   bool
	remaining int64
	decidedAt int64
}

// admitMeta is shown in the timeline's tooltips.
type admitMeta struct {
	attempts  int
	nodes     []string
	errors    []string
	decidedAt int64
}

// modelState is the sequential state of one key (token_bucket) or one
// window of one key (fixed_window).
//
// Unknown outcomes. A request never answered (every attempt fail or
// unknown) may have been applied at any log position after it was sent —
// possibly long after its client gave up, when an old leader's entry
// commits — or never. Instead of porcupine's open-ended return time
// (Return = math.MaxInt64), the model makes that open end part of the
// state: linearizing an unknown request only adds it to Floating, a pool
// of requests that may still take effect, and each later answer may
// consume any number j of them (0 ≤ j ≤ Floating) just before itself —
// the j requests whose effect it observes. Pool members never consumed
// simply never applied; one applied when no unit was left was denied,
// which changes nothing either.
//
// This is exact: a sequential execution exists with each unknown applied
// at some point after its call, or not at all, iff a linearization exists
// in this model with each unknown placed inside [first Start, last End] of
// its attempts. (⇐ run the consumed requests where they are consumed. ⇒
// place each unknown right after the last operation that returned before
// it was sent — a position inside its interval — and its real effect, if
// any, comes later, so it is in the pool by then.) The state is deterministic — the answer fixes j — so no
// power-set construction is needed, and every unknown is closed at its
// last attempt, so porcupine's search only branches over requests that
// were really concurrent. With open-ended returns every unknown stays
// concurrent with the rest of the history and porcupine must try every
// subset of them before it can call a history illegal: 2^unknowns (a
// 300-request history with 24 unknowns and one stale answer: illegal in
// 3ms this way, still undecided after 10s with open-ended returns).
type modelState struct {
	Used     int64 // token_bucket: Capacity − remaining; fixed_window: count in the window
	Floating int64 // unknown requests linearized that may still take effect
}

// admitStep applies out to s under a bound of limit units: the sequential
// specification shared by both algorithms (one unit per admit; allowed
// leaves limit − used; denied iff used == limit, answering 0 left).
func admitStep(limit int64, s modelState, out admitOutput) (bool, modelState) {
	if !out.answered {
		return true, modelState{Used: s.Used, Floating: s.Floating + 1}
	}
	if out.allowed {
		used := limit - out.remaining // after this admit
		j := used - 1 - s.Used        // pool requests applied just before it
		if out.remaining < 0 || out.remaining >= limit || j < 0 || j > s.Floating {
			return false, s
		}
		return true, modelState{Used: used, Floating: s.Floating - j}
	}
	j := limit - s.Used
	if out.remaining != 0 || j < 0 || j > s.Floating {
		return false, s
	}
	return true, modelState{Used: limit, Floating: s.Floating - j}
}

func linearModel(spec LinearSpec) porcupine.Model {
	limit, unit := spec.Capacity, "left"
	if spec.Algorithm == "fixed_window" {
		limit, unit = spec.Limit, "left in window"
	}
	return porcupine.Model{
		Partition: partitionByWindow,
		Init:      func() any { return modelState{} },
		Step: func(state, input, output any) (bool, any) {
			return admitStep(limit, state.(modelState), output.(admitOutput))
		},
		Hash: func(state any) uint64 {
			s := state.(modelState)
			return uint64(s.Used)*0x9e3779b97f4a7c15 ^ uint64(s.Floating)
		},
		DescribeOperation: func(input, output any) string {
			in, out := input.(admitInput), output.(admitOutput)
			switch {
			case !out.answered:
				return fmt.Sprintf("%s → ? (never answered)", in.request)
			case out.allowed:
				return fmt.Sprintf("%s → allowed, %d %s", in.request, out.remaining, unit)
			default:
				return fmt.Sprintf("%s → denied, %d %s", in.request, out.remaining, unit)
			}
		},
		DescribeState: func(state any) string {
			s := state.(modelState)
			d := fmt.Sprintf("%d %s", limit-s.Used, unit)
			if s.Floating > 0 {
				d += fmt.Sprintf(" (+%d unanswered that may still apply)", s.Floating)
			}
			return d
		},
		DescribeOperationMetadata: func(info any) string {
			m, ok := info.(admitMeta)
			if !ok {
				return ""
			}
			d := fmt.Sprintf("%d call(s) via %s", m.attempts, strings.Join(m.nodes, ","))
			if m.decidedAt != 0 {
				d += "; decided_at " + fmtNanos(m.decidedAt)
			}
			if len(m.errors) > 0 {
				d += "; errors: " + strings.Join(m.errors, " | ")
			}
			return d
		},
	}
}

// partitionByWindow splits one key's operations by window index (all 0
// for token_bucket), in increasing window order.
func partitionByWindow(history []porcupine.Operation) [][]porcupine.Operation {
	byWindow := map[int64][]porcupine.Operation{}
	for _, op := range history {
		w := op.Input.(admitInput).window
		byWindow[w] = append(byWindow[w], op)
	}
	windows := make([]int64, 0, len(byWindow))
	for w := range byWindow {
		windows = append(windows, w)
	}
	sort.Slice(windows, func(i, j int) bool { return windows[i] < windows[j] })
	out := make([][]porcupine.Operation, len(windows))
	for i, w := range windows {
		out[i] = byWindow[w]
	}
	return out
}

// mergedReq is the attempts of one (caller, request ID) merged.
type mergedReq struct {
	key      string
	name     string
	client   int
	call     int64 // first attempt's Start
	last     int64 // latest End of any attempt
	answer   *Op   // first answered attempt (by End), nil if none
	attempts []Op
}

// mergeAttempts groups the kept ops by (key, caller, request ID); an op
// without a request ID is a request of its own.
func mergeAttempts(ops []Op, keep func(Op) bool) []*mergedReq {
	sorted := make([]Op, 0, len(ops))
	for _, op := range ops {
		if keep(op) {
			sorted = append(sorted, op)
		}
	}
	sortByEnd(sorted)
	type id struct{ key, caller, request string }
	byID := map[id]*mergedReq{}
	var reqs []*mergedReq
	for i := range sorted {
		op := sorted[i]
		k := id{op.Key, op.Caller, op.RequestID}
		if op.RequestID == "" {
			k.request = fmt.Sprintf("#op%d", op.ID)
		}
		r := byID[k]
		if r == nil {
			name := op.RequestID
			if name == "" {
				name = fmt.Sprintf("op%d", op.ID)
			}
			r = &mergedReq{key: op.Key, name: name, client: op.Client, call: op.Start.UnixNano(), last: op.End.UnixNano()}
			byID[k] = r
			reqs = append(reqs, r)
		}
		r.attempts = append(r.attempts, op)
		r.call = min(r.call, op.Start.UnixNano())
		r.last = max(r.last, op.End.UnixNano())
		if r.answer == nil && op.Outcome.OK() {
			r.answer = &sorted[i]
		}
	}
	return reqs
}

func (r *mergedReq) ret() int64 {
	if r.answer != nil {
		return r.answer.End.UnixNano()
	}
	return r.last
}

func (r *mergedReq) meta() admitMeta {
	m := admitMeta{attempts: len(r.attempts)}
	for _, a := range r.attempts {
		if a.Via != "" {
			m.nodes = append(m.nodes, a.Via)
		} else {
			m.nodes = append(m.nodes, a.Node)
		}
		if a.Error != "" {
			m.errors = append(m.errors, a.Error)
		}
	}
	if r.answer != nil {
		m.decidedAt = r.answer.DecidedAt
	}
	return m
}

func isAdmitOp(op Op) bool { return op.Kind == KindAdmit || op.Kind == "" }

// windowOf is the window index of a log time (floor division).
func windowOf(a, b int64) int64 {
	q := a / b
	if a%b != 0 && (a < 0) != (b < 0) {
		q--
	}
	return q
}

// CheckLinearizable checks, per key, that the admits on it (Kind admit or
// empty) are linearizable against the sequential model of spec, with
// porcupine. The attempts of one request ID are one operation: from the
// first attempt's Start to the End of the first answered attempt, whose
// answer is its output (later answers are the at-most-once checker's
// business). A request never answered may have been applied or not; see
// modelState for how the model keeps that open.
//
// token_bucket: one partition per key; an allowed answer must say
// remaining = (remaining before) − 1, a denied one remaining 0 at 0 left.
// fixed_window: one partition per key and window (DecidedAt / Window) of
// the answered requests; each unanswered request joins every window of its
// key that still had an answered request returning after it was sent (it
// may have been applied in any of them, so this checks each window on its
// own, never that an unknown request applied at most once).
//
// A key porcupine could not decide within spec.Timeout is "unknown": listed
// in the summary, not a violation.
func CheckLinearizable(ops []Op, spec LinearSpec) (Verdict, *LinearResult) {
	v := Verdict{Checker: "linearizable", OK: true}
	if spec.Timeout == 0 {
		spec.Timeout = 30 * time.Second
	}
	res := &LinearResult{Spec: spec}
	switch {
	case spec.Algorithm == "token_bucket" && spec.Capacity >= 1:
	case spec.Algorithm == "fixed_window" && spec.Limit >= 1 && spec.Window > 0:
	default:
		v.violate("unsupported spec %+v: want token_bucket with Capacity ≥ 1, or fixed_window with Limit ≥ 1 and Window > 0", spec)
		v.Summary = "not checked"
		return v, res
	}
	byKey := map[string][]*mergedReq{}
	for _, r := range mergeAttempts(ops, isAdmitOp) {
		byKey[r.key] = append(byKey[r.key], r)
	}
	model := linearModel(spec)
	keys := sortedKeys(byKey)
	res.Keys = make([]*KeyLinearResult, len(keys))
	sem := make(chan struct{}, runtime.GOMAXPROCS(0))
	var wg sync.WaitGroup
	for i, key := range keys {
		kr := &KeyLinearResult{Key: key, model: model}
		res.Keys[i] = kr
		sem <- struct{}{}
		wg.Go(func() {
			defer func() { <-sem }()
			checkKeyLinear(kr, byKey[key], spec)
		})
	}
	wg.Wait()

	requests, unanswered, outcomes := 0, 0, map[LinearOutcome]int{}
	for _, kr := range res.Keys {
		requests += kr.Requests
		unanswered += kr.Unanswered
		outcomes[kr.Outcome]++
		switch kr.Outcome {
		case LinearIllegal:
			res.FailingKeys = append(res.FailingKeys, kr.Key)
			v.violate("key %q: not linearizable (%s model): %s", kr.Key, spec.Algorithm, kr.Hint)
		case LinearUnknown:
			res.UnknownKeys = append(res.UnknownKeys, kr.Key)
		}
	}
	v.Summary = fmt.Sprintf("%s: %d keys (%d ok, %d illegal, %d unknown after %s), %d requests, %d never answered",
		spec.Algorithm, len(keys), outcomes[LinearOK], outcomes[LinearIllegal], outcomes[LinearUnknown], spec.Timeout,
		requests, unanswered)
	if len(res.UnknownKeys) > 0 {
		v.Summary += fmt.Sprintf("; undecided: %s", strings.Join(res.UnknownKeys, ", "))
	}
	return v, res
}

// checkKeyLinear builds the porcupine history of one key and checks it.
func checkKeyLinear(kr *KeyLinearResult, reqs []*mergedReq, spec LinearSpec) {
	rows := timelineRows(reqs)
	var history []porcupine.Operation
	var unknown []int               // indexes into reqs
	lastReturn := map[int64]int64{} // window → latest return of its answered requests
	for i, r := range reqs {
		if kr.Requests == 0 || r.call < kr.first {
			kr.first = r.call
		}
		kr.last = max(kr.last, r.ret())
		kr.Requests++
		if r.answer == nil {
			kr.Unanswered++
			unknown = append(unknown, i)
			continue
		}
		var w int64
		if spec.Algorithm == "fixed_window" {
			w = windowOf(r.answer.DecidedAt, int64(spec.Window))
		}
		if lr, ok := lastReturn[w]; !ok || r.ret() > lr {
			lastReturn[w] = r.ret()
		}
		history = append(history, admitOperation(r, i, w, rows[i]))
	}
	windows := make([]int64, 0, len(lastReturn))
	for w := range lastReturn {
		windows = append(windows, w)
	}
	sort.Slice(windows, func(a, b int) bool { return windows[a] < windows[b] })
	for _, i := range unknown {
		r := reqs[i]
		if spec.Algorithm != "fixed_window" {
			history = append(history, admitOperation(r, i, 0, rows[i]))
			continue
		}
		// An unknown request sent after every answered request of a window
		// returned could only be linearized after all of them: it can
		// explain nothing there.
		for _, w := range windows {
			if r.call <= lastReturn[w] {
				history = append(history, admitOperation(r, i, w, rows[i]))
			}
		}
	}
	kr.Partitions = len(partitionByWindow(history))
	began := time.Now()
	result, info := porcupine.CheckOperationsVerbose(kr.model, history, spec.Timeout)
	kr.Elapsed = time.Since(began)
	kr.info = info
	switch result {
	case porcupine.Ok:
		kr.Outcome = LinearOK
	case porcupine.Illegal:
		kr.Outcome = LinearIllegal
		kr.Hint = linearHint(kr.model, history, info)
	default:
		kr.Outcome = LinearUnknown
	}
}

func admitOperation(r *mergedReq, id int, window int64, row int) porcupine.Operation {
	out := admitOutput{}
	if a := r.answer; a != nil {
		out = admitOutput{answered: true, allowed: a.Outcome == OutcomeAllowed, remaining: a.Remaining, decidedAt: a.DecidedAt}
	}
	return porcupine.Operation{ClientId: row, Input: admitInput{id: id, request: r.name, window: window, client: r.client},
		Call: r.call, Output: out, Return: r.ret(), Metadata: r.meta()}
}

// timelineRows gives each request a timeline row: its client's, unless that
// row is busy then (synthetic histories, clients with several calls in
// flight), in which case the first free row after the clients'.
func timelineRows(reqs []*mergedReq) []int {
	order := make([]int, len(reqs))
	clients := map[int]bool{}
	for i, r := range reqs {
		order[i] = i
		clients[r.client] = true
	}
	sort.SliceStable(order, func(a, b int) bool { return reqs[order[a]].call < reqs[order[b]].call })
	// Dense rows for the clients seen, in client order.
	ids := make([]int, 0, len(clients))
	for c := range clients {
		ids = append(ids, c)
	}
	sort.Ints(ids)
	rowOf := map[int]int{}
	for i, c := range ids {
		rowOf[c] = i
	}
	busyUntil := make([]int64, len(ids))
	rows := make([]int, len(reqs))
	for _, i := range order {
		r := reqs[i]
		row := rowOf[r.client]
		if busyUntil[row] >= r.call {
			row = -1
			for x := len(ids); x < len(busyUntil); x++ {
				if busyUntil[x] < r.call {
					row = x
					break
				}
			}
			if row < 0 {
				row = len(busyUntil)
				busyUntil = append(busyUntil, 0)
			}
		}
		busyUntil[row] = r.ret()
		rows[i] = row
	}
	return rows
}

// linearHint says where the longest partial linearization of the first
// illegal partition stops: how far it got, its state, and the first request
// (by return) it could not place.
func linearHint(model porcupine.Model, history []porcupine.Operation, info porcupine.LinearizationInfo) string {
	parts := partitionByWindow(history)
	partials := info.PartialLinearizationsOperations()
	for p, ops := range parts {
		if p >= len(partials) {
			break
		}
		var longest []porcupine.Operation
		for _, l := range partials[p] {
			if len(l) > len(longest) {
				longest = l
			}
		}
		if len(longest) == len(ops) {
			continue // this partition is linearizable
		}
		state := model.Init()
		placed := map[int]bool{}
		for _, op := range longest {
			_, state = model.Step(state, op.Input, op.Output)
			placed[op.Input.(admitInput).id] = true
		}
		var stuck *porcupine.Operation
		for i := range ops {
			op := &ops[i]
			if placed[op.Input.(admitInput).id] {
				continue
			}
			if stuck == nil || op.Return < stuck.Return {
				stuck = op
			}
		}
		where := ""
		if len(parts) > 1 {
			where = fmt.Sprintf("window %d: ", ops[0].Input.(admitInput).window)
		}
		h := fmt.Sprintf("%slongest linearization places %d of %d requests and ends at %q", where, len(longest), len(ops),
			model.DescribeState(state))
		if stuck != nil {
			h += fmt.Sprintf("; then cannot place %s (client %d, %s … %s)", model.DescribeOperation(stuck.Input, stuck.Output),
				stuck.Input.(admitInput).client, fmtWall(stuck.Call), fmtWall(stuck.Return))
		}
		return h
	}
	return "no linearization"
}

func fmtWall(ns int64) string { return time.Unix(0, ns).Format("15:04:05.000000") }
