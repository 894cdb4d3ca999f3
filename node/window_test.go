package node_test

import (
	"context"
	"testing"
	"time"

	"connectrpc.com/connect"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/durationpb"

	"github.com/quorate/quorate/node/nodetest"
	quoratev1 "github.com/quorate/quorate/proto/quorate/v1"
)

// calendarLength is the length of the UTC calendar period (day, week from
// Monday, month, year) holding t.
func calendarLength(cal string, t time.Time) time.Duration {
	t = t.UTC()
	y, m, d := t.Date()
	day := func(y int, m time.Month, d int) time.Time { return time.Date(y, m, d, 0, 0, 0, 0, time.UTC) }
	switch cal {
	case "day":
		return day(y, m, d+1).Sub(day(y, m, d))
	case "week":
		return 7 * 24 * time.Hour
	case "month":
		return day(y, m+1, 1).Sub(day(y, m, 1))
	case "year":
		return day(y+1, 1, 1).Sub(day(y, 1, 1))
	}
	return 0
}

// Every Admit answer carries its policy's window and quota (its limit per
// window; a token bucket's limit field is its burst): the period of each
// rate algorithm, the calendar period of a quota at the decision's time, per
// check in a multi-check answer (the top one the denying check's); through
// the leader and through a follower alike. A recorded answer repeats it
// while its policy is at the version recorded, and leaves it unset once the
// policy changed (and its quota with it).
func TestAdmitWindowPerAlgorithm(t *testing.T) {
	c := nodetest.NewCluster(t, 3)
	d := durationpb.New
	applyPolicies(t, c,
		&quoratev1.Policy{Name: "tb", Algorithm: "token_bucket", Limit: 10, Period: d(time.Minute), Burst: proto.Int64(4)},
		&quoratev1.Policy{Name: "fw", Algorithm: "fixed_window", Limit: 10, Period: d(10 * time.Second)},
		&quoratev1.Policy{Name: "sw", Algorithm: "sliding_window", Limit: 10, Period: d(time.Hour)},
		&quoratev1.Policy{Name: "sl", Algorithm: "sliding_log", Limit: 5, Period: d(2 * time.Second)},
		&quoratev1.Policy{Name: "qd", Algorithm: "quota", Limit: 100, Calendar: "day"},
		&quoratev1.Policy{Name: "qw", Algorithm: "quota", Limit: 100, Calendar: "week"},
		&quoratev1.Policy{Name: "qm", Algorithm: "quota", Limit: 100, Calendar: "month"},
		&quoratev1.Policy{Name: "qy", Algorithm: "quota", Limit: 1, Calendar: "year"},
	)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	leader := c.Leader(t)
	admitVia := func(i int, req *quoratev1.AdmitRequest) *quoratev1.AdmitResponse {
		t.Helper()
		var out *quoratev1.AdmitResponse
		c.Eventually(t, 20*time.Second, "admit", func() error {
			resp, err := c.Admission(i).Admit(ctx, connect.NewRequest(req))
			if err != nil {
				return err
			}
			out = resp.Msg
			return nil
		})
		return out
	}
	for _, via := range []int{leader, (leader + 1) % c.Len()} {
		for _, tc := range []struct {
			policy string
			want   time.Duration // 0: a quota's calendar period
			cal    string
			quota  int64
		}{
			{"tb", time.Minute, "", 10}, {"fw", 10 * time.Second, "", 10}, {"sw", time.Hour, "", 10}, {"sl", 2 * time.Second, "", 5},
			{"qd", 0, "day", 100}, {"qw", 0, "week", 100}, {"qm", 0, "month", 100}, {"qy", 0, "year", 1},
		} {
			r := admitVia(via, &quoratev1.AdmitRequest{Policy: tc.policy, Key: "k"})
			want := tc.want
			if tc.cal != "" {
				want = calendarLength(tc.cal, r.GetDecidedAt().AsTime())
			}
			if got := r.GetWindow().AsDuration(); r.GetWindow() == nil || got != want {
				t.Errorf("%s via node %d: window %v, want %v", tc.policy, via, r.GetWindow(), want)
			}
			if r.GetQuota() != tc.quota {
				t.Errorf("%s via node %d: quota %d, want %d", tc.policy, via, r.GetQuota(), tc.quota)
			}
		}
	}

	// Multi-check: each check its own window; the top fields are the
	// denying check's (qy allows one unit a year).
	multi := multiReq(check("tb", "{t}:a", 1), check("qy", "{t}:b", 1))
	r := admitVia(leader, multi)
	year := calendarLength("year", r.GetDecidedAt().AsTime())
	if !r.GetAllowed() || r.GetWindow().AsDuration() != time.Minute ||
		r.GetChecks()[0].GetWindow().AsDuration() != time.Minute || r.GetChecks()[1].GetWindow().AsDuration() != year ||
		r.GetQuota() != 10 || r.GetLimit() != 4 || r.GetChecks()[0].GetQuota() != 10 || r.GetChecks()[1].GetQuota() != 1 {
		t.Fatalf("allowed multi-check: %v", r)
	}
	r = admitVia((leader+1)%c.Len(), multi)
	if r.GetAllowed() || r.GetDeniedCheck() != 1 || r.GetWindow().AsDuration() != year ||
		r.GetChecks()[0].GetWindow().AsDuration() != time.Minute || r.GetChecks()[1].GetWindow().AsDuration() != year {
		t.Fatalf("denied multi-check: %v", r)
	}

	// A recorded answer: the same window while the policy is unchanged,
	// unset once it changed (the record does not keep it).
	req := &quoratev1.AdmitRequest{Policy: "fw", Key: "dup", Caller: "t", RequestId: "dup-1"}
	first := admitVia(leader, req)
	again := admitVia((leader+2)%c.Len(), req)
	if !again.GetDuplicate() || again.GetWindow().AsDuration() != first.GetWindow().AsDuration() || first.GetWindow().AsDuration() != 10*time.Second {
		t.Fatalf("duplicate: %v, first %v", again, first)
	}
	applyPolicies(t, c, &quoratev1.Policy{Name: "fw", Algorithm: "fixed_window", Limit: 10, Period: d(20 * time.Second)})
	changed := admitVia(leader, req)
	if !changed.GetDuplicate() || changed.GetPolicyVersion() != first.GetPolicyVersion() || changed.GetWindow() != nil || changed.GetQuota() != 0 {
		t.Fatalf("duplicate after the policy changed: %v, want the first answer's version and no window", changed)
	}
	if r := admitVia(leader, &quoratev1.AdmitRequest{Policy: "fw", Key: "dup"}); r.GetWindow().AsDuration() != 20*time.Second {
		t.Fatalf("after the change: window %v, want 20s", r.GetWindow())
	}
}
