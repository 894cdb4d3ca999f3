package local

import (
	"time"

	"google.golang.org/protobuf/types/known/durationpb"
	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/quorate/quorate/client"
	quoratev1 "github.com/quorate/quorate/proto/quorate/v1"
)

// response is the Admit answer of d, a decision taken from a grant: the
// inverse of the client's reading of an AdmitResponse, in the form of the
// node's answers from its FSM (durations always set, a window only when
// the policy has one). Remaining is the
// grant's estimate (client.Decision.Remaining); decided_at is the log time
// of the grant's latest answer, which names the window the units were
// counted in.
func response(d *client.Decision) *quoratev1.AdmitResponse {
	out := &quoratev1.AdmitResponse{Allowed: d.Allowed, Limit: d.Limit, Remaining: d.Remaining,
		ResetAfter: durationpb.New(d.ResetAfter), RetryAfter: durationpb.New(d.RetryAfter), Window: window(d.Window),
		Quota: d.Quota, PolicyVersion: d.PolicyVersion, DecidedAt: timestamppb.New(d.DecidedAt.UTC()),
		Duplicate: d.Duplicate, Wait: durationpb.New(d.Wait), ShadowDenied: d.ShadowDenied}
	for _, c := range d.Checks {
		out.Checks = append(out.Checks, &quoratev1.CheckResult{Policy: c.Policy, Key: c.Key, Allowed: c.Allowed,
			Limit: c.Limit, Remaining: c.Remaining, ResetAfter: durationpb.New(c.ResetAfter), RetryAfter: durationpb.New(c.RetryAfter),
			Window: window(c.Window), Quota: c.Quota, PolicyVersion: c.PolicyVersion, ShadowDenied: c.ShadowDenied})
	}
	if len(d.Checks) > 0 && d.DeniedCheck >= 0 {
		i := int32(d.DeniedCheck)
		out.DeniedCheck = &i
	}
	return out
}

// window is a policy window as the node's answers send it: unset for none.
func window(w time.Duration) *durationpb.Duration {
	if w <= 0 {
		return nil
	}
	return durationpb.New(w)
}
