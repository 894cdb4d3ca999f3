package jepsen

import (
	"encoding/xml"
	"errors"
	"html/template"
	"io"
	"math"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"
)

const hostile = `"><script>alert('x')</script>&amp;`

// syntheticReport is a finished run of 10 s: admits every 50 ms, slower
// and failing under its faults, which include one of a hostile kind.
func syntheticReport() *Report {
	t0 := linWall
	at := func(ms int) time.Time { return t0.Add(time.Duration(ms) * time.Millisecond) }
	faults := []Fault{
		{Kind: "kill-leader", Node: "n2", Start: at(1500), End: at(3000)},
		{Kind: "partition-split", Node: "n1 | n2 n3", Start: at(4000), End: at(7000)},
		{Kind: "clock+3s", Node: "n3", Start: at(7500), End: at(8000), Error: "set clock: " + hostile},
		{Kind: "kill", Node: "n1", Start: at(8200), End: at(8300)},
		{Kind: hostile, Node: hostile, Start: at(9000), End: at(9500)},
	}
	var ops []Op
	for ms := 0; ms < 10000; ms += 50 {
		lat, out := 4, OutcomeAllowed
		for _, f := range faults {
			if s := at(ms); !s.Before(f.Start) && s.Before(f.End) {
				lat, out = 1500, OutcomeUnknown
				if f.Kind == "kill" {
					out = OutcomeFail
				}
			}
		}
		if ms%200 == 0 && out == OutcomeAllowed {
			out = OutcomeDenied
		}
		ops = append(ops, Op{ID: int64(len(ops)), Kind: KindAdmit, Key: "k", Start: at(ms), End: at(ms + lat), Outcome: out})
	}
	sortByEnd(ops)
	r := &Report{
		Options: Options{Seed: 12345, Duration: 10 * time.Second, Nodes: 3, Groups: 4, Net: "proxy",
			Workloads: []string{WorkloadTokenBucket}, Nemesis: NemesisOptions{Families: []string{FamilyClock, FamilyKill, FamilyPartition}}},
		Seed: 12345, Workloads: []string{WorkloadTokenBucket}, Families: []string{FamilyClock, FamilyKill, FamilyPartition},
		NetMode: "proxy", Ops: ops, Faults: faults, Counts: map[Outcome]int{},
		Verdicts: []Verdict{{Checker: "at-most-once", OK: true, Summary: "ok"},
			{Checker: "no-over-admission " + hostile, OK: false, Summary: "k: 5 > 4 " + hostile, Violations: []string{hostile}}},
		Timelines: []string{"timelines/token_bucket-k.html"},
	}
	for _, op := range ops {
		r.Counts[op.Outcome]++
	}
	return r
}

func TestReportOutcomeAndSummary(t *testing.T) {
	r := syntheticReport()
	sum := r.Summary(nil)
	lines := strings.Split(sum, "\n")
	if want := "FAIL: 1 of 2 checkers failed: no-over-admission " + hostile; lines[0] != want {
		t.Errorf("first line %q, want %q", lines[0], want)
	}
	if want := "reproduce: " + ReproduceCommand(r.Options); lines[1] != want {
		t.Errorf("second line %q, want %q", lines[1], want)
	}
	for _, want := range []string{"--seed 12345", "--duration 10s", "--groups 4", "--net proxy", "--faults clock,kill,partition",
		"--workload token-bucket", "--interval 2s", "--clients 6"} {
		if !strings.Contains(lines[1], want) {
			t.Errorf("reproduce line lacks %q: %s", want, lines[1])
		}
	}
	if !strings.Contains(sum, "faults: 5 (kill×2 clock×1 partition×1 other×1)") {
		t.Errorf("summary lacks the family counts:\n%s", sum)
	}
	famLine := regexp.MustCompile(`(?m)^  kill +2 +0 +1.6s  kill×1 kill-leader×1$`)
	if !famLine.MatchString(sum) {
		t.Errorf("summary lacks the kill family's row:\n%s", sum)
	}

	r.Verdicts[1].OK = true
	if ok, reason := r.Outcome(nil); !ok || !strings.HasPrefix(reason, "all 2 checkers passed; 200 ops, 5 faults injected") {
		t.Errorf("all passed: %v %q", ok, reason)
	}
	if first, _, _ := strings.Cut(r.Summary(nil), "\n"); !strings.HasPrefix(first, "PASS: all 2 checkers passed") {
		t.Errorf("first line %q", first)
	}
	if ok, reason := r.Outcome(errors.New("heal:\nnode n2 down")); ok || reason != "every checker passed, but the run did not complete: heal: node n2 down" {
		t.Errorf("run error: %v %q", ok, reason)
	}
	if ok, reason := (&Report{}).Outcome(nil); ok || reason != "no checker ran" {
		t.Errorf("no verdicts: %v %q", ok, reason)
	}
}

