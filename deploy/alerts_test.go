package deploy

import (
	"os"
	"slices"
	"testing"

	"go.yaml.in/yaml/v3"
)

// ruleFile is the part of a Prometheus rule file the tests read.
type ruleFile struct {
	Groups []struct {
		Name  string `yaml:"name"`
		Rules []struct {
			Alert  string `yaml:"alert"`
			Record string `yaml:"record"`
			Expr   string `yaml:"expr"`
		} `yaml:"rules"`
	} `yaml:"groups"`
}

// ruleTests is the part of a `promtool test rules` file the tests read.
type ruleTests struct {
	RuleFiles []string `yaml:"rule_files"`
	Tests     []struct {
		Name      string `yaml:"name"`
		AlertRule []struct {
			Alertname string `yaml:"alertname"`
			ExpAlerts []any  `yaml:"exp_alerts"`
		} `yaml:"alert_rule_test"`
	} `yaml:"tests"`
}

func readYAML(t *testing.T, path string, v any) {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	if err := yaml.Unmarshal(b, v); err != nil {
		t.Fatalf("%s: %v", path, err)
	}
}

// TestAlertRulesPassPromtool: promtool finds alerts.yaml and the example
// configuration valid and passes every unit test of alerts_test.yaml, and
// those tests test every alert both ways: at some time it fires, at
// another (or on other series) it stays quiet.
func TestAlertRulesPassPromtool(t *testing.T) {
	pt := promtool(t)
	run(t, "prometheus", pt, "check", "rules", "alerts.yaml")
	run(t, "prometheus", pt, "check", "config", "prometheus.yaml")
	run(t, "prometheus", pt, "test", "rules", "alerts_test.yaml")

	var rules ruleFile
	readYAML(t, "prometheus/alerts.yaml", &rules)
	var tests ruleTests
	readYAML(t, "prometheus/alerts_test.yaml", &tests)
	if !slices.Equal(tests.RuleFiles, []string{"alerts.yaml"}) {
		t.Errorf("alerts_test.yaml tests rule files %v, want [alerts.yaml]", tests.RuleFiles)
	}
	fires, quiet := map[string]bool{}, map[string]bool{}
	for _, tc := range tests.Tests {
		for _, a := range tc.AlertRule {
			if len(a.ExpAlerts) > 0 {
				fires[a.Alertname] = true
			} else {
				quiet[a.Alertname] = true
			}
		}
	}
	alerts := map[string]bool{}
	for _, g := range rules.Groups {
		for _, r := range g.Rules {
			if r.Alert == "" {
				t.Errorf("group %s: a rule that is no alert: %q", g.Name, r.Expr)
				continue
			}
			alerts[r.Alert] = true
			if !fires[r.Alert] {
				t.Errorf("alerts_test.yaml never expects %s to fire", r.Alert)
			}
			if !quiet[r.Alert] {
				t.Errorf("alerts_test.yaml never expects %s to stay quiet", r.Alert)
			}
		}
	}
	for name := range fires {
		if !alerts[name] {
			t.Errorf("alerts_test.yaml tests %s, which alerts.yaml does not have", name)
		}
	}
	for _, want := range []string{"QuorateNodeDown", "QuorateGroupWithoutLeader", "QuorateAppliedIndexLagGrowing", "QuorateFsyncSlow",
		"QuorateReplicaDamaged", "QuorateReplicaMissing", "QuorateCertificateExpiresSoon", "QuorateDenialRateJump"} {
		if !alerts[want] {
			t.Errorf("alerts.yaml has no %s", want)
		}
	}
}

// TestAlertsUseExportedMetrics: every metric an alert's expression names
// is one a running cluster's nodes export (or Prometheus' up), with the
// labels it matches on and the values it asks for.
func TestAlertsUseExportedMetrics(t *testing.T) {
	met := exportedMetrics(t)
	var rules ruleFile
	readYAML(t, "prometheus/alerts.yaml", &rules)
	n := 0
	for _, g := range rules.Groups {
		for _, r := range g.Rules {
			n++
			for _, p := range checkSelectors(met, r.Expr) {
				t.Errorf("alert %s: %s\n%s", r.Alert, p, r.Expr)
			}
		}
	}
	if n == 0 {
		t.Fatal("alerts.yaml has no rule")
	}
}
