package admission_test

import (
	"errors"
	"testing"

	"github.com/quorate/quorate/admission"
)

// TestFieldErrorText checks the message of a field error, with and without
// a Source, and that Nested keeps the Source and the sentinel.
func TestFieldErrorText(t *testing.T) {
	fe := &admission.FieldError{Field: "burst", Reason: "must be positive", Err: admission.ErrInvalidPolicy}
	if got, want := fe.Error(), "burst: must be positive"; got != want {
		t.Errorf("Error() = %q, want %q", got, want)
	}
	other := &admission.FieldError{Field: "to", Reason: "is empty", Source: "shard"}
	if got, want := other.Error(), "shard: to: is empty"; got != want {
		t.Errorf("Error() = %q, want %q", got, want)
	}
	err := admission.Nested("policies[2].", fe)
	if got, want := err.Error(), "policies[2].burst: must be positive"; got != want || !errors.Is(err, admission.ErrInvalidPolicy) {
		t.Errorf("Nested: %q (wraps ErrInvalidPolicy: %v), want %q wrapping it", got, errors.Is(err, admission.ErrInvalidPolicy), want)
	}
	if got, want := admission.Nested("m.", other).Error(), "shard: m.to: is empty"; got != want {
		t.Errorf("Nested: %q, want %q", got, want)
	}
}
