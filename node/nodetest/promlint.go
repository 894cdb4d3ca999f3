package nodetest

import (
	"fmt"
	"io"
	"net/http"
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus/testutil/promlint"
)

// CheckMetrics reads url's /metrics with client, as Prometheus does, and
// fails tb with every problem `promtool check metrics` would report:
// promtool's check is client_golang's promlint, run here on the same text
// (names in snake_case, counters ending in _total, units as suffixes, help
// on every family, ...). It returns the exposition text.
func CheckMetrics(tb testing.TB, client *http.Client, url string) string {
	tb.Helper()
	body, err := getMetrics(client, url)
	if err != nil {
		tb.Fatal(err)
	}
	problems, err := promlint.New(strings.NewReader(body)).Lint()
	if err != nil {
		tb.Fatalf("%s: not Prometheus' text format: %v", url, err)
	}
	for _, p := range problems {
		tb.Errorf("%s: promtool check metrics: %s: %s", url, p.Metric, p.Text)
	}
	return body
}

func getMetrics(client *http.Client, url string) (string, error) {
	resp, err := client.Get(url)
	if err != nil {
		return "", err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		return "", err
	}
	if resp.StatusCode != http.StatusOK {
		return "", fmt.Errorf("GET %s: %s: %s", url, resp.Status, b)
	}
	return string(b), nil
}
