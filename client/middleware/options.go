package middleware

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"net/http"
	"strconv"
	"strings"
	"time"

	"connectrpc.com/connect"

	quoratev1 "github.com/quorate/quorate/proto/quorate/v1"
)

// HeaderIdempotencyKey is the request field WithIdempotencyKey reads by
// default (draft-ietf-httpapi-idempotency-key-header, as Stripe sends it).
const HeaderIdempotencyKey = "Idempotency-Key"

// The fields WithXRateLimitHeaders adds, for clients that know only them.
const (
	HeaderXLimit     = "X-RateLimit-Limit"
	HeaderXRemaining = "X-RateLimit-Remaining"
	HeaderXReset     = "X-RateLimit-Reset"
)

// MaxIdempotencyKeyBytes is the longest Idempotency-Key accepted (Stripe's
// bound).
const MaxIdempotencyKeyBytes = 255

// DefaultUnavailableRetryAfter is the Retry-After of a 503 answer, unless
// WithUnavailableRetryAfter sets another.
const DefaultUnavailableRetryAfter = time.Second

// Refunder gives back what an admitted request spent; *client.Client is one.
type Refunder interface {
	Refund(ctx context.Context, key, requestID string) (refunded bool, cost int64, err error)
}

// answerConfig holds the options of how requests are named and answered.
type answerConfig struct {
	idempotency      string // request field naming the request; empty: none
	refund           bool
	xHeaders         bool
	unavailableRetry time.Duration
}

// WithIdempotencyKey names each POST and PATCH request (the methods the
// IETF draft keys; others are charged as usual) by its Idempotency-Key field
// (header names another field; empty means HeaderIdempotencyKey): the key is
// the admission's request ID, so a retry of an admitted request with the
// same key is let through without being charged again. Put it in front of
// handlers that honour the key themselves (a repeat replays the first
// answer without doing the work again): the limiter lets every repeat of a
// key through uncharged, so a handler that redoes the work lets a client
// repeating one key do so without limit. The key is a
// structured-field String (the IETF draft) or, as Stripe sends it, the bare
// value: 1 to MaxIdempotencyKeyBytes printable ASCII bytes; another value is
// answered 400. A key used again for another request (another route, cost
// or identity's limits) is answered 422 Unprocessable Content. A retry of a
// denied request is denied by the same answer until its Retry-After has
// passed, then decided anew. Keys are per identity: the cluster names a
// request by its caller, request ID and (first) key, which carries the
// identity. A decision from a budget lease (client.LocalGrant) is not
// recorded by the cluster, so the client decides named requests strictly.
func WithIdempotencyKey(header string) Option {
	if header == "" {
		header = HeaderIdempotencyKey
	}
	return func(c *config) { c.answers.idempotency = header }
}

// WithRefundOnServerError gives back what a request spent when the handler
// answers it with a server error (HTTP 5xx; under Connect the codes Unknown,
// Internal, Unimplemented, Unavailable, DataLoss and DeadlineExceeded), so a
// failed request does not use up its caller's quota. The Admitter must be a
// Refunder. Only requests the cluster admitted (client.Verified) and charged
// now (not a duplicate of an earlier attempt) are refunded, once, before the
// handler's answer completes; a refund's error goes to WithOnError's hook.
func WithRefundOnServerError() Option {
	return func(c *config) { c.answers.refund = true }
}

// WithXRateLimitHeaders adds X-RateLimit-Limit (the quota per window, q),
// X-RateLimit-Remaining (r) and X-RateLimit-Reset (t: seconds from now, not
// a Unix time) of one limit to every answer that carries the RateLimit
// fields: the limit that denied, else the one with the fewest units left.
func WithXRateLimitHeaders() Option {
	return func(c *config) { c.answers.xHeaders = true }
}

// WithUnavailableRetryAfter sets the Retry-After of a 503 (Unavailable)
// answer, rounded up to whole seconds (default
// DefaultUnavailableRetryAfter).
func WithUnavailableRetryAfter(d time.Duration) Option {
	return func(c *config) { c.answers.unavailableRetry = d }
}

// check validates the options against a, filling defaults.
func (c *answerConfig) check(a Admitter) error {
	if c.refund {
		if _, ok := a.(Refunder); !ok {
			return fmt.Errorf("middleware: WithRefundOnServerError: the admitter (%T) has no Refund method", a)
		}
	}
	if c.unavailableRetry < 0 {
		return fmt.Errorf("middleware: WithUnavailableRetryAfter: %v is negative", c.unavailableRetry)
	}
	if c.unavailableRetry == 0 {
		c.unavailableRetry = DefaultUnavailableRetryAfter
	}
	if c.idempotency != "" && !validFieldName(c.idempotency) {
		return fmt.Errorf("middleware: WithIdempotencyKey: %q is not a header field name", c.idempotency)
	}
	return nil
}

func validFieldName(s string) bool {
	for i := 0; i < len(s); i++ {
		c := s[i]
		if c <= ' ' || c >= 0x7f || strings.IndexByte(`"(),/:;<=>?@[\]{}`, c) >= 0 {
			return false
		}
	}
	return s != ""
}

