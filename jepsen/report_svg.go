package jepsen

import (
	"fmt"
	"html"
	"html/template"
	"math"
	"slices"
	"strings"
	"time"
)

// Chart geometry, in SVG user units: the plot area is [plotLeft, plotRight]
// × [plotTop, plotBottom] of a chartWidth × chartHeight picture.
const (
	chartWidth  = 960
	chartHeight = 250
	plotLeft    = 70.0
	plotRight   = 940.0
	plotTop     = 28.0
	plotBottom  = 210.0
	maxBins     = 120 // bins are 1 s wide, or wider so that there are at most this many
)

// Colours of the outcomes in the throughput chart and of the latency lines.
const (
	colorOK      = "#2e9d4f"
	colorFail    = "#e0a030"
	colorUnknown = "#c03030"
	colorP50     = "#1f5fbf"
	colorP99     = "#8e2cb0"
)

// timeAxis maps wall-clock times of a run onto the plot's x range.
type timeAxis struct {
	t0   time.Time
	span time.Duration
	bin  time.Duration
	n    int // bins
}

// newTimeAxis spans every op (invoke to complete) and every fault (start to
// end); ok is false when there is nothing to draw.
func newTimeAxis(ops []Op, faults []Fault) (a timeAxis, ok bool) {
	var t0, t1 time.Time
	see := func(t time.Time) {
		if t.IsZero() {
			return
		}
		if t0.IsZero() || t.Before(t0) {
			t0 = t
		}
		if t1.IsZero() || t.After(t1) {
			t1 = t
		}
	}
	for _, op := range ops {
		see(op.Start)
		see(op.End)
	}
	for _, f := range faults {
		see(f.Start)
		see(f.End)
	}
	if t0.IsZero() {
		return a, false
	}
	a.t0, a.bin = t0, time.Second
	if span := t1.Sub(t0); span > maxBins*time.Second {
		a.bin = time.Duration(math.Ceil(span.Seconds()/maxBins)) * time.Second
	}
	a.n = max(1, int(math.Ceil(float64(t1.Sub(t0))/float64(a.bin))))
	a.span = time.Duration(a.n) * a.bin
	return a, true
}

// x is t's abscissa, clamped to the plot.
func (a timeAxis) x(t time.Time) float64 {
	f := float64(t.Sub(a.t0)) / float64(a.span)
	return plotLeft + min(max(f, 0), 1)*(plotRight-plotLeft)
}

// chartBin holds the ops completed within one bin.
type chartBin struct {
	ok, fail, unknown int
	lat               []time.Duration
}

func binOps(ops []Op, a timeAxis) []chartBin {
	bins := make([]chartBin, a.n)
	for _, op := range ops {
		if op.End.IsZero() {
			continue
		}
		i := min(max(int(op.End.Sub(a.t0)/a.bin), 0), a.n-1)
		b := &bins[i]
		switch {
		case op.Outcome.OK():
			b.ok++
		case op.Outcome == OutcomeFail:
			b.fail++
		default:
			b.unknown++
		}
		if !op.Start.IsZero() && !op.End.Before(op.Start) {
			b.lat = append(b.lat, op.End.Sub(op.Start))
		}
	}
	return bins
}

// percentile is the q-quantile (nearest rank) of sorted, which is not empty.
func percentile(sorted []time.Duration, q float64) time.Duration {
	i := int(math.Ceil(q*float64(len(sorted)))) - 1
	return sorted[min(max(i, 0), len(sorted)-1)]
}

// ReportCharts renders the run's throughput (ops completed per second, by
// outcome) and latency (p50 and p99 of the calls completed in each bin,
// answered or not, on a log scale) over time as two inline SVG pictures,
// each with the faults drawn as shaded rectangles from their start to their
// end, coloured and labelled by family. Every string is escaped; the
// result holds no script and no external reference. None when there is
// nothing to draw.
func ReportCharts(ops []Op, faults []Fault) []template.HTML {
	a, ok := newTimeAxis(ops, faults)
	if !ok {
		return nil
	}
	bins := binOps(ops, a)
	return []template.HTML{throughputChart(a, bins, faults), latencyChart(a, bins, faults)}
}

