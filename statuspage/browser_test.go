package statuspage_test

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"connectrpc.com/connect"
	"github.com/chromedp/chromedp"
	"google.golang.org/protobuf/types/known/durationpb"

	"github.com/quorate/quorate/node"
	"github.com/quorate/quorate/node/nodetest"
	quoratev1 "github.com/quorate/quorate/proto/quorate/v1"
)

// screenshotEnv, when set to 1, makes TestStatusPageInBrowser also write its
// screenshot to docs/status-page.png (make status-page-screenshot).
const screenshotEnv = "QUORATE_STATUS_SCREENSHOT"

// requireChromiumEnv, when set to 1 (CI's .ci/run sets it), makes the
// browser test fail rather than skip without a Chromium.
const requireChromiumEnv = "QUORATE_REQUIRE_CHROMIUM"

// chromiumNames are the executables taken for a Chromium, in order.
var chromiumNames = []string{"chromium", "chromium-browser", "google-chrome"}

// findChromium is the path of a Chromium on PATH (Debian's chromium
// package, which `make browser-deps` installs), or, without one, what is
// missing and how to get it.
func findChromium() (path, missing string) {
	for _, name := range chromiumNames {
		if p, err := exec.LookPath(name); err == nil {
			return p, ""
		}
	}
	return "", fmt.Sprintf("the status page's browser test needs Chromium, and none of %s is on PATH: "+
		"`make browser-deps` installs Debian's chromium (with apt-get, as root or with sudo); elsewhere install Chromium or Chrome",
		strings.Join(chromiumNames, ", "))
}

// chromium is the path of a Chromium. Without one the test is skipped,
// saying what is missing, or fails where QUORATE_REQUIRE_CHROMIUM=1.
func chromium(t *testing.T) string {
	t.Helper()
	p, missing := findChromium()
	switch {
	case p != "":
		return p
	case os.Getenv(requireChromiumEnv) == "1":
		t.Fatalf("%s (%s=1)", missing, requireChromiumEnv)
	default:
		t.Skip(missing)
	}
	return ""
}

