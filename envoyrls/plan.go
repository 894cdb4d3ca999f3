package envoyrls

import (
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"fmt"
	"math"
	"net/url"
	"strings"
	"time"

	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"google.golang.org/protobuf/types/known/durationpb"
	"google.golang.org/protobuf/types/known/structpb"
	"google.golang.org/protobuf/types/known/wrapperspb"

	"github.com/quorate/quorate/admission"
	"github.com/quorate/quorate/client/ratelimitheader"
	quoratev1 "github.com/quorate/quorate/proto/quorate/v1"
)

// MetadataDecidedAt is the field of an answer's dynamic_metadata that
// holds the log time of the decision (RFC 3339, UTC, nanoseconds): for a
// call a node decided from a grant it holds, the time the grant's units
// were spent in the key's log. Absent when nothing was counted.
const MetadataDecidedAt = "quorate_decided_at"

// maxKeyBytes is Quorate's longest key.
const maxKeyBytes = 512

// RequestError is a request Envoy should not have sent; Field names the
// field at fault.
type RequestError struct {
	Field, Msg string
}

func (e *RequestError) Error() string { return e.Field + ": " + e.Msg }

// plan is what one ShouldRateLimit call decides.
type plan struct {
	statuses []*rlsv3.RateLimitResponse_DescriptorStatus
	limits   []*limit // per descriptor; nil when none applies
	checks   []int    // the descriptors counted, in Admit order
	admit    *quoratev1.AdmitRequest
	// over is set when a descriptor is over its limit whatever the state
	// (requests_per_unit 0, or a cost above it) outside shadow mode: the
	// answer is OVER_LIMIT and nothing is counted.
	over bool
}

// newPlan looks up each descriptor of req in c. requestID, when not empty,
// is the caller's ID of the call (x-request-id), which makes the Admit
// deduplicated on it; a request with more counted descriptors than an
// Admit decides (admission.MaxChecks) is refused.
func newPlan(c *Config, req *rlsv3.RateLimitRequest, requestID string) (*plan, error) {
	if req.GetDomain() == "" {
		return nil, &RequestError{"domain", "must not be empty"}
	}
	if len(req.GetDescriptors()) == 0 {
		return nil, &RequestError{"descriptors", "must not be empty"}
	}
	p := &plan{
		statuses: make([]*rlsv3.RateLimitResponse_DescriptorStatus, len(req.GetDescriptors())),
		limits:   make([]*limit, len(req.GetDescriptors())),
	}
	tag := hashTag(req.GetDomain())
	var checks []*quoratev1.Check
	for i, d := range req.GetDescriptors() {
		field := fmt.Sprintf("descriptors[%d]", i)
		if d.GetLimit() != nil {
			return nil, &RequestError{field + ".limit", "limit overrides are not supported"}
		}
		if d.GetIsNegativeHits() {
			return nil, &RequestError{field + ".is_negative_hits", "negative hits are not supported"}
		}
		keys := make([]string, len(d.GetEntries()))
		values := make([]string, len(d.GetEntries()))
		for j, e := range d.GetEntries() {
			keys[j], values[j] = e.GetKey(), e.GetValue()
		}
		st := &rlsv3.RateLimitResponse_DescriptorStatus{Code: rlsv3.RateLimitResponse_OK}
		p.statuses[i] = st
		l := c.lookup(req.GetDomain(), keys, values)
		if l == nil || l.unlimited {
			if l != nil {
				st.LimitRemaining = math.MaxUint32
			}
			continue
		}
		p.limits[i] = l
		st.CurrentLimit = l.response()
		cost := int64(max(req.GetHitsAddend(), 1))
		if h := d.GetHitsAddend(); h != nil {
			cost = int64(min(max(h.GetValue(), 1), math.MaxInt64))
		}
		if l.rpu == 0 || cost > int64(l.rpu) {
			if !l.shadow {
				st.Code = rlsv3.RateLimitResponse_OVER_LIMIT
				p.over = true
			}
			continue
		}
		checks = append(checks, &quoratev1.Check{Policy: l.policy, Key: descriptorKey(tag, keys, values), Cost: &cost})
		p.checks = append(p.checks, i)
	}
	if len(checks) > admission.MaxChecks {
		return nil, &RequestError{"descriptors", fmt.Sprintf(
			"at most %d descriptors with a counted rate_limit in one request, decided together in one Admit (got %d)",
			admission.MaxChecks, len(checks))}
	}
	if p.over || len(checks) == 0 {
		return p, nil
	}
	p.admit = &quoratev1.AdmitRequest{Policy: checks[0].Policy, Key: checks[0].Key, Cost: checks[0].Cost, Also: checks[1:]}
	if requestID != "" {
		p.admit.RequestId = callID(requestID, req)
	}
	return p, nil
}

