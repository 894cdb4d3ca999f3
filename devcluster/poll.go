package devcluster

import (
	"context"
	"fmt"
	"time"
)

// PollDeadline is Poll's error when its deadline passed; Problem is what
// the last try reported.
type PollDeadline struct{ Problem error }

func (p PollDeadline) Error() string { return fmt.Sprintf("not done in time: %v", p.Problem) }
func (p PollDeadline) Unwrap() error { return p.Problem }

// PollStopped is Poll's error when its stop channel was closed; Problem is
// what the last try reported.
type PollStopped struct{ Problem error }

func (p PollStopped) Error() string { return fmt.Sprintf("stopped: %v", p.Problem) }

// Poll calls try (each call bounded by perTry) every interval until it
// reports done (then it returns try's error), ctx ends, stop is closed
// (PollStopped) or the deadline passes (PollDeadline); both carry try's
// last problem. A zero deadline is none; a nil stop is never closed. It
// waits for a starting cluster here, and for the processes quorate-bench
// starts.
func Poll(ctx context.Context, interval, perTry time.Duration, deadline time.Time, stop <-chan struct{},
	try func(context.Context) (done bool, problem error)) error {
	var expired <-chan time.Time
	if !deadline.IsZero() {
		timer := time.NewTimer(time.Until(deadline))
		defer timer.Stop()
		expired = timer.C
	}
	tick := time.NewTicker(interval)
	defer tick.Stop()
	for {
		attempt, cancel := context.WithTimeout(ctx, perTry)
		done, problem := try(attempt)
		cancel()
		if done {
			return problem
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-stop:
			return PollStopped{problem}
		case <-expired:
			return PollDeadline{problem}
		case <-tick.C:
		}
	}
}
