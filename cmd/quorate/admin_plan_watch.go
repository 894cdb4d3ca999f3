package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"strings"
	"time"

	"connectrpc.com/connect"

	quoratev1 "github.com/quorate/quorate/proto/quorate/v1"
	"github.com/quorate/quorate/proto/quorate/v1/quoratev1connect"
)

// watchPlan asks for the plans every planPollInterval (each request bounded
// by perTry) and prints a timestamped line each time w's plan's progress
// changes. It returns nil once the plan is done, the plan's error when it
// failed or was cancelled, and an error naming the plan and its last
// progress when ctx's deadline (--timeout of a command with --wait, whose
// value budget is) passes. A request that times out or finds no server is
// retried (its error printed to errOut once); any other error ends the
// watch.
func watchPlan(ctx context.Context, ac quoratev1connect.AdminServiceClient, base string, out, errOut io.Writer,
	w *planWatcher, perTry, budget time.Duration) error {
	what := "the newest plan to end"
	if w.chosen {
		what = fmt.Sprintf("plan %d to end", w.id)
	}
	wt := &waiter{what: what, budget: budget, perTry: perTry, out: out, errOut: errOut, every: planPollInterval,
		after: fmt.Sprintf("the plan goes on without this command: follow it with quorate admin plan watch %d --server %s", w.id, base)}
	return wt.run(ctx, func(attempt context.Context) (string, bool, error) {
		resp, err := ac.ListPlans(attempt, connect.NewRequest(&quoratev1.ListPlansRequest{}))
		if err != nil {
			return w.last, false, wrapRPC("ListPlans", base, "", err)
		}
		_, done, err := w.observe(resp.Msg.GetPlans())
		return w.last, done, err
	})
}

// planWatcher follows one plan through successive ListPlans answers.
type planWatcher struct {
	id     uint64
	chosen bool   // false: follow the newest plan of the first answer
	last   string // the last line printed
}

// observe takes one ListPlans answer and returns the line to print ("" when
// the plan's progress has not changed), whether the watch is over and, if
// so, why it failed (nil: the plan is done).
func (w *planWatcher) observe(plans []*quoratev1.PlanStatus) (line string, over bool, _ error) {
	if !w.chosen {
		newest := newestPlan(plans)
		if newest == nil {
			return "", true, errors.New("no plan to watch: the cluster lists none")
		}
		w.id, w.chosen = newest.GetId(), true
	}
	var p *quoratev1.PlanStatus
	for _, q := range plans {
		if q.GetId() == w.id {
			p = q
		}
	}
	if p == nil {
		return "", true, fmt.Errorf("plan %d is not listed (the cluster keeps the running plan and the last finished ones)", w.id)
	}
	if line = planProgress(p); line == w.last {
		line = ""
	} else {
		w.last = line
	}
	switch p.GetState() {
	case planDone:
		return line, true, nil
	case planFailed, planCancelled:
		if msg := p.GetError(); msg != "" {
			return line, true, fmt.Errorf("plan %d %s: %s", p.GetId(), p.GetState(), msg)
		}
		return line, true, fmt.Errorf("plan %d %s", p.GetId(), p.GetState())
	}
	return line, false, nil
}

// newestPlan is the plan with the highest ID; nil for none.
func newestPlan(plans []*quoratev1.PlanStatus) *quoratev1.PlanStatus {
	var newest *quoratev1.PlanStatus
	for _, p := range plans {
		if newest == nil || p.GetId() > newest.GetId() {
			newest = p
		}
	}
	return newest
}

// planProgress describes a plan in one line: its state and, while it runs
// or cancels, its current step's progress; when it failed, its error.
func planProgress(p *quoratev1.PlanStatus) string {
	head := fmt.Sprintf("plan %d %s", p.GetId(), dash(p.GetState()))
	switch p.GetState() {
	case planDone:
		return fmt.Sprintf("%s: %d/%d %s", head, p.GetStepsDone(), len(p.GetSteps()), plural(len(p.GetSteps()), "step", "steps"))
	case planRunning, planCancelling:
		if i, st := currentStep(p); st != nil {
			return fmt.Sprintf("%s: step %d/%d %s", head, i+1, len(p.GetSteps()), stepProgress(st))
		}
	}
	if msg := p.GetError(); msg != "" {
		return fmt.Sprintf("%s: %s", head, msg)
	}
	return head
}

// currentStep is the step a plan is at (the first not done) and its index;
// nil once every step is done.
func currentStep(p *quoratev1.PlanStatus) (int, *quoratev1.PlanStepStatus) {
	i := int(p.GetStepsDone())
	if i >= len(p.GetSteps()) {
		return -1, nil
	}
	return i, p.GetSteps()[i]
}

// stepProgress describes a step: its action, phase and attempt, and what it
// copied (once it copies).
func stepProgress(st *quoratev1.PlanStepStatus) string {
	parts := []string{dash(st.GetPhase())}
	if st.GetAttempt() > 0 {
		parts = append(parts, fmt.Sprintf("attempt %d", st.GetAttempt()))
	}
	if st.GetRecords() != 0 || st.GetBytes() != 0 || st.GetChunks() != 0 || st.GetPhase() == "copying" {
		parts = append(parts,
			fmt.Sprintf("%d %s", st.GetRecords(), plural(int(st.GetRecords()), "record", "records")),
			fmtBytes(st.GetBytes()),
			fmt.Sprintf("%d %s", st.GetChunks(), plural(int(st.GetChunks()), "chunk", "chunks")))
	}
	return fmt.Sprintf("%s: %s", dash(st.GetAction()), strings.Join(parts, ", "))
}
