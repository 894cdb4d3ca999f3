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
