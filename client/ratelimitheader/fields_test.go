package ratelimitheader

import (
	"testing"
	"time"
)

func TestFields(t *testing.T) {
	h := Fields([]Limit{
		{Name: `per "client"`, Limit: 20, Remaining: 0, Window: time.Minute, ResetAfter: 19001 * time.Millisecond},
		{Name: "per-route", Limit: 100, Remaining: -3, ResetAfter: 0},
		{Name: "bucket", Limit: 60, Burst: 20, Remaining: 19, Window: time.Minute, ResetAfter: time.Second},
		{Name: "flat-bucket", Limit: 5, Burst: 5, Remaining: 5, Window: time.Second},
		{Name: "in-flight", Limit: 2, Remaining: 1, Window: time.Hour, ResetAfter: time.Hour, Concurrent: true},
	})
	if got, want := h.Get(Policy), `"per \"client\"";q=20;w=60, "per-route";q=100, "bucket";q=60;w=60;quorate-burst=20, "flat-bucket";q=5;w=1, "in-flight";q=2;qu="concurrent-requests"`; got != want {
		t.Errorf("%s %q, want %q", Policy, got, want)
	}
	if got, want := h.Get(RateLimit), `"per \"client\"";r=0;t=20, "per-route";r=0;t=0, "bucket";r=19;t=1, "flat-bucket";r=5;t=0, "in-flight";r=1`; got != want {
		t.Errorf("%s %q, want %q", RateLimit, got, want)
	}
	if got := Integer(1 << 62); got != "999999999999999" {
		t.Errorf("Integer clamps to %s", got)
	}
}