// hashTag is the {...} part of every key of domain.
func hashTag(domain string) string {
	d := url.QueryEscape(domain)
	if len(d) > 128 {
		sum := sha256.Sum256([]byte(domain))
		d = "sha256:" + hex.EncodeToString(sum[:16])
	}
	return "{envoy:" + d + "}"
}

// descriptorKey is the key of a descriptor's entries: tag followed by
// key=value pairs, each escaped, joined by '/'; a key that would exceed
// Quorate's bound is a hash of them instead.
func descriptorKey(tag string, keys, values []string) string {
	var b strings.Builder
	b.WriteString(tag)
	for i := range keys {
		if i > 0 {
			b.WriteByte('/')
		}
		b.WriteString(url.QueryEscape(keys[i]))
		b.WriteByte('=')
		b.WriteString(url.QueryEscape(values[i]))
	}
	if b.Len() <= maxKeyBytes {
		return b.String()
	}
	sum := sha256.Sum256([]byte(b.String()[len(tag):]))
	return tag + "sha256:" + hex.EncodeToString(sum[:])
}

// callID is the Admit's request_id of a call with Envoy's request ID id:
// the call's content is part of it, so that two calls for one HTTP request
// with other descriptors are not taken for a retry.
func callID(id string, req *rlsv3.RateLimitRequest) string {
	h := sha256.New()
	field := func(s string) {
		var n [8]byte
		binary.BigEndian.PutUint64(n[:], uint64(len(s)))
		h.Write(n[:])
		h.Write([]byte(s))
	}
	field(id)
	field(req.GetDomain())
	field(fmt.Sprint(req.GetHitsAddend()))
	for _, d := range req.GetDescriptors() {
		field(fmt.Sprint(len(d.GetEntries()), d.GetHitsAddend().GetValue()))
		for _, e := range d.GetEntries() {
			field(e.GetKey())
			field(e.GetValue())
		}
	}
	return "envoy:" + hex.EncodeToString(h.Sum(nil)[:24])
}

// response is the limit as a status's current_limit.
func (l *limit) response() *rlsv3.RateLimitResponse_RateLimit {
	r := &rlsv3.RateLimitResponse_RateLimit{Name: l.name, RequestsPerUnit: l.rpu, Unit: l.unit}
	if l.mult > 0 {
		r.UnitMultiplier = wrapperspb.UInt32(l.mult)
	}
	return r
}

// window is the limit's fixed window; zero for a calendar unit.
func (l *limit) window() time.Duration {
	mult := max(l.mult, 1)
	return time.Duration(mult) * unitPeriods[l.unit]
}