func TestReportFaultFamilies(t *testing.T) {
	at := func(s int) time.Time { return linWall.Add(time.Duration(s) * time.Second) }
	fams := FaultFamilies([]Fault{
		{Kind: "slots-move", Start: at(0), End: at(2)},
		{Kind: "rolling-restart", Start: at(3), End: at(4)},
		{Kind: "slots-split", Start: at(5), End: at(6), Error: "refused"},
		{Kind: "scale-join", Start: at(7)}, // never ended: no time
		{Kind: "move-replica-leader", Start: at(8), End: at(9)},
		{Kind: "pause-leader", Start: at(9), End: at(10)},
		{Kind: "slots-move", Start: at(10), End: at(11)},
	})
	var got []string
	for _, c := range fams {
		got = append(got, c.Family+"="+strconv.Itoa(c.Count)+"/"+strconv.Itoa(c.Errors)+"/"+c.Total.String()+"/"+c.KindsString())
	}
	want := "pause=1/0/1s/pause-leader×1 restart=1/0/1s/rolling-restart×1 move=1/0/1s/move-replica-leader×1 " +
		"slots=3/1/4s/slots-move×2 slots-split×1 scale=1/0/0s/scale-join×1"
	if strings.Join(got, " ") != want {
		t.Errorf("families\n%s\nwant\n%s", strings.Join(got, " "), want)
	}
}

// The reproduce command of a run driven from a test (options without the
// command's defaults) names every default; odd values are shell-quoted.
func TestReportReproduceCommand(t *testing.T) {
	cmd := ReproduceCommand(Options{Seed: 9, Duration: 20 * time.Second})
	want := "quorate-jepsen --seed 9 --duration 20s --nodes 3 --workload token-bucket,fixed-window,lease,grant,grant-sync,grant-bucket --faults none " +
		"--clients 6 --keys 6 --capacity 100 --limit 20 --window 2s --holders 2 --lease-ttl 2s --grant-limit 200 --interval 2s"
	if cmd != want {
		t.Errorf("got  %s\nwant %s", cmd, want)
	}
	cmd = ReproduceCommand(Options{Seed: 9, BuildTags: "it's bad"})
	if !strings.HasSuffix(cmd, ` --planted-bug 'it'\''s bad'`) {
		t.Errorf("not quoted: %s", cmd)
	}
}

type svgRect struct {
	class, family, kind string
	x, y, w, h          float64
}

// parseSVGs decodes every <svg> of page with encoding/xml and returns the
// rects of each.
func parseSVGs(t *testing.T, page string) [][]svgRect {
	t.Helper()
	var out [][]svgRect
	for rest := page; ; {
		i := strings.Index(rest, "<svg")
		if i < 0 {
			return out
		}
		j := strings.Index(rest[i:], "</svg>")
		if j < 0 {
			t.Fatal("unterminated <svg>")
		}
		doc := rest[i : i+j+len("</svg>")]
		rest = rest[i+j:]
		var rects []svgRect
		dec := xml.NewDecoder(strings.NewReader(doc))
		for {
			tok, err := dec.Token()
			if err == io.EOF {
				break
			}
			if err != nil {
				t.Fatalf("SVG does not parse: %v\n%s", err, doc)
			}
			se, ok := tok.(xml.StartElement)
			if !ok || se.Name.Local != "rect" {
				continue
			}
			var r svgRect
			for _, a := range se.Attr {
				f, _ := strconv.ParseFloat(a.Value, 64)
				switch a.Name.Local {
				case "class":
					r.class = a.Value
				case "data-family":
					r.family = a.Value
				case "data-kind":
					r.kind = a.Value
				case "x":
					r.x = f
				case "y":
					r.y = f
				case "width":
					r.w = f
				case "height":
					r.h = f
				}
			}
			rects = append(rects, r)
		}
		out = append(out, rects)
	}
}