func throughputChart(a timeAxis, bins []chartBin, faults []Fault) template.HTML {
	per := a.bin.Seconds()
	peak := 0.0
	for _, b := range bins {
		peak = max(peak, float64(b.ok+b.fail+b.unknown)/per)
	}
	top := niceCeil(peak)
	y := func(v float64) float64 { return plotBottom - v/top*(plotBottom-plotTop) }
	var s strings.Builder
	svgOpen(&s, "throughput", "Operations completed per second by outcome, with the faults shaded")
	for i := 0; i <= 4; i++ {
		v := top * float64(i) / 4
		yAxisTick(&s, y(v), trimFloat(v))
	}
	xAxis(&s, a, "time since the run began · ops/s completed, by outcome")
	faultRects(&s, a, faults)
	w := (plotRight - plotLeft) / float64(a.n)
	for i, b := range bins {
		x := plotLeft + float64(i)*w
		base := 0.0
		for _, part := range []struct {
			n     int
			color string
			what  string
		}{{b.ok, colorOK, "ok"}, {b.fail, colorFail, "fail"}, {b.unknown, colorUnknown, "unknown"}} {
			if part.n == 0 {
				continue
			}
			v := float64(part.n) / per
			fmt.Fprintf(&s, `<rect class="bar %s" x="%.2f" y="%.2f" width="%.2f" height="%.2f" fill="%s" fill-opacity="0.85"><title>%s: %d %s</title></rect>`+"\n",
				part.what, x+w*0.08, y(base+v), w*0.84, y(base)-y(base+v), part.color, html.EscapeString(binLabel(a, i)), part.n, part.what)
			base += v
		}
	}
	seriesLegend(&s, []legendEntry{{"ok (answered)", colorOK}, {"fail (never applied)", colorFail}, {"unknown (info)", colorUnknown}})
	s.WriteString("</svg>")
	return template.HTML(s.String())
}

func latencyChart(a timeAxis, bins []chartBin, faults []Fault) template.HTML {
	type point struct {
		i        int
		p50, p99 time.Duration
	}
	var pts []point
	lo, hi := time.Duration(math.MaxInt64), time.Duration(0)
	for i, b := range bins {
		if len(b.lat) == 0 {
			continue
		}
		lat := slices.Clone(b.lat)
		slices.Sort(lat)
		p := point{i, max(percentile(lat, 0.5), time.Microsecond), max(percentile(lat, 0.99), time.Microsecond)}
		pts = append(pts, p)
		lo, hi = min(lo, p.p50), max(hi, p.p99)
	}
	// Decades from below the fastest p50 to above the slowest p99.
	loExp := -3.0 // 1 ms
	hiExp := -2.0
	if len(pts) > 0 {
		loExp = min(loExp, math.Floor(math.Log10(lo.Seconds())))
		hiExp = max(loExp+1, math.Ceil(math.Log10(hi.Seconds())))
	}
	y := func(d time.Duration) float64 {
		f := (math.Log10(d.Seconds()) - loExp) / (hiExp - loExp)
		return plotBottom - min(max(f, 0), 1)*(plotBottom-plotTop)
	}
	var s strings.Builder
	svgOpen(&s, "latency", "Latency p50 and p99 of the calls completed in each bin, log scale, with the faults shaded")
	for e := loExp; e <= hiExp; e++ {
		d := time.Duration(math.Pow(10, e) * float64(time.Second))
		yAxisTick(&s, y(d), d.String())
	}
	xAxis(&s, a, "time since the run began · latency of the calls completed in each bin (answered or not), log scale")
	faultRects(&s, a, faults)
	w := (plotRight - plotLeft) / float64(a.n)
	for _, line := range []struct {
		name  string
		color string
		of    func(point) time.Duration
	}{{"p50", colorP50, func(p point) time.Duration { return p.p50 }}, {"p99", colorP99, func(p point) time.Duration { return p.p99 }}} {
		var d strings.Builder
		for k, p := range pts {
			cmd := "L"
			if k == 0 || pts[k-1].i != p.i-1 {
				cmd = "M"
			}
			fmt.Fprintf(&d, "%s%.2f %.2f ", cmd, plotLeft+(float64(p.i)+0.5)*w, y(line.of(p)))
		}
		if d.Len() > 0 {
			fmt.Fprintf(&s, `<path class="line %s" d="%s" fill="none" stroke="%s" stroke-width="1.5"/>`+"\n", line.name, strings.TrimSpace(d.String()), line.color)
		}
		for _, p := range pts {
			fmt.Fprintf(&s, `<circle class="point %s" cx="%.2f" cy="%.2f" r="2" fill="%s"><title>%s: %s %s</title></circle>`+"\n",
				line.name, plotLeft+(float64(p.i)+0.5)*w, y(line.of(p)), line.color, html.EscapeString(binLabel(a, p.i)), line.name, line.of(p).Round(time.Microsecond))
		}
	}
	seriesLegend(&s, []legendEntry{{"p50", colorP50}, {"p99", colorP99}})
	s.WriteString("</svg>")
	return template.HTML(s.String())
}

