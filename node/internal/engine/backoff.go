package engine

import (
	"context"
	"errors"
	"time"

	"github.com/cenkalti/backoff/v5"
)

// Doubling is the wait of the node's retries: initial, Doubling up to max,
// without jitter (a node retries its own calls, so no crowd of clients
// retries in step with it).
func Doubling(initial, max time.Duration) *backoff.ExponentialBackOff {
	return &backoff.ExponentialBackOff{InitialInterval: initial, Multiplier: 2, MaxInterval: max}
}

// Retry calls op until it returns nil or a backoff.Permanent error (returned
// unwrapped as err), waiting b's next wait after each other error, with no
// limit but ctx. When ctx ends first, err is op's last error and stopped is
// ctx.Err().
func Retry(ctx context.Context, b backoff.BackOff, op func() error) (err, stopped error) {
	var last error
	final := false
	_, err = backoff.Retry(ctx, func() (struct{}, error) {
		last = op()
		var p *backoff.PermanentError
		final = last == nil || errors.As(last, &p)
		return struct{}{}, last
	}, backoff.WithBackOff(b), backoff.WithMaxElapsedTime(0))
	if final {
		return err, nil
	}
	return last, ctx.Err()
}
