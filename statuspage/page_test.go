package statuspage

import (
	"strings"
	"testing"
	"time"
)

func TestRenderEscapesAndShowsEverything(t *testing.T) {
	p := &Page{
		NodeID: "n1", ClusterID: "c-1", MetaLeader: "n2", MapEpoch: 3,
		GeneratedAt: time.Unix(0, 0), Refresh: 5 * time.Second,
		Members: []Member{{ID: "n1", APIAddr: "127.0.0.1:1", Suffrage: "voter", Role: "follower", Healthy: true, Health: "healthy"},
			{ID: "n3", Suffrage: "voter", Health: "unreachable: dial tcp"}},
		Groups: []Group{{ID: 0, Leader: "n2", Replicas: []string{"n1", "n2", "n3"}}, {ID: 1, Replicas: []string{"n1"}, Slots: 8192, Ranges: "[0,8192)"}},
		Plans:  []Plan{{ID: 7, Summary: "split group 1", State: "running", StepsDone: 1, Steps: 4, Current: "move slots [0,512) 1→3"}},
		Policies: []Policy{{Name: "api", Algorithm: "token_bucket", Limit: 10, Period: time.Second, Version: 2,
			Decisions: 12, Denied: 2, DecisionsPerSec: 0.25}},
		HotKeys:  []HotKey{{Group: 1, Policy: "api", Key: `<script>alert(1)</script>`, Count: 9}},
		Problems: []string{"plans: no meta leader"},
	}
	var b strings.Builder
	if err := Render(&b, p); err != nil {
		t.Fatal(err)
	}
	out := b.String()
	for _, want := range []string{
		`<meta http-equiv="refresh" content="5">`,
		`<b id="answered-by">n1</b>`, `data-member="n3"`, "unreachable: dial tcp", `class="bad">no leader`,
		"[0,8192)", `style="width: 25%"`, "1 / 4 steps", "move slots [0,512) 1→3",
		`data-policy="api"`, "v2", "0.2", "&lt;script&gt;alert(1)&lt;/script&gt;", "plans: no meta leader",
		"--ok:", // the stylesheet, inlined
	} {
		if !strings.Contains(out, want) {
			t.Errorf("page lacks %q", want)
		}
	}
	if strings.Contains(out, "<script>") || strings.Contains(out, "http://") || strings.Contains(out, "https://") {
		t.Errorf("page has a script or an external reference:\n%s", out)
	}
}

func TestRenderEmpty(t *testing.T) {
	var b strings.Builder
	if err := Render(&b, &Page{NodeID: "n1"}); err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"No plans.", "No policies.", "No decisions yet."} {
		if !strings.Contains(b.String(), want) {
			t.Errorf("empty page lacks %q", want)
		}
	}
	if strings.Contains(b.String(), "http-equiv") {
		t.Errorf("a page without Refresh reloads")
	}
}

func TestPeriod(t *testing.T) {
	for d, want := range map[time.Duration]string{time.Minute: "1m", time.Hour: "1h", 90 * time.Second: "1m30s", time.Second: "1s", 1500 * time.Millisecond: "1.5s", 0: "0s", 24 * time.Hour: "24h"} {
		if got := period(d); got != want {
			t.Errorf("period(%v) = %q, want %q", d, got, want)
		}
	}
}

// Limits in words: a concurrency policy's slots, a quota's calendar, a
// rate's period (with a token bucket's burst when it differs).
func TestLimitInWords(t *testing.T) {
	for _, tc := range []struct {
		p    Policy
		want string
	}{
		{Policy{Algorithm: "concurrency", Limit: 2}, "2 concurrent"},
		{Policy{Algorithm: "quota", Limit: 1000, Calendar: "day"}, "1000 per day"},
		{Policy{Algorithm: "token_bucket", Limit: 60, Period: time.Minute, Burst: 20}, "60 per minute, burst 20"},
		{Policy{Algorithm: "token_bucket", Limit: 60, Period: time.Minute, Burst: 60}, "60 per minute"},
		{Policy{Algorithm: "sliding_window", Limit: 100, Period: 10 * time.Second}, "100 per 10s"},
		{Policy{Algorithm: "fixed_window", Limit: 5, Period: 24 * time.Hour}, "5 per day"},
	} {
		if got := limit(tc.p); got != tc.want {
			t.Errorf("limit(%+v) = %q, want %q", tc.p, got, tc.want)
		}
	}
}

// The chart of the last minutes is inline SVG, one bar a minute scaled to
// the busiest, its denials in red, and no script.
func TestRenderChart(t *testing.T) {
	p := &Page{NodeID: "n1", Policies: []Policy{{Name: "api", Algorithm: "token_bucket", Limit: 10, Period: time.Second,
		DecisionsByMinute: []uint64{0, 4, 8}, DeniedByMinute: []uint64{0, 0, 2}}}}
	var b strings.Builder
	if err := Render(&b, p); err != nil {
		t.Fatal(err)
	}
	out := b.String()
	for _, want := range []string{
		`<svg width="22" height="28"`,
		`<rect class="decided" x="8" y="14" width="6" height="14"/>`, // 4 of 8
		`<rect class="decided" x="16" y="0" width="6" height="28"/>`, // the busiest
		`<rect class="denied" x="16" y="21" width="6" height="7"/>`,  // 2 of 8
		"<title>this minute: 8 decisions, 2 denied</title>", "<title>2 min ago: 0 decisions, 0 denied</title>",
	} {
		if !strings.Contains(out, want) {
			t.Errorf("page lacks %q:\n%s", want, out)
		}
	}
	if strings.Count(out, `class="denied"`) != 1 || strings.Contains(out, "<script") {
		t.Errorf("want one denial bar and no script:\n%s", out)
	}
}
