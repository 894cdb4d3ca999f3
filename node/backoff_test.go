package node

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/cenkalti/backoff/v5"
	"github.com/quorate/quorate/node/internal/engine"
)

// The node's waits double from initial up to max, without jitter: the
// damaged replica's 1s..1m, the plan calls' 20ms..500ms, the routing
// retries' 5ms..100ms.
func TestDoublingWaits(t *testing.T) {
	for _, tt := range []struct {
		initial, max time.Duration
		want         []time.Duration
	}{
		{time.Second, time.Minute, []time.Duration{1, 2, 4, 8, 16, 32, 60, 60}},
		{20 * time.Millisecond, 500 * time.Millisecond, []time.Duration{20, 40, 80, 160, 320, 500, 500}},
		{5 * time.Millisecond, 100 * time.Millisecond, []time.Duration{5, 10, 20, 40, 80, 100, 100}},
	} {
		b := engine.Doubling(tt.initial, tt.max)
		unit := time.Millisecond
		if tt.initial == time.Second {
			unit = time.Second
		}
		for i, w := range tt.want {
			if got := b.NextBackOff(); got != w*unit {
				t.Fatalf("doubling(%v, %v): wait %d = %v, want %v", tt.initial, tt.max, i+1, got, w*unit)
			}
		}
	}
}

// retry stops at success or a permanent error (returned unwrapped, with
// no stopped error), and when ctx ends returns the last error and ctx.Err().
func TestRetryStops(t *testing.T) {
	ctx := context.Background()
	errAgain, errFinal := errors.New("again"), errors.New("final")
	calls := 0
	err, stopped := engine.Retry(ctx, engine.Doubling(time.Millisecond, time.Millisecond), func() error {
		calls++
		if calls < 3 {
			return errAgain
		}
		return backoff.Permanent(errFinal)
	})
	if err != errFinal || stopped != nil || calls != 3 {
		t.Fatalf("permanent: err=%v stopped=%v calls=%d, want %v, nil, 3", err, stopped, calls, errFinal)
	}
	calls = 0
	err, stopped = engine.Retry(ctx, engine.Doubling(time.Millisecond, time.Millisecond), func() error {
		calls++
		if calls < 3 {
			return errAgain
		}
		return nil
	})
	if err != nil || stopped != nil || calls != 3 {
		t.Fatalf("success: err=%v stopped=%v calls=%d, want nil, nil, 3", err, stopped, calls)
	}
	cctx, cancel := context.WithCancel(ctx)
	calls = 0
	err, stopped = engine.Retry(cctx, engine.Doubling(time.Millisecond, time.Millisecond), func() error {
		calls++
		if calls == 3 {
			cancel()
		}
		return errAgain
	})
	if err != errAgain || !errors.Is(stopped, context.Canceled) || calls != 3 {
		t.Fatalf("cancelled: err=%v stopped=%v calls=%d, want %v, %v, 3", err, stopped, calls, errAgain, context.Canceled)
	}
}
