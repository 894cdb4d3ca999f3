package deploy

import (
	"fmt"
	"slices"
	"strings"
	"testing"
)

// selector is a metric selector of a PromQL expression: the metric's name
// and its label matchers.
type selector struct {
	name     string
	matchers []matcher
}

type matcher struct{ label, op, value string }

// promqlKeywords are the identifiers of PromQL that are not metric names
// where no '(' follows them: aggregations (sum by (l) (...)), binary and
// set operators, modifiers, and the number words.
var promqlKeywords = map[string]bool{
	"sum": true, "min": true, "max": true, "avg": true, "group": true, "stddev": true, "stdvar": true,
	"count": true, "count_values": true, "bottomk": true, "topk": true, "quantile": true,
	"limitk": true, "limit_ratio": true,
	"and": true, "or": true, "unless": true, "atan2": true,
	"by": true, "without": true, "on": true, "ignoring": true, "group_left": true, "group_right": true,
	"bool": true, "offset": true, "inf": true, "nan": true,
}

// labelListKeywords are followed by a parenthesised list of label names.
var labelListKeywords = map[string]bool{
	"by": true, "without": true, "on": true, "ignoring": true, "group_left": true, "group_right": true,
}

// selectors returns the metric selectors of expr: every identifier that
// is not a keyword, a function (an identifier followed by '('), a label
// name (in a matcher block or a by/on list) or inside a string, a range
// or a comment. promtool checks the syntax; this finds the names.
func selectors(expr string) ([]selector, error) {
	var out []selector
	s := []rune(expr)
	i := 0
	next := func(j int) rune { // the first rune at j or after that is not a space
		for j < len(s) && strings.ContainsRune(" \t\r\n", s[j]) {
			j++
		}
		if j < len(s) {
			return s[j]
		}
		return 0
	}
	skipTo := func(j int, end rune) (int, error) { // past the end rune, strings skipped
		for j < len(s) {
			switch s[j] {
			case end:
				return j + 1, nil
			case '"', '\'', '`':
				k, err := skipString(s, j)
				if err != nil {
					return 0, err
				}
				j = k
				continue
			}
			j++
		}
		return 0, fmt.Errorf("no %q closes %q", end, string(s))
	}
	for i < len(s) {
		c := s[i]
		switch {
		case c == '"' || c == '\'' || c == '`':
			k, err := skipString(s, i)
			if err != nil {
				return nil, err
			}
			i = k
		case c == '#':
			for i < len(s) && s[i] != '\n' {
				i++
			}
		case c == '[':
			k, err := skipTo(i+1, ']')
			if err != nil {
				return nil, err
			}
			i = k
		case c == '{':
			return nil, fmt.Errorf("a selector without a metric name at %q", string(s[i:]))
		case isIdentStart(c):
			j := i
			for j < len(s) && isIdent(s[j]) {
				j++
			}
			word := string(s[i:j])
			i = j
			switch {
			case labelListKeywords[word] && next(i) == '(':
				for s[i] != '(' {
					i++
				}
				k, err := skipTo(i+1, ')')
				if err != nil {
					return nil, err
				}
				i = k
			case promqlKeywords[strings.ToLower(word)] || next(i) == '(':
				// a keyword, an aggregation or a function
			default:
				sel := selector{name: word}
				if next(i) == '{' {
					for s[i] != '{' {
						i++
					}
					ms, k, err := parseMatchers(s, i+1)
					if err != nil {
						return nil, fmt.Errorf("%s: %w", word, err)
					}
					sel.matchers, i = ms, k
				}
				out = append(out, sel)
			}
		case c >= '0' && c <= '9' || c == '.':
			for i < len(s) && (isIdent(s[i]) || s[i] == '.') {
				i++
			}
		default:
			i++
		}
	}
	return out, nil
}

