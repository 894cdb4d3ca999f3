package ratelimitheader

import (
	"testing"
	"time"
)

func TestFields(t *testing.T) {
	h := Fields([]Limit{
		{Name: `per "client"`, Limit: 20, Remaining: 0, Window: time.Minute, ResetAfter: 19001 * time.Millisecond},
		{Name: "per-route", Limit: 100, Remaining: -3, ResetAfter: 0},
	})
	if got, want := h.Get(Policy), `"per \"client\"";q=20;w=60, "per-route";q=100`; got != want {
		t.Errorf("%s %q, want %q", Policy, got, want)
	}
	if got, want := h.Get(RateLimit), `"per \"client\"";r=0;t=20, "per-route";r=0;t=0`; got != want {
		t.Errorf("%s %q, want %q", RateLimit, got, want)
	}
	if got := Integer(1 << 62); got != "999999999999999" {
		t.Errorf("Integer clamps to %s", got)
	}
}