// decided is the limit as res decided it, under the policy version the
// decision used: after the files changed, a call may be decided under the
// version before (a group that has not yet copied the new policy table),
// and its limit_remaining is then of that version's limit. Its
// requests_per_unit is the decision's limit; its window, for a fixed unit,
// the decision's window (for a calendar unit, the file's unit: the
// decision's window is the current calendar period).
func (l *limit) decided(res *quoratev1.CheckResult) (*rlsv3.RateLimitResponse_RateLimit, time.Duration) {
	r := l.response()
	r.RequestsPerUnit = uint32(min(max(res.GetLimit(), 0), math.MaxUint32))
	w := l.window()
	if d := res.GetWindow().AsDuration(); w > 0 && d > 0 && d != w {
		w = d
		r.Unit, r.UnitMultiplier = rlsv3.RateLimitResponse_RateLimit_SECOND, nil
		for _, u := range []rlsv3.RateLimitResponse_RateLimit_Unit{
			rlsv3.RateLimitResponse_RateLimit_DAY, rlsv3.RateLimitResponse_RateLimit_HOUR, rlsv3.RateLimitResponse_RateLimit_MINUTE,
		} {
			if d%unitPeriods[u] == 0 {
				r.Unit = u
				break
			}
		}
		if m := d / unitPeriods[r.Unit]; m > 1 {
			r.UnitMultiplier = wrapperspb.UInt32(uint32(min(m, math.MaxUint32)))
		}
	}
	return r, w
}

// answer builds the response from the Admit's answer (nil when nothing was
// admitted), with the RateLimit header fields when headers is set.
func (p *plan) answer(resp *quoratev1.AdmitResponse, headers bool) *rlsv3.RateLimitResponse {
	out := &rlsv3.RateLimitResponse{OverallCode: rlsv3.RateLimitResponse_OK, Statuses: p.statuses}
	if p.over {
		out.OverallCode = rlsv3.RateLimitResponse_OVER_LIMIT
	}
	var fields []ratelimitheader.Limit
	if resp != nil {
		if at := resp.GetDecidedAt(); at != nil {
			// Envoy keeps it as the filter's dynamic metadata
			// (envoy.filters.http.ratelimit), for its access log.
			out.DynamicMetadata = &structpb.Struct{Fields: map[string]*structpb.Value{
				MetadataDecidedAt: structpb.NewStringValue(at.AsTime().UTC().Format(time.RFC3339Nano)),
			}}
		}
		if !resp.GetAllowed() {
			out.OverallCode = rlsv3.RateLimitResponse_OVER_LIMIT
		}
		results := resp.GetChecks()
		for j, i := range p.checks {
			res := &quoratev1.CheckResult{Allowed: resp.GetAllowed(), Limit: resp.GetLimit(), Remaining: resp.GetRemaining(),
				ResetAfter: resp.GetResetAfter(), Window: resp.GetWindow()}
			if len(results) == len(p.checks) {
				res = results[j]
			}
			st := p.statuses[i]
			if !res.GetAllowed() {
				st.Code = rlsv3.RateLimitResponse_OVER_LIMIT
			}
			// The limit, remaining and reset of one decision: one version.
			var window time.Duration
			st.CurrentLimit, window = p.limits[i].decided(res)
			st.LimitRemaining = uint32(min(max(res.GetRemaining(), 0), math.MaxUint32))
			st.DurationUntilReset = durationpb.New(max(res.GetResetAfter().AsDuration(), 0))
			fields = append(fields, ratelimitheader.Limit{Name: p.limits[i].name, Limit: res.GetLimit(),
				Remaining: res.GetRemaining(), Window: window, ResetAfter: res.GetResetAfter().AsDuration()})
		}
	}
	if headers && len(fields) > 0 {
		least := fields[0]
		for _, f := range fields[1:] {
			if f.Remaining < least.Remaining {
				least = f
			}
		}
		h := ratelimitheader.Fields([]ratelimitheader.Limit{least})
		for _, k := range []string{ratelimitheader.Policy, ratelimitheader.RateLimit} {
			out.ResponseHeadersToAdd = append(out.ResponseHeadersToAdd, &corev3.HeaderValue{Key: k, Value: h.Get(k)})
		}
	}
	return out
}
