package deploy

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"

	"go.yaml.in/yaml/v3"
)

// dashboard is the part of a Grafana dashboard the tests read.
type dashboard struct {
	Title         string  `json:"title"`
	UID           string  `json:"uid"`
	SchemaVersion int     `json:"schemaVersion"`
	Panels        []panel `json:"panels"`
	Templating    struct {
		List []struct {
			Name       string          `json:"name"`
			Type       string          `json:"type"`
			Query      json.RawMessage `json:"query"`
			Datasource *datasource     `json:"datasource"`
		} `json:"list"`
	} `json:"templating"`
}

type panel struct {
	ID         int         `json:"id"`
	Type       string      `json:"type"`
	Title      string      `json:"title"`
	Datasource *datasource `json:"datasource"`
	GridPos    struct{ H, W, X, Y int }
	Targets    []struct {
		RefID        string      `json:"refId"`
		Expr         string      `json:"expr"`
		LegendFormat string      `json:"legendFormat"`
		Datasource   *datasource `json:"datasource"`
	} `json:"targets"`
	Panels []panel `json:"panels"` // a collapsed row's
}

type datasource struct {
	Type string `json:"type"`
	UID  string `json:"uid"`
}

const dashboardFile = "grafana/quorate.json"

func readDashboard(t *testing.T) dashboard {
	t.Helper()
	b, err := os.ReadFile(dashboardFile)
	if err != nil {
		t.Fatal(err)
	}
	var d dashboard
	if err := json.Unmarshal(b, &d); err != nil {
		t.Fatalf("%s: %v", dashboardFile, err)
	}
	return d
}

// query is one target of a panel.
type query struct {
	panel      int
	title, ref string
	expr       string
}

func (q query) String() string {
	return fmt.Sprintf("panel %d (%s) target %s", q.panel, q.title, q.ref)
}

// queries are the dashboard's PromQL expressions, rows' panels included.
func (d dashboard) queries() []query {
	var out []query
	var walk func([]panel)
	walk = func(ps []panel) {
		for _, p := range ps {
			for _, tg := range p.Targets {
				out = append(out, query{p.ID, p.Title, tg.RefID, tg.Expr})
			}
			walk(p.Panels)
		}
	}
	walk(d.Panels)
	return out
}

var labelValuesRE = regexp.MustCompile(`^label_values\((.+),\s*([a-zA-Z_][a-zA-Z0-9_]*)\)$`)

// variableQueries are the dashboard's query variables: name, the metric
// selector of its label_values and the label it lists.
func (d dashboard) variableQueries(t *testing.T) map[string][2]string {
	t.Helper()
	out := map[string][2]string{}
	for _, v := range d.Templating.List {
		if v.Type != "query" {
			continue
		}
		var q struct {
			Query string `json:"query"`
		}
		if err := json.Unmarshal(v.Query, &q); err != nil {
			t.Errorf("variable %s: query %s: %v", v.Name, v.Query, err)
			continue
		}
		m := labelValuesRE.FindStringSubmatch(q.Query)
		if m == nil {
			t.Errorf("variable %s: query %q is not label_values(SELECTOR, LABEL)", v.Name, q.Query)
			continue
		}
		out[v.Name] = [2]string{m[1], m[2]}
	}
	return out
}

var variableRE = regexp.MustCompile(`\$\{?([a-zA-Z_][a-zA-Z0-9_]*)\}?`)

