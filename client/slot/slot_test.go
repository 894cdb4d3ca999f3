package slot

import "testing"

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
	a, b := Of("{tenant:acme}:ip:1.2.3.4"), Of("{tenant:acme}:route:/reports")
	if a != b || a != Of("tenant:acme") {
		t.Fatalf("slots %d, %d, %d differ", a, b, Of("tenant:acme"))
	}
}

// TestSlotsArePinned: the slot of a key is part of every cluster's state
// (the shard map places slots, the log and snapshots hold keys by slot),
// so the hash must never change.
func TestSlotsArePinned(t *testing.T) {
	for key, want := range map[string]uint16{
		"tenant:acme":              1232,
		"{tenant:acme}:ip:1.2.3.4": 1232,
		"key-0":                    883,
		"user:42":                  450,
		"":                         2457,
	} {
		if got := Of(key); got != want {
			t.Errorf("Of(%q) = %d, want %d", key, got, want)
		}
	}
}
