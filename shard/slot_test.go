package shard

import (
	"fmt"
	"testing"
)

func TestHashTag(t *testing.T) {
	for key, want := range map[string]string{
		"tenant:acme":                 "tenant:acme",
		"{tenant:acme}:ip:1.2.3.4":    "tenant:acme",
		"route:{tenant:acme}:x":       "tenant:acme",
		"{a}{b}":                      "a",
		"a{}b":                        "a{}b",
		"{":                           "{",
		"no-close{tag":                "no-close{tag",
		"}{x}":                        "x",
		"{user:1}:login-attempts:{b}": "user:1",
	} {
		if got := HashTag(key); got != want {
			t.Errorf("HashTag(%q) = %q, want %q", key, got, want)
		}
	}
}

func TestKeysSharingATagShareASlot(t *testing.T) {
	a, b := SlotOf("{tenant:acme}:ip:1.2.3.4"), SlotOf("{tenant:acme}:route:/reports")
	if a != b || a != SlotOf("tenant:acme") {
		t.Fatalf("slots %d, %d, %d differ", a, b, SlotOf("tenant:acme"))
	}
}

// Sequential keys spread evenly over 3 equal thirds of the slot space: each
// third gets 33.3% ± 5% of 10k keys (FNV-1 as some limiters use it is far off).
func TestSequentialKeysSpreadEvenly(t *testing.T) {
	const n = 10000
	var thirds [3]int
	for i := range n {
		s := SlotOf(fmt.Sprintf("key-%d", i))
		if s >= SlotCount {
			t.Fatalf("slot %d out of range", s)
		}
		thirds[int(s)*3/SlotCount]++
	}
	for i, c := range thirds {
		if share := float64(c) / n; share < 0.2833 || share > 0.3833 {
			t.Errorf("third %d got %.1f%% of sequential keys", i, 100*share)
		}
	}
}
