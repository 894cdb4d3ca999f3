package statuspage

import (
	"fmt"
	"time"
)

// limit is what a policy allows, in words: "2 concurrent", "1000 per
// day", "60 per minute, burst 20", "100 per 10s".
func limit(p Policy) string {
	switch p.Algorithm {
	case "concurrency":
		return fmt.Sprintf("%d concurrent", p.Limit)
	case "quota":
		if p.Calendar != "" {
			return fmt.Sprintf("%d per %s", p.Limit, p.Calendar)
		}
	}
	per := period(p.Period)
	switch p.Period {
	case time.Second:
		per = "second"
	case time.Minute:
		per = "minute"
	case time.Hour:
		per = "hour"
	case 24 * time.Hour:
		per = "day"
	}
	s := fmt.Sprintf("%d per %s", p.Limit, per)
	if p.Algorithm == "token_bucket" && p.Burst > 0 && p.Burst != p.Limit {
		s += fmt.Sprintf(", burst %d", p.Burst)
	}
	return s
}

// The chart of a policy's last minutes: one bar per minute, its height the
// minute's decisions, its lower part in red the denials, scaled to the
// busiest minute. Inline SVG, drawn here: the page has no script.
const (
	chartBarWidth = 6
	chartGap      = 2
	chartHeight   = 28
)

// Chart is the SVG geometry of one policy's chart.
type Chart struct {
	Width, Height int
	Max           uint64 // the busiest minute's decisions
	Bars          []Bar
}

// Bar is one minute of a Chart.
type Bar struct {
	X, Y, W, H       int // the decisions' bar
	DeniedY, DeniedH int // the denials' part of it
	Height           int // the chart's
	Decisions        uint64
	Denied           uint64
	Ago              int // minutes before the current one
}

// chart is the chart of p's last minutes.
func chart(p Policy) Chart {
	n := len(p.DecisionsByMinute)
	c := Chart{Width: max(1, n*(chartBarWidth+chartGap)-chartGap), Height: chartHeight}
	for _, v := range p.DecisionsByMinute {
		c.Max = max(c.Max, v)
	}
	scale := func(v uint64) int {
		if v == 0 || c.Max == 0 {
			return 0
		}
		return max(1, int(float64(v)/float64(c.Max)*chartHeight)) // a minute with decisions shows
	}
	for i, v := range p.DecisionsByMinute {
		var denied uint64
		if i < len(p.DeniedByMinute) {
			denied = min(v, p.DeniedByMinute[i])
		}
		h, dh := scale(v), scale(denied)
		c.Bars = append(c.Bars, Bar{
			X: i * (chartBarWidth + chartGap), Y: chartHeight - h, W: chartBarWidth, H: h,
			DeniedY: chartHeight - dh, DeniedH: dh, Height: chartHeight, Decisions: v, Denied: denied, Ago: n - 1 - i,
		})
	}
	return c
}