// parseMatchers reads label matchers from s[i:], just past '{', to the
// closing '}', and returns them and the index past it.
func parseMatchers(s []rune, i int) ([]matcher, int, error) {
	var out []matcher
	for {
		for i < len(s) && strings.ContainsRune(" \t\r\n,", s[i]) {
			i++
		}
		if i >= len(s) {
			return nil, 0, fmt.Errorf("no '}' closes the matchers")
		}
		if s[i] == '}' {
			return out, i + 1, nil
		}
		j := i
		for j < len(s) && isIdent(s[j]) {
			j++
		}
		if j == i {
			return nil, 0, fmt.Errorf("a label name expected at %q", string(s[i:]))
		}
		m := matcher{label: string(s[i:j])}
		for j < len(s) && s[j] == ' ' {
			j++
		}
		k := j
		for k < len(s) && strings.ContainsRune("=!~", s[k]) {
			k++
		}
		m.op = string(s[j:k])
		if !slices.Contains([]string{"=", "!=", "=~", "!~"}, m.op) {
			return nil, 0, fmt.Errorf("label %s: no matcher operator", m.label)
		}
		for k < len(s) && s[k] == ' ' {
			k++
		}
		if k >= len(s) || s[k] != '"' && s[k] != '\'' && s[k] != '`' {
			return nil, 0, fmt.Errorf("label %s: no quoted value", m.label)
		}
		end, err := skipString(s, k)
		if err != nil {
			return nil, 0, err
		}
		m.value = strings.NewReplacer(`\"`, `"`, `\\`, `\`).Replace(string(s[k+1 : end-1]))
		out = append(out, m)
		i = end
	}
}

// skipString returns the index past the string that starts at s[i].
func skipString(s []rune, i int) (int, error) {
	q := s[i]
	for j := i + 1; j < len(s); j++ {
		switch {
		case s[j] == '\\' && q != '`':
			j++
		case s[j] == q:
			return j + 1, nil
		}
	}
	return 0, fmt.Errorf("unterminated string in %q", string(s))
}

func isIdentStart(c rune) bool {
	return c == '_' || c == ':' || c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z'
}

func isIdent(c rune) bool { return isIdentStart(c) || c >= '0' && c <= '9' }

// notExporters are the names an expression may use that no node exports:
// Prometheus' own per-target series, each with the labels it has.
var notExporters = map[string][]string{
	"up": {"job", "instance"},
}

// targetLabels are the labels Prometheus adds to every scraped series.
var targetLabels = []string{"job", "instance"}

// checkSelectors reports, for expr, every metric name that the nodes do
// not export (nor notExporters has), every matcher on a label the metric
// does not have, and every value an equality matcher asks for that the
// label never takes. Values with a dashboard variable are not checked.
func checkSelectors(met exported, expr string) []string {
	sels, err := selectors(expr)
	if err != nil {
		return []string{err.Error()}
	}
	if len(sels) == 0 {
		return []string{"names no metric"}
	}
	var problems []string
	for _, sel := range sels {
		labels, ok := met[sel.name]
		extra, other := notExporters[sel.name]
		if !ok && !other {
			problems = append(problems, fmt.Sprintf("metric %s is not exported by the nodes", sel.name))
			continue
		}
		for _, m := range sel.matchers {
			if slices.Contains(targetLabels, m.label) || other && slices.Contains(extra, m.label) {
				continue
			}
			values, ok := labels[m.label]
			if !ok {
				problems = append(problems, fmt.Sprintf("metric %s has no label %s", sel.name, m.label))
				continue
			}
			if m.op == "=" && !strings.Contains(m.value, "$") && !values[m.value] {
				problems = append(problems, fmt.Sprintf("metric %s's label %s is never %q", sel.name, m.label, m.value))
			}
		}
	}
	return problems
}

// TestSelectors: the names and matchers the checks rely on are found, and
// no keyword, function, label or duration is taken for a metric.
func TestSelectors(t *testing.T) {
	for expr, want := range map[string]string{
		`histogram_quantile(0.99, sum by (job, le) (rate(a_bucket{job="q", le=~"1|2"}[5m])))`: `a_bucket{job="q",le=~"1|2"}`,
		`max by (group) (b) - on (group) group_right c{x!="}"} > 3 * 86400`:                   `b c{x!="}"}`,
		`sum(rate(d[1h] offset 5m)) by (p) and e unless f or time() < 1e3`:                    `d e f`,
		"count by (j) (g{s!=\"shutdown\"} == 1) < bool max without (i) (h) # up\n":            `g{s!="shutdown"} h`,
		`label_replace(k, "dst", "$1", "src", "(.*)")`:                                        `k`,
	} {
		sels, err := selectors(expr)
		if err != nil {
			t.Errorf("%s: %v", expr, err)
			continue
		}
		var got []string
		for _, s := range sels {
			w := s.name
			if len(s.matchers) > 0 {
				var ms []string
				for _, m := range s.matchers {
					ms = append(ms, m.label+m.op+fmt.Sprintf("%q", m.value))
				}
				w += "{" + strings.Join(ms, ",") + "}"
			}
			got = append(got, w)
		}
		if g := strings.Join(got, " "); g != want {
			t.Errorf("%s: selectors %s, want %s", expr, g, want)
		}
	}
	for _, bad := range []string{`{__name__="x"}`, `a{b="c"`, `a{b}`, `a{b="c}`} {
		if _, err := selectors(bad); err == nil {
			t.Errorf("%s: no error", bad)
		}
	}
}
