package jepsen

import (
	"bytes"
	"fmt"
	"html/template"
	"os"
	"path/filepath"
	"strings"
	"time"
)

var indexTemplate = template.Must(template.New("index").Parse(`<!doctype html>
<html lang="en">
<head>
<meta charset="UTF-8">
<title>{{.Title}}</title>
<style>
body { font-family: sans-serif; margin: 2em; max-width: 1000px; }
pre { background: #f4f4f4; padding: 1em; overflow-x: auto; }
.fail { color: #b00000; font-weight: bold; }
.banner { padding: 0.6em 1em; border-radius: 6px; color: #fff; margin-bottom: 1em; }
.banner.pass { background: #1e8c3a; }
.banner.failed { background: #c0262d; }
.banner .verdict { font-size: 2.4em; font-weight: bold; letter-spacing: 0.05em; }
table { border-collapse: collapse; margin-bottom: 1em; }
td, th { border: 1px solid #ccc; padding: 0.25em 0.6em; text-align: left; vertical-align: top; }
td.num { text-align: right; }
td.bad { color: #b00000; font-weight: bold; }
td.good { color: #1e7a32; font-weight: bold; }
.swatch { display: inline-block; width: 0.9em; height: 0.9em; border: 1px solid #888; vertical-align: middle; margin-right: 0.3em; }
.legend .item { margin-right: 1.2em; white-space: nowrap; }
code.cmd { display: block; background: #f4f4f4; padding: 0.8em; white-space: pre-wrap; word-break: break-all; }
svg.chart { display: block; max-width: 100%; height: auto; margin-bottom: 0.5em; }
</style>
</head>
<body>
{{with .Banner}}<div id="verdict" class="banner {{if .OK}}pass{{else}}failed{{end}}">
<div class="verdict">{{if .OK}}PASS{{else}}FAIL{{end}}</div>
<div class="reason">{{.Reason}}</div>
</div>
{{end}}<h1>{{.Title}}</h1>
{{if .Reproduce}}<h2>Reproduce</h2>
<code class="cmd" id="reproduce">{{.Reproduce}}</code>
{{end}}{{if .Facts}}<h2>Run</h2>
<table class="facts">
{{range .Facts}}<tr><th>{{.Name}}</th><td>{{.Value}}</td></tr>
{{end}}</table>
{{end}}{{if .Report}}<h2>Checkers</h2>
<table class="verdicts">
<tr><th>checker</th><th>verdict</th><th>summary</th></tr>
{{range .Verdicts}}<tr><td>{{.Checker}}</td>{{if .OK}}<td class="good">PASS</td>{{else}}<td class="bad">FAIL</td>{{end}}<td>{{.Summary}}{{if .Violations}} ({{len .Violations}} violations){{end}}</td></tr>
{{end}}</table>
<h2>Faults that ran</h2>
{{if .Families}}<table class="families">
<tr><th>family</th><th>what</th><th>count</th><th>errors</th><th>time under fault</th><th>kinds</th></tr>
{{range .Families}}<tr class="family" data-family="{{.Family}}"><td><span class="swatch" style="background: {{.Color}}"></span>{{.Family}}</td><td>{{.What}}</td><td class="num count">{{.Count}}</td><td class="num">{{.Errors}}</td><td class="num">{{.Time}}</td><td>{{.Kinds}}</td></tr>
{{end}}</table>
{{else}}<p>No fault was injected.</p>
{{end}}<h2>Throughput and latency</h2>
{{if .Charts}}{{range .Charts}}{{.}}
{{end}}{{if .Families}}<p class="legend">Shaded: {{range .Families}}<span class="item"><span class="swatch" style="background: {{.Color}}"></span>{{.Family}}</span>{{end}}(hover a shaded interval for its fault).</p>
{{end}}{{else}}<p>No operation was recorded.</p>
{{end}}{{end}}<h2>Summary</h2>
<pre>{{range .Lines}}{{if .Fail}}<span class="fail">{{.Text}}</span>{{else}}{{.Text}}{{end}}
{{end}}</pre>
<h2>Timelines</h2>
{{if .Files}}<ul>
{{range .Files}}<li><a href="{{.Href}}">{{.Name}}</a></li>
{{end}}</ul>{{else}}<p>None written.</p>{{end}}
</body>
</html>
`))