// idempotencyKey returns r's idempotency key ("" when it has none) as a
// request ID, or an error naming the field.
func (c *answerConfig) idempotencyKey(r *http.Request) (string, error) {
	if c.idempotency == "" || (r.Method != http.MethodPost && r.Method != http.MethodPatch) {
		return "", nil
	}
	vs := r.Header.Values(c.idempotency)
	if len(vs) == 0 {
		return "", nil
	}
	if len(vs) > 1 {
		return "", fmt.Errorf("%s: given %d times, want once", c.idempotency, len(vs))
	}
	v := strings.Trim(vs[0], " \t")
	if strings.HasPrefix(v, `"`) {
		s, err := sfString(v)
		if err != nil {
			return "", fmt.Errorf("%s: %w", c.idempotency, err)
		}
		v = s
	}
	if v == "" || len(v) > MaxIdempotencyKeyBytes {
		return "", fmt.Errorf("%s: want 1 to %d bytes, got %d", c.idempotency, MaxIdempotencyKeyBytes, len(v))
	}
	for i := 0; i < len(v); i++ {
		if v[i] < 0x20 || v[i] > 0x7e {
			return "", fmt.Errorf("%s: byte %d is not printable ASCII", c.idempotency, i)
		}
	}
	// Request IDs are at most 128 bytes, and a denied key's later attempts
	// take a suffix (see idempotentID): a longer key is named by its digest.
	if len(v) > maxIdempotentIDBytes {
		sum := sha256.Sum256([]byte(v))
		v = "sha256:" + hex.EncodeToString(sum[:])
	}
	return v, nil
}

// maxIdempotentIDBytes leaves room in a 128-byte request ID for the suffix
// of a later attempt.
const maxIdempotentIDBytes = 120

// maxIdempotentAttempts bounds the attempts decided anew under one key, each
// after the Retry-After of the denial before it.
const maxIdempotentAttempts = 16

// idempotentID is the request ID of attempt n (0 first) under key: a denied
// attempt is recorded, and the retry after its Retry-After is a new
// admission.
func idempotentID(key string, n int) string {
	if n == 0 {
		return key
	}
	return key + "~" + strconv.Itoa(n)
}

// sfString parses s as exactly one structured-field String (RFC 9651
// §4.2.5).
func sfString(s string) (string, error) {
	if len(s) < 2 || s[0] != '"' {
		return "", errors.New("not a String")
	}
	var b strings.Builder
	for i := 1; i < len(s); i++ {
		c := s[i]
		switch {
		case c == '\\':
			i++
			if i >= len(s) || (s[i] != '"' && s[i] != '\\') {
				return "", errors.New("bad escape in String")
			}
			b.WriteByte(s[i])
		case c == '"':
			if i != len(s)-1 {
				return "", errors.New("text after the String")
			}
			return b.String(), nil
		case c < 0x20 || c > 0x7e:
			return "", fmt.Errorf("byte %#x in String", c)
		default:
			b.WriteByte(c)
		}
	}
	return "", errors.New("unterminated String")
}

// reusedRequestID reports whether err is the cluster's refusal of a request
// ID already used for another request.
func reusedRequestID(err error) bool {
	var ce *connect.Error
	if !errors.As(err, &ce) || ce.Code() != connect.CodeInvalidArgument {
		return false
	}
	for _, d := range ce.Details() {
		if v, err := d.Value(); err == nil {
			if fv, ok := v.(*quoratev1.FieldViolation); ok && fv.GetField() == "request_id" {
				return true
			}
		}
	}
	return false
}

// serverFailure reports whether a Connect handler's error is a server error
// (an HTTP 5xx).
func serverFailure(err error) bool {
	if err == nil {
		return false
	}
	switch connect.CodeOf(err) {
	case connect.CodeUnknown, connect.CodeInternal, connect.CodeUnimplemented, connect.CodeUnavailable,
		connect.CodeDataLoss, connect.CodeDeadlineExceeded:
		return true
	}
	return false
}

// refund gives back what v's admission spent when the handler failed.
func (l *Limiter) refund(r *http.Request, v verdict, failed bool) {
	if !failed || v.refundID == "" {
		return
	}
	// The caller may be gone; the refund is still owed.
	ctx := context.WithoutCancel(r.Context())
	if _, _, err := l.a.(Refunder).Refund(ctx, v.refundKey, v.refundID); err != nil && l.cfg.onError != nil {
		l.cfg.onError(r, fmt.Errorf("middleware: refund of request %q after a server error: %w", v.refundID, err))
	}
}

// statusWriter records the status a handler answers with.
type statusWriter struct {
	http.ResponseWriter
	status int
}

func (w *statusWriter) WriteHeader(code int) {
	if w.status == 0 && code >= 200 {
		w.status = code
	}
	w.ResponseWriter.WriteHeader(code)
}

func (w *statusWriter) Write(b []byte) (int, error) {
	if w.status == 0 {
		w.status = http.StatusOK
	}
	return w.ResponseWriter.Write(b)
}

// Unwrap serves http.ResponseController (Flush, Hijack, deadlines).
func (w *statusWriter) Unwrap() http.ResponseWriter { return w.ResponseWriter }
