package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"time"

	"github.com/spf13/cobra"

	"github.com/quorate/quorate/client"
)

const (
	// defaultWaitTimeout is --timeout's default for a command told to wait
	// (--wait, drain --remove): moving replicas or slots takes longer than
	// the 5 s of a single request.
	defaultWaitTimeout = 10 * time.Minute
	// waitRequestTimeout bounds each request of a wait (within --timeout).
	waitRequestTimeout = 5 * time.Second
	// waitPollInterval is how often a wait asks how far things are.
	waitPollInterval = 500 * time.Millisecond
)

// timeoutUsageWithWait is the --timeout usage of a command with --wait.
const timeoutUsageWithWait = "deadline of the whole command, its wait included; with --wait (or drain --remove) unless given: 10m"

// applyWaitTimeout gives --timeout its default for a waiting command: 10
// minutes unless --timeout was given.
func applyWaitTimeout(cmd *cobra.Command, client *clientOptions, waiting bool) {
	if waiting && !cmd.Flags().Changed("timeout") {
		client.timeout = defaultWaitTimeout
	}
}

// waiter follows something the cluster carries out (a plan, a replica move,
// a drain) until it is done or the context ends. It prints each new state on
// out, timestamped, and says on errOut what it waits for when it starts and
// again every progressEvery, and each failed request (once per message).
type waiter struct {
	what    string        // what it waits for: "plan 7 to end", "node4 to host no replica"
	budget  time.Duration // the command's --timeout, for messages; 0: none (plan watch)
	perTry  time.Duration // bound of each request
	after   string        // how to follow it on without this command, for the deadline's error
	out     io.Writer
	errOut  io.Writer
	every   time.Duration // poll interval; 0: waitPollInterval
	started time.Time
}

// progressEvery is how often a wait that is not done says so on stderr:
// a quarter of its budget, between 1 s and 10 s.
func (w *waiter) progressEvery() time.Duration {
	if w.budget <= 0 {
		return 10 * time.Second
	}
	return min(max(w.budget/4, time.Second), 10*time.Second)
}

// run calls poll until it reports done (then it returns poll's error: nil,
// or why the thing failed), ctx ends (its deadline: an error naming what
// it waited for, its last state and the last failed request), or poll fails
// with an error that asking again would only repeat. A poll error that is
// retryable (unavailable, a connection failure, a request's own deadline) is
// printed and asked again.
func (w *waiter) run(ctx context.Context, poll func(ctx context.Context) (state string, done bool, err error)) error {
	interval := w.every
	if interval <= 0 {
		interval = waitPollInterval
	}
	w.started = time.Now()
	if w.budget > 0 {
		fmt.Fprintf(w.errOut, "%s  waiting up to %v (--timeout) for %s\n", stamp(), w.budget, w.what)
	}
	var (
		state, lastErr string
		nextProgress   = w.started.Add(w.progressEvery())
	)
	tick := time.NewTicker(interval)
	defer tick.Stop()
	for {
		attempt, cancel := context.WithTimeout(ctx, w.perTry)
		s, done, err := poll(attempt)
		cancel()
		if s != "" && s != state {
			fmt.Fprintf(w.out, "%s  %s\n", stamp(), s)
			state = s
		}
		switch {
		case done:
			return err
		case err != nil && ctx.Err() == nil:
			if !client.Retryable(err) && !errors.Is(err, context.DeadlineExceeded) {
				return err // an answer about the request: asking again would repeat it
			}
			if msg := err.Error(); msg != lastErr {
				fmt.Fprintf(w.errOut, "%s  %v (asking again)\n", stamp(), err)
				lastErr = msg
			}
		case err == nil:
			lastErr = ""
		}
		if now := time.Now(); !now.Before(nextProgress) {
			line := fmt.Sprintf("%s  still waiting for %s after %v", stamp(), w.what, now.Sub(w.started).Round(time.Second))
			if state != "" {
				line += ": " + state
			}
			fmt.Fprintln(w.errOut, line)
			nextProgress = now.Add(w.progressEvery())
		}
		select {
		case <-ctx.Done():
			return w.gaveUp(ctx, state, lastErr)
		case <-tick.C:
		}
	}
}

// gaveUp is the error of a wait whose context ended.
func (w *waiter) gaveUp(ctx context.Context, state, lastErr string) error {
	if !errors.Is(ctx.Err(), context.DeadlineExceeded) {
		return ctx.Err()
	}
	msg := fmt.Sprintf("gave up waiting for %s after %v (--timeout %v)", w.what, time.Since(w.started).Round(100*time.Millisecond), w.budget)
	if state != "" {
		msg += "; last seen: " + state
	}
	if lastErr != "" {
		msg += "; last error: " + lastErr
	}
	if w.after != "" {
		msg += "; " + w.after
	}
	return errors.New(msg)
}

func stamp() string { return time.Now().Format("15:04:05") }