// indexPage is indexTemplate's data; Banner, Reproduce, Facts and Report
// are empty on a page of a summary alone (WriteIndexHTML).
type indexPage struct {
	Title     string
	Banner    *indexBanner
	Reproduce string
	Facts     []indexFact
	Report    bool
	Verdicts  []Verdict
	Families  []indexFamily
	Charts    []template.HTML
	Lines     []indexLine
	Files     []indexLink
}

type indexBanner struct {
	OK     bool
	Reason string
}

type indexFact struct{ Name, Value string }

type indexFamily struct {
	Family, What, Color, Time, Kinds string
	Count, Errors                    int
}

type indexLine struct {
	Text string
	Fail bool
}

type indexLink struct{ Href, Name string }

// WriteIndexHTML writes a self-contained page at path with title, the
// summary text (lines starting with FAIL highlighted) and links to files:
// paths relative to path's directory are used as they are, absolute ones
// are made relative to it.
func WriteIndexHTML(path string, title string, summary string, files []string) error {
	return writeIndex(path, indexPage{Title: title}, summary, files)
}

// WriteHTML writes the run's self-contained page at path: a PASS/FAIL
// banner (Outcome with runErr, Run's error), the command that reproduces
// the run, the run's facts, each checker's verdict, the fault families that
// ran with their counts, throughput and latency over time with the faults
// shaded (ReportCharts), the summary text and links to the timelines.
func (r *Report) WriteHTML(path, summary string, runErr error) error {
	ok, reason := r.Outcome(runErr)
	p := indexPage{
		Title:     fmt.Sprintf("Quorate fault-injection run, seed %d", r.Seed),
		Banner:    &indexBanner{OK: ok, Reason: reason},
		Reproduce: ReproduceCommand(r.Options),
		Report:    true,
		Verdicts:  r.Verdicts,
		Charts:    ReportCharts(r.Ops, r.Faults),
	}
	o := r.Options
	tls := "no"
	if o.TLS {
		tls = "both ports of every node, a throwaway CA"
	}
	p.Facts = []indexFact{
		{"seed", fmt.Sprint(r.Seed)},
		{"workloads", strings.Join(r.Workloads, ", ")},
		{"nodes", fmt.Sprint(max(o.Nodes, 3))},
		{"data groups", fmt.Sprint(max(o.Groups, 1))},
		{"duration", o.Duration.String()},
		{"fault families asked", familiesArg(r.Families)},
		{"network faults via", r.NetMode},
		{"TLS", tls},
		{"ops", fmt.Sprintf("%d (allowed %d, denied %d, fail %d, unknown %d)", len(r.Ops), r.Counts[OutcomeAllowed],
			r.Counts[OutcomeDenied], r.Counts[OutcomeFail], r.Counts[OutcomeUnknown])},
		{"faults injected", fmt.Sprintf("%d (%s)", len(r.Faults), faultCounts(r.Faults))},
	}
	if o.Scale {
		p.Facts = append(p.Facts, indexFact{"scale", fmt.Sprintf("%d → %d → %d nodes; members at the end: %s",
			max(o.Nodes, 3), max(o.Nodes, 3)+ScaleNodes, max(o.Nodes, 3), strings.Join(r.Members, " "))})
	}
	if o.BuildTags != "" {
		p.Facts = append(p.Facts, indexFact{"planted bug", plantedName(o.BuildTags)})
	}
	for _, c := range FaultFamilies(r.Faults) {
		p.Families = append(p.Families, indexFamily{Family: c.Family, What: c.What, Color: faultColor(c.Family),
			Time: c.Total.Round(10 * time.Millisecond).String(), Kinds: c.KindsString(), Count: c.Count, Errors: c.Errors})
	}
	return writeIndex(path, p, summary, r.Timelines)
}

func writeIndex(path string, data indexPage, summary string, files []string) error {
	for _, l := range strings.Split(strings.TrimRight(summary, "\n"), "\n") {
		data.Lines = append(data.Lines, indexLine{Text: l, Fail: strings.HasPrefix(l, "FAIL")})
	}
	dir := filepath.Dir(path)
	for _, f := range files {
		href := f
		if filepath.IsAbs(f) {
			if rel, err := filepath.Rel(dir, f); err == nil {
				href = rel
			}
		}
		data.Files = append(data.Files, indexLink{Href: filepath.ToSlash(href), Name: filepath.ToSlash(href)})
	}
	var buf bytes.Buffer
	if err := indexTemplate.Execute(&buf, data); err != nil {
		return err
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	return os.WriteFile(path, buf.Bytes(), 0o644)
}