// TestDashboardShape: quorate.json is a Grafana dashboard Grafana can
// import and provision: a title, a uid, a schema version, a data source
// variable of type prometheus that every panel and target uses, panels
// with unique IDs on the 24-column grid without overlapping, every panel
// but rows with at least one target with an expression and a unique refId,
// every variable an expression uses defined, and a panel on each topic
// the dashboard exists for.
func TestDashboardShape(t *testing.T) {
	d := readDashboard(t)
	if d.Title == "" || d.UID == "" || d.SchemaVersion < 30 {
		t.Errorf("title %q, uid %q, schemaVersion %d: want a title, a uid and a schema version of at least 30", d.Title, d.UID, d.SchemaVersion)
	}
	vars := map[string]bool{"__rate_interval": true, "__interval": true, "__range": true}
	hasDatasource := false
	for _, v := range d.Templating.List {
		vars[v.Name] = true
		if v.Type == "datasource" && v.Name == "datasource" && string(v.Query) == `"prometheus"` {
			hasDatasource = true
		}
		if v.Type == "query" && (v.Datasource == nil || v.Datasource.UID != "${datasource}") {
			t.Errorf("variable %s does not query the data source variable", v.Name)
		}
	}
	if !hasDatasource {
		t.Error(`no variable "datasource" of type datasource with query "prometheus"`)
	}
	ids := map[int]bool{}
	occupied := map[[2]int]int{} // the grid's cells, and the panel in each
	var walk func([]panel)
	walk = func(ps []panel) {
		for _, p := range ps {
			if ids[p.ID] || p.ID == 0 {
				t.Errorf("panel %q: id %d is 0 or not unique", p.Title, p.ID)
			}
			ids[p.ID] = true
			g := p.GridPos
			if g.W <= 0 || g.H <= 0 || g.X < 0 || g.Y < 0 || g.X+g.W > 24 {
				t.Errorf("panel %d (%s): gridPos %+v is off the 24-column grid", p.ID, p.Title, g)
			}
		cells:
			for x := g.X; x < g.X+g.W; x++ {
				for y := g.Y; y < g.Y+g.H; y++ {
					if other, ok := occupied[[2]int{x, y}]; ok {
						t.Errorf("panel %d (%s) overlaps panel %d at column %d, row %d", p.ID, p.Title, other, x, y)
						break cells
					}
					occupied[[2]int{x, y}] = p.ID
				}
			}
			if p.Type == "row" {
				walk(p.Panels)
				continue
			}
			if p.Title == "" || p.Type == "" {
				t.Errorf("panel %d: no title or type", p.ID)
			}
			if p.Datasource == nil || p.Datasource.UID != "${datasource}" {
				t.Errorf("panel %d (%s): datasource %+v, want uid ${datasource}", p.ID, p.Title, p.Datasource)
			}
			if len(p.Targets) == 0 {
				t.Errorf("panel %d (%s): no targets", p.ID, p.Title)
			}
			refs := map[string]bool{}
			for _, tg := range p.Targets {
				if strings.TrimSpace(tg.Expr) == "" || tg.RefID == "" || refs[tg.RefID] {
					t.Errorf("panel %d (%s): target %q has no expression, or its refId is empty or not unique", p.ID, p.Title, tg.RefID)
				}
				refs[tg.RefID] = true
				if tg.Datasource != nil && tg.Datasource.UID != "${datasource}" {
					t.Errorf("panel %d (%s) target %s: datasource %+v, want uid ${datasource}", p.ID, p.Title, tg.RefID, tg.Datasource)
				}
			}
		}
	}
	walk(d.Panels)
	if len(occupied) == 0 {
		t.Fatal("no panels")
	}
	all := ""
	for _, q := range d.queries() {
		all += q.expr + "\n"
		for _, m := range variableRE.FindAllStringSubmatch(q.expr, -1) {
			if !vars[m[1]] {
				t.Errorf("%s: variable $%s is not defined\n%s", q, m[1], q.expr)
			}
		}
	}
	for _, topic := range []string{"quorate_decisions_total", `result="denied"`, "quorate_decision_duration_seconds_bucket",
		"quorate_group_propose_apply_seconds_bucket", "quorate_group_leader_changes_total", "quorate_group_applied_index_lag",
		"quorate_log_fsync_seconds_bucket", "quorate_group_grants", "quorate_group_grant_wasted_units_total", "quorate_plans",
		"histogram_quantile(0.5,", "histogram_quantile(0.99,"} {
		if !strings.Contains(all, topic) {
			t.Errorf("no panel's expression has %s", topic)
		}
	}
}

// grafanaVariables replaces the dashboard's variables with values a
// Prometheus expression can hold, for promtool.
var grafanaVariables = strings.NewReplacer("$__rate_interval", "5m", "$__interval", "1m", "$__range", "1h",
	`"$job"`, `"quorate"`, `"$instance"`, `".*"`, `"$policy"`, `".*"`)

// TestDashboardQueriesParse: every expression of the dashboard, its
// variables given values, parses as PromQL: promtool checks them as
// recording rules.
func TestDashboardQueriesParse(t *testing.T) {
	pt := promtool(t)
	d := readDashboard(t)
	type rule struct {
		Record string `yaml:"record"`
		Expr   string `yaml:"expr"`
	}
	// Each record names the panel and target, which promtool's errors name.
	var rules []rule
	for _, q := range d.queries() {
		e := grafanaVariables.Replace(q.expr)
		if strings.Contains(e, "$") {
			t.Errorf("%s: a variable the test gives no value: %s", q, e)
		}
		rules = append(rules, rule{Record: fmt.Sprintf("dashboard:panel_%d_target_%s", q.panel, q.ref), Expr: e})
	}
	for v, q := range d.variableQueries(t) {
		// label_values(SELECTOR, LABEL) is Grafana's; its selector is PromQL.
		rules = append(rules, rule{Record: "dashboard:variable_" + v, Expr: grafanaVariables.Replace(q[0])})
	}
	slices.SortFunc(rules, func(a, b rule) int { return strings.Compare(a.Record, b.Record) })
	b, err := yaml.Marshal(map[string]any{"groups": []any{map[string]any{"name": "dashboard", "rules": rules}}})
	if err != nil {
		t.Fatal(err)
	}
	file := filepath.Join(t.TempDir(), "dashboard-rules.yaml")
	if err := os.WriteFile(file, b, 0o600); err != nil {
		t.Fatal(err)
	}
	if out, err := runErr(".", pt, "check", "rules", file); err != nil {
		t.Errorf("promtool check rules over the dashboard's expressions: %v\n%s", err, out)
	}
}

// TestDashboardUsesExportedMetrics: every metric the dashboard's
// expressions and variables name is one a running cluster's nodes export
// (or Prometheus' up), with the labels it matches on and the values it
// asks for, and every label a variable lists is one its metric has.
func TestDashboardUsesExportedMetrics(t *testing.T) {
	met := exportedMetrics(t)
	d := readDashboard(t)
	for _, q := range d.queries() {
		for _, p := range checkSelectors(met, q.expr) {
			t.Errorf("%s: %s\n%s", q, p, q.expr)
		}
	}
	for v, q := range d.variableQueries(t) {
		for _, p := range checkSelectors(met, q[0]) {
			t.Errorf("variable %s: %s\n%s", v, p, q[0])
		}
		sels, err := selectors(q[0])
		if err != nil || len(sels) != 1 {
			t.Errorf("variable %s: %q is not one selector (%v)", v, q[0], err)
			continue
		}
		if _, ok := met[sels[0].name][q[1]]; !ok && !slices.Contains(targetLabels, q[1]) {
			t.Errorf("variable %s lists label %s, which %s does not have", v, q[1], sels[0].name)
		}
	}
}