func TestReportIndexHTML(t *testing.T) {
	r := syntheticReport()
	path := filepath.Join(t.TempDir(), "index.html")
	if err := r.WriteHTML(path, r.Summary(nil), nil); err != nil {
		t.Fatal(err)
	}
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	page := string(b)
	for _, want := range []string{
		`<div id="verdict" class="banner failed">`, `<div class="verdict">FAIL</div>`,
		`<code class="cmd" id="reproduce">` + template.HTMLEscapeString(ReproduceCommand(r.Options)) + `</code>`,
		`<span class="fail">FAIL: 1 of 2 checkers failed`, `href="timelines/token_bucket-k.html"`,
	} {
		if !strings.Contains(page, want) {
			t.Errorf("page lacks %q", want)
		}
	}
	if i, j := strings.Index(page, `id="verdict"`), strings.Index(page, "<h1>"); i < 0 || i > j {
		t.Errorf("the banner is not at the top")
	}
	for fam, n := range map[string]int{"kill": 2, "clock": 1, "partition": 1, "other": 1} {
		row := regexp.MustCompile(`<tr class="family" data-family="` + fam + `">.*<td class="num count">(\d+)</td>`).FindStringSubmatch(page)
		if row == nil || row[1] != strconv.Itoa(n) {
			t.Errorf("family %s: row %v, want count %d", fam, row, n)
		}
	}
	if strings.Contains(page, `data-family="pause"`) {
		t.Errorf("a family that did not run is listed")
	}
	if strings.Contains(page, "<script") || strings.Contains(page, "http") || strings.Contains(page, "ZgotmplZ") {
		t.Errorf("page not self-contained or not escaped")
	}
	if !strings.Contains(page, "&lt;script&gt;") {
		t.Errorf("the hostile strings are not shown escaped")
	}

	charts := parseSVGs(t, page)
	if len(charts) != 2 {
		t.Fatalf("%d SVG charts, want 2 (throughput and latency)", len(charts))
	}
	a, _ := newTimeAxis(r.Ops, r.Faults)
	plotW := plotRight - plotLeft
	for ci, rects := range charts {
		var faults, bars []svgRect
		for _, rc := range rects {
			switch {
			case rc.class == "fault":
				faults = append(faults, rc)
			case strings.HasPrefix(rc.class, "bar "):
				bars = append(bars, rc)
			}
		}
		if len(faults) != len(r.Faults) {
			t.Fatalf("chart %d: %d fault rects, want %d", ci, len(faults), len(r.Faults))
		}
		for i, rc := range faults {
			f := r.Faults[i]
			if rc.kind != f.Kind {
				t.Errorf("chart %d rect %d: kind %q, want %q", ci, i, rc.kind, f.Kind)
			}
			if fam, _, _ := faultFamily(f.Kind); rc.family != fam {
				t.Errorf("chart %d rect %d: family %q, want %q", ci, i, rc.family, fam)
			}
			wantX := plotLeft + float64(f.Start.Sub(a.t0))/float64(a.span)*plotW
			wantW := float64(f.End.Sub(f.Start)) / float64(a.span) * plotW
			if math.Abs(rc.x-wantX) > 0.01 || math.Abs(rc.w-wantW) > 0.01 {
				t.Errorf("chart %d rect %d (%s): x %.2f width %.2f, want %.2f %.2f", ci, i, f.Kind, rc.x, rc.w, wantX, wantW)
			}
			if rc.x < plotLeft || rc.x+rc.w > plotRight+0.01 || rc.y != plotTop || rc.h != plotBottom-plotTop {
				t.Errorf("chart %d rect %d outside the plot: %+v", ci, i, rc)
			}
			if i > 0 && rc.x < faults[i-1].x+faults[i-1].w-0.01 {
				t.Errorf("chart %d: rect %d starts before rect %d ends", ci, i, i-1)
			}
		}
		for _, rc := range bars {
			if rc.x < plotLeft || rc.x+rc.w > plotRight+0.01 || rc.y < plotTop-0.01 || rc.y+rc.h > plotBottom+0.01 || rc.h <= 0 {
				t.Errorf("chart %d: bar outside the plot: %+v", ci, rc)
			}
		}
		if ci == 0 && len(bars) < 10 {
			t.Errorf("throughput chart: %d bars", len(bars))
		}
		if ci == 1 && (!strings.Contains(page, `class="line p50"`) || !strings.Contains(page, `class="line p99"`)) {
			t.Errorf("latency chart lacks its lines")
		}
	}

	// A run with nothing recorded draws no chart and says so.
	empty := &Report{Counts: map[Outcome]int{}}
	if err := empty.WriteHTML(path, empty.Summary(nil), nil); err != nil {
		t.Fatal(err)
	}
	if b, _ := os.ReadFile(path); !strings.Contains(string(b), "No operation was recorded.") || strings.Contains(string(b), "<svg") {
		t.Errorf("empty report page:\n%s", b)
	}
}
