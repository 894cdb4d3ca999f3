package nodetest

import (
	"bytes"
	"net/http"
	"os"
	"os/exec"
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus/testutil/promlint"
)

// RequirePromtoolEnv, set to 1 (as CI does), makes CheckMetrics fail where
// promtool is not on the PATH rather than check with promlint alone.
const RequirePromtoolEnv = "QUORATE_REQUIRE_PROMTOOL"

// CheckMetrics reads url's /metrics with client, as Prometheus does, and
// fails tb with every problem `promtool check metrics` reports: it runs
// promtool itself (Debian's prometheus package, which make test installs
// where it can) on the text, and client_golang's promlint, the check
// promtool is built on (names in snake_case, counters ending in _total,
// units as suffixes, help on every family, ...). Without promtool on the
// PATH it says so and checks with promlint alone, or fails where
// RequirePromtoolEnv is 1. It returns the exposition text.
func CheckMetrics(tb testing.TB, client *http.Client, url string) string {
	tb.Helper()
	body, err := Get(client, url)
	if err != nil {
		tb.Fatal(err)
	}
	problems, err := promlint.New(strings.NewReader(body)).Lint()
	if err != nil {
		tb.Fatalf("%s: not Prometheus' text format: %v", url, err)
	}
	for _, p := range problems {
		tb.Errorf("%s: promlint: %s: %s", url, p.Metric, p.Text)
	}
	promtool, err := exec.LookPath("promtool")
	if err != nil {
		if os.Getenv(RequirePromtoolEnv) == "1" {
			tb.Fatalf("promtool is not on the PATH (Debian's prometheus package has it; make test installs it where it can)")
		}
		tb.Logf("promtool is not on the PATH: %s checked with promlint alone", url)
		return body
	}
	cmd := exec.Command(promtool, "check", "metrics")
	cmd.Stdin = strings.NewReader(body)
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	if err := cmd.Run(); err != nil {
		tb.Errorf("%s: promtool check metrics: %v\n%s", url, err, out.String())
	}
	return body
}
