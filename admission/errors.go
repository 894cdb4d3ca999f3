package admission

import (
	"errors"
	"fmt"
	"unicode/utf8"
)

// Sentinel errors of this package. Field errors (*FieldError) wrap one of
// them, so callers test with errors.Is and read the field with errors.As.
var (
	// ErrInvalidPolicy is wrapped by every error from Policy.Validate: the
	// policy must be fixed by the operator (Connect InvalidArgument).
	ErrInvalidPolicy = errors.New("invalid policy")
	// ErrInvalidRequest is wrapped by every error from Policy.CheckRequest:
	// the request's key or cost is unacceptable under the policy (Connect
	// InvalidArgument).
	ErrInvalidRequest = errors.New("invalid request")
)

// FieldError reports one invalid field of a policy or a request.
//
// Field is the yaml/json name of the field ("name", "algorithm", "limit",
// "period", "burst", "max_cost", "on_unavailable" for a policy; "key",
// "cost" for a request). Reason is a human-readable explanation that
// includes the offending value where that is useful. Err is the sentinel
// (ErrInvalidPolicy or ErrInvalidRequest) returned by Unwrap.
//
// Package shard reports invalid maps and refused plans with the same type:
// Source "shard", Field a struct field path such as "Ranges[3].Range.Start"
// or a plan's parameter such as "to", and Err, if set, a sentinel of shard
// (shard.ErrNoChange, shard.ErrForming).
type FieldError struct {
	Field  string
	Reason string
	Err    error
	// Source is the package whose check failed, the message's prefix;
	// empty for admission's own errors, which are about what a caller sent
	// and read in its terms, without a package name.
	Source string
}

// Error returns "<field>: <reason>", e.g. "burst: must be between 1 and
// 1000000000 (got -1)", after "<source>: " when Source is set.
func (e *FieldError) Error() string {
	if e.Source == "" {
		return e.Field + ": " + e.Reason
	}
	return e.Source + ": " + e.Field + ": " + e.Reason
}

// Unwrap returns the sentinel error e wraps.
func (e *FieldError) Unwrap() error { return e.Err }

// Nested returns err with the field of its *FieldError placed under
// prefix (e.g. "also[0]." or "policies[2]."), so that the name points into
// a larger request; any other error comes back as it is.
func Nested(prefix string, err error) error {
	var fe *FieldError
	if prefix == "" || !errors.As(err, &fe) {
		return err
	}
	return &FieldError{Field: prefix + fe.Field, Reason: fe.Reason, Err: fe.Err, Source: fe.Source}
}

// MaxQuotedBytes is the longest prefix of a client-supplied string (a
// policy name, key, caller, request or lease ID) that an error message
// repeats; Quote says how long the rest was.
const MaxQuotedBytes = 64

// Quote quotes a client-supplied string s for an error message: all of it
// when it is at most MaxQuotedBytes long, else its first MaxQuotedBytes
// (cut at a UTF-8 boundary) followed by "…(N bytes)", N being len(s). Every
// error of Quorate that repeats what a client sent goes through Quote, so
// that a huge value never comes back whole.
func Quote(s string) string {
	if len(s) <= MaxQuotedBytes {
		return fmt.Sprintf("%q", s)
	}
	cut := MaxQuotedBytes
	for cut > MaxQuotedBytes-utf8.UTFMax && cut > 0 && !utf8.RuneStart(s[cut]) {
		cut--
	}
	return fmt.Sprintf("%q…(%d bytes)", s[:cut], len(s))
}
