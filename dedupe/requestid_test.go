package dedupe_test

import (
	"strings"
	"testing"

	"github.com/quorate/quorate/dedupe"
)

// TestSentRequestID gives back what the caller sent from every keyed ID,
// and leaves an ID without a key's digest as it is.
func TestSentRequestID(t *testing.T) {
	for _, id := range []string{"", "7f3c9a51e2d04b8c", "nonexistent", "a\x00kb", strings.Repeat("x", 128), "ends\x00k0123456789abcdef"} {
		for _, key := range []string{"", "k", "tenant/acme"} {
			keyed := dedupe.KeyedRequestID(id, key)
			if keyed == id {
				t.Fatalf("KeyedRequestID(%q, %q) did not fold the key in", id, key)
			}
			if got := dedupe.SentRequestID(keyed); got != id {
				t.Errorf("SentRequestID(KeyedRequestID(%q, %q)) = %q", id, key, got)
			}
		}
	}
	for _, id := range []string{"", "plain", "x\x00k0123456789abcde", "x\x00k0123456789ABCDEF", "x\x01k0123456789abcdef"} {
		if got := dedupe.SentRequestID(id); got != id {
			t.Errorf("SentRequestID(%q) = %q, want it unchanged", id, got)
		}
	}
}