// Without a Chromium on PATH the browser test's message names what is
// missing; with one (here a stand-in executable) it is found.
func TestFindChromium(t *testing.T) {
	dir := t.TempDir()
	t.Setenv("PATH", dir)
	if p, missing := findChromium(); p != "" || !strings.Contains(missing, "needs Chromium") || !strings.Contains(missing, "chromium-browser") {
		t.Errorf("no Chromium on PATH: %q, %q; want no path and a message naming what is missing", p, missing)
	}
	stand := filepath.Join(dir, "chromium-browser")
	if err := os.WriteFile(stand, []byte("#!/bin/sh\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	if p, missing := findChromium(); p != stand || missing != "" {
		t.Errorf("with %s on PATH: %q, %q", stand, p, missing)
	}
}

// TestStatusPageInBrowser loads the status page of a running 3-node cluster
// with data groups in a headless Chromium, after a policy was applied,
// admits were decided and a group was split, and checks what a person sees:
// the members and their health, every group with its leader and slot
// ranges, the finished plan, the policy with its version and decisions,
// and the hot key. It saves a screenshot in the test's directory.
func TestStatusPageInBrowser(t *testing.T) {
	exe := chromium(t)
	c := nodetest.NewClusterWith(t, nodetest.Options{Nodes: 3, Configure: func(_ int, cfg *node.Config) {
		cfg.DataGroups, cfg.ExpectNodes = 2, 3
	}})
	ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
	defer cancel()

	if _, err := c.Admin(0).ApplyPolicies(ctx, connect.NewRequest(&quoratev1.ApplyPoliciesRequest{Policies: []*quoratev1.Policy{
		// Periods of a day: not a token refills during the test, however slow.
		{Name: "checkout", Algorithm: "token_bucket", Limit: 20, Period: durationpb.New(24 * time.Hour)},
		{Name: "search", Algorithm: "sliding_window", Limit: 100, Period: durationpb.New(time.Second), Shadow: true},
		{Name: "gpu", Algorithm: "concurrency", Limit: 2},
		{Name: "monthly-exports", Algorithm: "quota", Limit: 1000, Calendar: "day"},
	}})); err != nil {
		t.Fatal(err)
	}
	// v2 of checkout.
	if _, err := c.Admin(1).ApplyPolicies(ctx, connect.NewRequest(&quoratev1.ApplyPoliciesRequest{Policies: []*quoratev1.Policy{
		{Name: "checkout", Algorithm: "token_bucket", Limit: 30, Period: durationpb.New(24 * time.Hour)},
	}})); err != nil {
		t.Fatal(err)
	}
	// v2 reaches the key's data group a little after ApplyPolicies returns:
	// the admits below must all be decided under it (a Peek spends nothing).
	c.Eventually(t, time.Minute, "checkout v2 in user-42's group", func() error {
		p, err := c.Admission(0).Peek(ctx, connect.NewRequest(&quoratev1.PeekRequest{Policy: "checkout", Key: "user-42"}))
		if err != nil {
			return err
		}
		if v := p.Msg.GetPolicyVersion(); v != 2 {
			return fmt.Errorf("checkout version %d", v)
		}
		return nil
	})
	// user-42 is hot: 40 admits, 30 allowed and 10 denied; a few others once.
	// Each with a request ID, as a careful client sends: a leader change on
	// a loaded machine is retried by the node rather than failed.
	for i := range 40 {
		if _, err := c.Admission(i%3).Admit(ctx, connect.NewRequest(&quoratev1.AdmitRequest{Policy: "checkout", Key: "user-42", Caller: "browser-test", RequestId: fmt.Sprintf("hot-%d", i)})); err != nil {
			t.Fatal(err)
		}
	}
	for i := range 12 {
		if _, err := c.Admission(i%3).Admit(ctx, connect.NewRequest(&quoratev1.AdmitRequest{Policy: "search", Key: fmt.Sprintf("user-%d", i), Caller: "browser-test", RequestId: fmt.Sprintf("once-%d", i)})); err != nil {
			t.Fatal(err)
		}
	}
	plan, err := c.Admin(0).SplitGroup(ctx, connect.NewRequest(&quoratev1.SplitGroupRequest{Group: 1}))
	if err != nil {
		t.Fatal(err)
	}
	planRow := fmt.Sprintf(`[data-plan="%d"]`, plan.Msg.GetPlan().GetId())

	alloc, cancelAlloc := chromedp.NewExecAllocator(ctx, append(chromedp.DefaultExecAllocatorOptions[:],
		chromedp.ExecPath(exe), chromedp.NoSandbox, chromedp.WindowSize(1280, 1000),
		chromedp.UserDataDir(t.TempDir()))...)
	defer cancelAlloc()
	browser, cancelBrowser := chromedp.NewContext(alloc)
	defer cancelBrowser()

	// The browser starts with the first action, under the test's context
	// (a timeout on that first action's context would stop the browser).
	if err := chromedp.Do(browser); err != nil {
		t.Fatalf("starting %s: %v", exe, err)
	}

	// What the page must show; it is reloaded until it does (leaders are
	// elected and the plan finishes while the test watches).
	text := map[string]string{}
	sections := []string{"#members", "#groups", "#plans", "#policies", "#hot-keys"}
	shows := func() error {
		actx, cancel := context.WithTimeout(browser, 15*time.Second)
		defer cancel()
		if err := chromedp.Do(actx, chromedp.Navigate(c.AdminURL(2)+"/status"), chromedp.WaitVisible(chromedp.CSS("#hot-keys"))); err != nil {
			return err
		}
		for _, s := range sections {
			v, err := chromedp.Run(actx, chromedp.Text(chromedp.CSS(s)))
			if err != nil {
				return err
			}
			text[s] = v
		}
		var rows []string
		for i := range 3 {
			rows = append(rows, fmt.Sprintf(`[data-member="node%d"] td.ok`, i+1))
		}
		for _, g := range []int{0, 1, 2, 3} {
			rows = append(rows, fmt.Sprintf(`[data-group="%d"]`, g))
		}
		rows = append(rows, planRow, `[data-policy="checkout"]`, `[data-hot-key="user-42"]`)
		for _, r := range rows {
			n, err := chromedp.Run(actx, chromedp.Evaluate[int](fmt.Sprintf("document.querySelectorAll(%q).length", r)))
			if err != nil {
				return err
			}
			if n != 1 {
				return fmt.Errorf("no %s on the page: %v", r, text)
			}
		}
		switch {
		case strings.Contains(text["#groups"], "no leader"):
			return fmt.Errorf("a group without a leader: %s", text["#groups"])
		case !strings.Contains(text["#plans"], "done"):
			return fmt.Errorf("the split is not done: %s", text["#plans"])
		}
		return nil
	}
	c.Eventually(t, 3*time.Minute, "the status page shows the cluster", shows)

	for s, want := range map[string][]string{
		"#members":  {"node1", "node2", "node3", "healthy"},
		"#groups":   {"(meta)", "[0,"},
		"#plans":    {"split group 1", "steps"},
		"#policies": {"checkout", "v2", "token_bucket", "30 per day", "search", "v1", "shadow", "100 per second", "gpu", "2 concurrent", "1000 per day"},
		"#hot-keys": {"user-42", "checkout", "40"},
	} {
		for _, w := range want {
			if !strings.Contains(text[s], w) {
				t.Errorf("%s lacks %q: %s", s, w, text[s])
			}
		}
	}
	denied, err := chromedp.Run(browser, chromedp.Text(chromedp.CSS(`[data-policy="checkout"] td:last-child`)))
	if err != nil {
		t.Fatal(err)
	}
	if denied != "10" {
		t.Errorf("checkout denied %q on the page, want 10", denied)
	}
	// At 1280 px nothing scrolls sideways: every column, the last (denied)
	// included, is in view.
	for _, check := range []struct{ what, js string }{
		{"a section scrolling sideways", `[...document.querySelectorAll("section")].filter(s => s.scrollWidth > s.clientWidth).map(s => s.id).join(" ")`},
		{"the page scrolling sideways", `document.documentElement.scrollWidth > window.innerWidth ? "yes" : ""`},
		{"a policy column out of view", `[...document.querySelectorAll("#policies th")].filter(th => th.getBoundingClientRect().right > th.closest("section").getBoundingClientRect().right).map(th => th.textContent).join(" ")`},
		// The chart of the last minutes: checkout's 40 decisions and 10
		// denials, in bars drawn without a script.
		{"no decisions or no denials in checkout's chart", `document.querySelectorAll('[data-policy="checkout"] svg rect.decided').length > 0 && document.querySelectorAll('[data-policy="checkout"] svg rect.denied').length > 0 ? "" : "none"`},
		{"a script", `document.scripts.length > 0 ? "yes" : ""`},
	} {
		got, err := chromedp.Run(browser, chromedp.Evaluate[string](check.js))
		if err != nil {
			t.Fatal(err)
		}
		if got != "" {
			t.Errorf("%s at 1280 px: %s", check.what, got)
		}
	}
	var decided, deniedInChart int
	for _, bar := range []struct {
		n   *int
		sel string
	}{{&decided, "decided"}, {&deniedInChart, "denied"}} {
		titles, err := chromedp.Run(browser, chromedp.Evaluate[string](fmt.Sprintf(
			`[...document.querySelectorAll('[data-policy="checkout"] svg g')].filter(g => g.querySelector("rect.%s")).map(g => g.querySelector("title").textContent).join("|")`, bar.sel)))
		if err != nil {
			t.Fatal(err)
		}
		for _, title := range strings.Split(titles, "|") {
			var d, x int
			if _, err := fmt.Sscanf(title[strings.Index(title, ": ")+2:], "%d decisions, %d denied", &d, &x); err == nil {
				if bar.sel == "decided" {
					*bar.n += d
				} else {
					*bar.n += x
				}
			}
		}
	}
	if decided != 40 || deniedInChart != 10 {
		t.Errorf("checkout's chart shows %d decisions and %d denials, want 40 and 10", decided, deniedInChart)
	}

	png, err := chromedp.Run(browser, chromedp.FullScreenshot(100))
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(t.TempDir(), "status-page.png"), png, 0o644); err != nil {
		t.Fatal(err)
	}
	if os.Getenv(screenshotEnv) == "1" {
		if err := os.WriteFile(filepath.Join("..", "docs", "status-page.png"), png, 0o644); err != nil {
			t.Fatal(err)
		}
		t.Logf("wrote docs/status-page.png (%d bytes)", len(png))
	}
}