func svgOpen(s *strings.Builder, class, label string) {
	fmt.Fprintf(s, `<svg class="chart %s" viewBox="0 0 %d %d" width="%d" height="%d" role="img" aria-label="%s" font-family="sans-serif" font-size="11">`+"\n",
		class, chartWidth, chartHeight, chartWidth, chartHeight, html.EscapeString(label))
	fmt.Fprintf(s, `<rect class="plot" x="%.0f" y="%.0f" width="%.0f" height="%.0f" fill="#fbfbfb" stroke="#999"/>`+"\n",
		plotLeft, plotTop, plotRight-plotLeft, plotBottom-plotTop)
}

func yAxisTick(s *strings.Builder, y float64, label string) {
	fmt.Fprintf(s, `<line x1="%.0f" x2="%.0f" y1="%.2f" y2="%.2f" stroke="#e4e4e4"/><text x="%.0f" y="%.2f" text-anchor="end" dominant-baseline="middle">%s</text>`+"\n",
		plotLeft, plotRight, y, y, plotLeft-6, y, html.EscapeString(label))
}

// xAxis draws ticks every round number of seconds, at most 12 of them, and
// the axis caption.
func xAxis(s *strings.Builder, a timeAxis, caption string) {
	step := time.Second
	for _, st := range []int{1, 2, 5, 10, 15, 30, 60, 120, 300, 600, 1800, 3600} {
		step = time.Duration(st) * time.Second
		if a.span/step <= 12 {
			break
		}
	}
	for t := time.Duration(0); t <= a.span; t += step {
		x := a.x(a.t0.Add(t))
		fmt.Fprintf(s, `<line x1="%.2f" x2="%.2f" y1="%.0f" y2="%.0f" stroke="#999"/><text x="%.2f" y="%.0f" text-anchor="middle">%s</text>`+"\n",
			x, x, plotBottom, plotBottom+4, x, plotBottom+16, t)
	}
	fmt.Fprintf(s, `<text x="%.0f" y="%d" text-anchor="middle" fill="#555">%s</text>`+"\n", (plotLeft+plotRight)/2, chartHeight-8, html.EscapeString(caption))
}

// faultRects shades each fault's interval over the whole plot height,
// labelled with its family where it is wide enough, its kind, node(s),
// times and error in its tooltip.
func faultRects(s *strings.Builder, a timeAxis, faults []Fault) {
	for _, f := range faults {
		end := f.End
		if end.IsZero() || end.Before(f.Start) {
			end = f.Start
		}
		x0, x1 := a.x(f.Start), a.x(end)
		w := max(x1-x0, 1)
		if x0+w > plotRight {
			x0 = plotRight - w
		}
		fam, _, _ := faultFamily(f.Kind)
		tip := fmt.Sprintf("%s on %s, %s – %s (%s)", f.Kind, f.Node, f.Start.Format("15:04:05.000"), end.Format("15:04:05.000"),
			end.Sub(f.Start).Round(time.Millisecond))
		if f.Error != "" {
			tip += ": " + oneLine(f.Error)
		}
		fmt.Fprintf(s, `<rect class="fault" data-family="%s" data-kind="%s" x="%.2f" y="%.0f" width="%.2f" height="%.0f" fill="%s" fill-opacity="0.45"><title>%s</title></rect>`+"\n",
			html.EscapeString(fam), html.EscapeString(f.Kind), x0, plotTop, w, plotBottom-plotTop, faultColor(fam), html.EscapeString(tip))
		if w >= 28 {
			fmt.Fprintf(s, `<text class="fault-label" x="%.2f" y="%.0f" font-size="10" fill="#333">%s</text>`+"\n", x0+2, plotTop+11, html.EscapeString(fam))
		}
	}
}

type legendEntry struct{ name, color string }

func seriesLegend(s *strings.Builder, entries []legendEntry) {
	x := plotLeft
	for _, e := range entries {
		fmt.Fprintf(s, `<rect class="legend" x="%.0f" y="8" width="12" height="12" fill="%s"/><text x="%.0f" y="18">%s</text>`+"\n",
			x, e.color, x+16, html.EscapeString(e.name))
		x += 30 + 7*float64(len(e.name))
	}
}

// binLabel names bin i by its time range since the run began.
func binLabel(a timeAxis, i int) string {
	return fmt.Sprintf("%v–%v", time.Duration(i)*a.bin, time.Duration(i+1)*a.bin)
}

// niceCeil is the smallest of 1, 2, 2.5 or 5 × a power of ten at or above v (1 for v ≤ 0).
func niceCeil(v float64) float64 {
	if v <= 0 {
		return 1
	}
	p := math.Pow(10, math.Floor(math.Log10(v)))
	for _, m := range []float64{1, 2, 2.5, 5, 10} {
		if m*p >= v {
			return m * p
		}
	}
	return 10 * p
}

func trimFloat(v float64) string {
	return strings.TrimSuffix(strings.TrimRight(fmt.Sprintf("%.2f", v), "0"), ".")
}
