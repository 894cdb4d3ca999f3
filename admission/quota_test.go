package admission_test

import (
	"math"
	"math/rand/v2"
	"reflect"
	"testing"
	"time"

	"github.com/quorate/quorate/admission"
)

// quotaPolicy is a quota of limit per calendar period, burst and max_cost
// unset.
func quotaPolicy(c admission.Calendar, limit int64) admission.Policy {
	return admission.Policy{Name: "quota", Algorithm: admission.AlgorithmQuota, Limit: limit, Calendar: c}
}

func utc(y int, m time.Month, d, h, mi, s, ns int) int64 {
	return time.Date(y, m, d, h, mi, s, ns, time.UTC).UnixNano()
}

// The model's calendar, written out without package time: Gregorian leap
// years, month lengths, 1970-01-01 a Thursday.

func modelLeap(y int64) bool { return y%4 == 0 && (y%100 != 0 || y%400 == 0) }

func modelMonthDays(y int64, m int) int64 {
	switch m {
	case 2:
		if modelLeap(y) {
			return 29
		}
		return 28
	case 4, 6, 9, 11:
		return 30
	default:
		return 31
	}
}

// quotaPeriod returns the calendar period [start, end) in UTC holding now
// (≥ 0), in Unix ns, by counting whole days since the epoch and walking
// years and then months from 1970-01-01.
func quotaPeriod(c admission.Calendar, now int64) (start, end int64) {
	const dayNs = int64(24 * time.Hour)
	days := now / dayNs
	switch c {
	case admission.CalendarDay:
		return days * dayNs, (days + 1) * dayNs
	case admission.CalendarWeek:
		monday := days - (days+3)%7 // day 0 is a Thursday, 3 days after Monday
		return monday * dayNs, (monday + 7) * dayNs
	}
	y, yearStart, yearDays := int64(1970), int64(0), int64(365)
	for {
		yearDays = 365
		if modelLeap(y) {
			yearDays = 366
		}
		if days < yearStart+yearDays {
			break
		}
		yearStart += yearDays
		y++
	}
	if c == admission.CalendarYear {
		return yearStart * dayNs, (yearStart + yearDays) * dayNs
	}
	monthStart := yearStart
	for m := 1; ; m++ {
		n := modelMonthDays(y, m)
		if days < monthStart+n {
			return monthStart * dayNs, (monthStart + n) * dayNs
		}
		monthStart += n
	}
}

// TestQuotaModelCalendar checks the model itself on known dates.
func TestQuotaModelCalendar(t *testing.T) {
	tests := []struct {
		c          admission.Calendar
		at, start  int64
		lengthDays int64
	}{
		{admission.CalendarMonth, utc(2028, 2, 29, 12, 0, 0, 0), utc(2028, 2, 1, 0, 0, 0, 0), 29},
		{admission.CalendarMonth, utc(2100, 2, 28, 0, 0, 0, 0), utc(2100, 2, 1, 0, 0, 0, 0), 28},
		{admission.CalendarMonth, utc(2000, 2, 1, 0, 0, 0, 0), utc(2000, 2, 1, 0, 0, 0, 0), 29},
		{admission.CalendarMonth, utc(2027, 12, 31, 23, 59, 59, 999_999_999), utc(2027, 12, 1, 0, 0, 0, 0), 31},
		{admission.CalendarYear, utc(2028, 7, 1, 0, 0, 0, 0), utc(2028, 1, 1, 0, 0, 0, 0), 366},
		{admission.CalendarYear, utc(2100, 12, 31, 0, 0, 0, 0), utc(2100, 1, 1, 0, 0, 0, 0), 365},
		{admission.CalendarWeek, utc(2028, 1, 2, 23, 59, 59, 999_999_999), utc(2027, 12, 27, 0, 0, 0, 0), 7},
		{admission.CalendarWeek, utc(1970, 1, 5, 0, 0, 0, 0), utc(1970, 1, 5, 0, 0, 0, 0), 7},
		{admission.CalendarDay, utc(2028, 2, 29, 0, 0, 0, 0), utc(2028, 2, 29, 0, 0, 0, 0), 1},
	}
	for _, tc := range tests {
		start, end := quotaPeriod(tc.c, tc.at)
		if start != tc.start || end-start != tc.lengthDays*int64(day) {
			t.Errorf("%s at %v: model gives [%v, %v), want from %v for %d days", tc.c, time.Unix(0, tc.at).UTC(),
				time.Unix(0, start).UTC(), time.Unix(0, end).UTC(), time.Unix(0, tc.start).UTC(), tc.lengthDays)
		}
	}
}

// TestQuotaCalendarEdges spends a quota of 3 at each edge time and checks
// the exact wait until the next calendar period, that the period does not
// end a nanosecond early, and the next period's length.
func TestQuotaCalendarEdges(t *testing.T) {
	const h = time.Hour
	tests := []struct {
		name       string
		c          admission.Calendar
		at         int64
		retry      time.Duration // until the next period starts
		nextLength time.Duration
	}{
		{"day: Feb 28 of a leap year, last ns", admission.CalendarDay, utc(2028, 2, 28, 23, 59, 59, 999_999_999), 1, day},
		{"day: leap day noon", admission.CalendarDay, utc(2028, 2, 29, 12, 0, 0, 0), 12 * h, day},
		{"day: Dec 31 into a new year", admission.CalendarDay, utc(2027, 12, 31, 23, 59, 59, 999_999_999), 1, day},
		{"day: the epoch", admission.CalendarDay, 0, day, day},
		{"week: Sunday, last ns", admission.CalendarWeek, utc(2028, 1, 2, 23, 59, 59, 999_999_999), 1, 7 * day},
		{"week: Monday 00:00", admission.CalendarWeek, utc(2028, 1, 3, 0, 0, 0, 0), 7 * day, 7 * day},
		{"week: Friday Dec 31, week spans the year", admission.CalendarWeek, utc(2027, 12, 31, 12, 0, 0, 0), 2*day + 12*h, 7 * day},
		{"week: leap day, a Tuesday", admission.CalendarWeek, utc(2028, 2, 29, 0, 0, 0, 0), 6 * day, 7 * day},
		{"week: the epoch, a Thursday", admission.CalendarWeek, 0, 4 * day, 7 * day},
		{"month: leap day", admission.CalendarMonth, utc(2028, 2, 29, 0, 0, 0, 0), day, 31 * day},
		{"month: February of a leap year", admission.CalendarMonth, utc(2028, 2, 1, 0, 0, 0, 0), 29 * day, 31 * day},
		{"month: February of a common year", admission.CalendarMonth, utc(2027, 2, 1, 0, 0, 0, 0), 28 * day, 31 * day},
		{"month: 2100 is not a leap year", admission.CalendarMonth, utc(2100, 2, 1, 0, 0, 0, 0), 28 * day, 31 * day},
		{"month: 2000 is a leap year", admission.CalendarMonth, utc(2000, 2, 1, 0, 0, 0, 0), 29 * day, 31 * day},
		{"month: Jan 31, last ns, into February", admission.CalendarMonth, utc(2027, 1, 31, 23, 59, 59, 999_999_999), 1, 28 * day},
		{"month: Dec 31 into January", admission.CalendarMonth, utc(2027, 12, 31, 23, 0, 0, 0), h, 31 * day},
		{"month: Apr 30 into May", admission.CalendarMonth, utc(2028, 4, 30, 12, 0, 0, 0), 12 * h, 31 * day},
		{"year: last ns before a leap year", admission.CalendarYear, utc(2027, 12, 31, 23, 59, 59, 999_999_999), 1, 366 * day},
		{"year: a leap year from Jan 1", admission.CalendarYear, utc(2028, 1, 1, 0, 0, 0, 0), 366 * day, 365 * day},
		{"year: into 2100, not leap", admission.CalendarYear, utc(2099, 12, 31, 23, 59, 59, 999_999_999), 1, 365 * day},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			p := quotaPolicy(tc.c, 3)
			s, d := counterDecide(t, p, admission.State{}, 3, tc.at)
			wantDecision(t, d, admission.Decision{Allowed: true, Limit: 3, Remaining: 0, ResetAfter: tc.retry})
			next := tc.at + int64(tc.retry)
			if got := admission.ExpiresAt(p, s); got != next {
				t.Fatalf("ExpiresAt = %v, want %v", time.Unix(0, got).UTC(), time.Unix(0, next).UTC())
			}
			_, d = counterDecide(t, p, s, 1, tc.at)
			wantDecision(t, d, admission.Decision{Limit: 3, Remaining: 0, ResetAfter: tc.retry, RetryAfter: tc.retry})
			_, d = counterDecide(t, p, s, 1, next-1)
			wantDecision(t, d, admission.Decision{Limit: 3, Remaining: 0, ResetAfter: 1, RetryAfter: 1})
			s, d = counterDecide(t, p, s, 1, next)
			wantDecision(t, d, admission.Decision{Allowed: true, Limit: 3, Remaining: 2, ResetAfter: tc.nextLength})
			wantState(t, s, admission.KindQuota, next, 1)
		})
	}
}

// TestQuotaMatchesModel runs random quota policies and request sequences
// from 1970 to 2200 through admission.Decide and checks them against
// counterModel, with calendar periods from quotaPeriod.
func TestQuotaMatchesModel(t *testing.T) {
	iterations := 1000
	if testing.Short() {
		iterations = 100
	}
	cals := []admission.Calendar{admission.CalendarDay, admission.CalendarWeek, admission.CalendarMonth, admission.CalendarYear}
	var allows, denials int
	for iter := range iterations {
		r := rand.New(rand.NewPCG(uint64(iter), 0x9007a))
		p := quotaPolicy(cals[r.IntN(len(cals))], 1+r.Int64N(pow10(r.IntN(13)))) // 1..1e12
		p.Name = "prop-quota"
		setCounterCaps(r, &p)
		window := func(now int64) (int64, int64) { return quotaPeriod(p.Calendar, now) }
		a, d := runCounterSequence(t, r, p, window, r.Int64N(horizon2200), iter)
		allows += a
		denials += d
	}
	if total := allows + denials; allows < total/10 || denials < total/10 {
		t.Errorf("unbalanced workload: %d allowed, %d denied", allows, denials)
	}
	t.Logf("%d iterations: %d allowed, %d denied", iterations, allows, denials)
}

func TestQuotaLargeLimit(t *testing.T) {
	p := quotaPolicy(admission.CalendarMonth, 1e12) // e.g. tokens per month
	now := utc(2030, 6, 15, 0, 0, 0, 0)
	s, d := counterDecide(t, p, admission.State{}, 1e12-1, now)
	wantDecision(t, d, admission.Decision{Allowed: true, Limit: 1e12, Remaining: 1, ResetAfter: 16 * day})
	_, d = counterDecide(t, p, s, 1e12, now)
	wantDecision(t, d, admission.Decision{Limit: 1e12, Remaining: 1, ResetAfter: 16 * day, RetryAfter: 16 * day})
	_, d = counterDecide(t, p, s, 1, now)
	wantDecision(t, d, admission.Decision{Allowed: true, Limit: 1e12, Remaining: 0, ResetAfter: 16 * day})
}

func TestQuotaTotalAndFailClosed(t *testing.T) {
	p := quotaPolicy(admission.CalendarDay, 5)
	year := quotaPolicy(admission.CalendarYear, 5)
	now := utc(2030, 6, 15, 12, 0, 0, 0)
	lastDay := utc(2262, 4, 10, 0, 0, 0, 0) // 2262-04-11 ends after math.MaxInt64
	never := admission.NeverRetry
	tests := []struct {
		name string
		p    admission.Policy
		s    admission.State
		cost int64
		now  int64
		want admission.Decision
	}{
		{"cost above limit", p, admission.State{}, 6, now, admission.Decision{Limit: 5, Remaining: 5, ResetAfter: 12 * time.Hour, RetryAfter: never}},
		{"cost 0", p, admission.State{}, 0, now, admission.Decision{Limit: 5, Remaining: 5, ResetAfter: 12 * time.Hour, RetryAfter: never}},
		{"cost MinInt64", p, admission.State{}, math.MinInt64, now, admission.Decision{Limit: 5, Remaining: 5, ResetAfter: 12 * time.Hour, RetryAfter: never}},
		{"invalid calendar", quotaPolicy("fortnight", 5), admission.State{}, 1, now, admission.Decision{RetryAfter: never}},
		{"invalid: period set", admission.Policy{Name: "q", Algorithm: "quota", Limit: 5, Calendar: "day", Period: day}, admission.State{}, 1, now, admission.Decision{RetryAfter: never}},
		{"day ending past MaxInt64", p, admission.State{}, 1, math.MaxInt64, admission.Decision{Limit: 5, RetryAfter: never}},
		{"day starting before MinInt64", p, admission.State{}, 1, math.MinInt64, admission.Decision{Limit: 5, RetryAfter: never}},
		{"last day that fits", p, admission.State{}, 1, lastDay, admission.Decision{Allowed: true, Limit: 5, Remaining: 4, ResetAfter: day}},
		{"full last day: the next does not fit", p, admission.State{Kind: admission.KindQuota, Start: lastDay, Count: 5}, 1, lastDay,
			admission.Decision{Limit: 5, ResetAfter: day, RetryAfter: never}},
		{"full year 2261: 2262 does not fit", year, admission.State{Kind: admission.KindQuota, Start: utc(2261, 1, 1, 0, 0, 0, 0), Count: 5}, 1, utc(2261, 12, 31, 0, 0, 0, 0),
			admission.Decision{Limit: 5, ResetAfter: day, RetryAfter: never}},
		{"before the epoch", p, admission.State{}, 1, -1, admission.Decision{Allowed: true, Limit: 5, Remaining: 4, ResetAfter: 1}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			s, d := admission.Decide(tc.p, tc.s, tc.cost, tc.now)
			wantDecision(t, d, tc.want)
			if !d.Allowed && !reflect.DeepEqual(s, tc.s) {
				t.Errorf("denial changed the state: %+v, was %+v", s, tc.s)
			}
		})
	}
}

func TestQuotaGenericDispatch(t *testing.T) {
	p := quotaPolicy(admission.CalendarMonth, 10)
	feb := utc(2028, 2, 1, 0, 0, 0, 0)
	now := utc(2028, 2, 29, 18, 0, 0, 0)
	// A fixed-window state counts as a new key under quota, and the reverse.
	fw := admission.State{Kind: admission.KindFixedWindow, Start: feb, Count: 10}
	if got := admission.ExpiresAt(p, fw); got != 0 {
		t.Errorf("ExpiresAt of a fixed-window state = %d, want 0", got)
	}
	s, d := counterDecide(t, p, fw, 4, now)
	wantDecision(t, d, admission.Decision{Allowed: true, Limit: 10, Remaining: 6, ResetAfter: 6 * time.Hour})
	wantState(t, s, admission.KindQuota, feb, 4)
	if _, d := counterDecide(t, fwPolicy(10, time.Minute), s, 10, now); !d.Allowed {
		t.Errorf("fixed window on a quota state: %+v, want a new key", d)
	}

	peeks := []struct {
		name string
		s    admission.State
		now  int64
		want admission.Decision
	}{
		{"new key", admission.State{}, now, admission.Decision{Allowed: true, Limit: 10, Remaining: 10}},
		{"4 spent", s, now, admission.Decision{Allowed: true, Limit: 10, Remaining: 6, ResetAfter: 6 * time.Hour}},
		{"all spent", admission.State{Kind: admission.KindQuota, Start: feb, Count: 10}, now,
			admission.Decision{Limit: 10, ResetAfter: 6 * time.Hour, RetryAfter: 6 * time.Hour}},
		{"last month's state", s, utc(2028, 3, 1, 0, 0, 0, 0), admission.Decision{Allowed: true, Limit: 10, Remaining: 10}},
		{"not a month start (a day quota's state)", admission.State{Kind: admission.KindQuota, Start: utc(2028, 2, 29, 0, 0, 0, 0), Count: 10}, now,
			admission.Decision{Allowed: true, Limit: 10, Remaining: 10}},
	}
	for _, tc := range peeks {
		if got := admission.Peek(p, tc.s, tc.now); got != tc.want {
			t.Errorf("%s: Peek = %+v\n want %+v", tc.name, got, tc.want)
		}
	}

	expiries := []struct {
		name string
		p    admission.Policy
		s    admission.State
		want int64
	}{
		{"end of February", p, s, utc(2028, 3, 1, 0, 0, 0, 0)},
		{"same state, yearly", quotaPolicy(admission.CalendarYear, 10), s, 0}, // Feb 1 is no year start
		{"same state, weekly", quotaPolicy(admission.CalendarWeek, 10), s, 0}, // 2028-02-01 is a Tuesday
		{"same state, daily", quotaPolicy(admission.CalendarDay, 10), s, utc(2028, 2, 2, 0, 0, 0, 0)},
		{"no units", p, admission.State{Kind: admission.KindQuota, Start: feb}, 0},
		{"period ending past MaxInt64", p, admission.State{Kind: admission.KindQuota, Start: utc(2262, 4, 1, 0, 0, 0, 0), Count: 1}, 0},
		{"invalid policy", quotaPolicy("", 10), s, 0},
	}
	for _, tc := range expiries {
		if got := admission.ExpiresAt(tc.p, tc.s); got != tc.want {
			t.Errorf("%s: ExpiresAt = %d, want %d", tc.name, got, tc.want)
		}
	}
}

func TestQuotaValidate(t *testing.T) {
	ok := func(edit func(p *admission.Policy)) admission.Policy {
		p := quotaPolicy(admission.CalendarMonth, 1000)
		edit(&p)
		return p
	}
	for name, p := range map[string]admission.Policy{
		"reports-monthly":         ok(func(*admission.Policy) {}),
		"day":                     ok(func(p *admission.Policy) { p.Calendar = admission.CalendarDay }),
		"week":                    ok(func(p *admission.Policy) { p.Calendar = admission.CalendarWeek }),
		"year":                    ok(func(p *admission.Policy) { p.Calendar = admission.CalendarYear }),
		"limit 1":                 ok(func(p *admission.Policy) { p.Limit = 1 }),
		"limit 1e12":              ok(func(p *admission.Policy) { p.Limit, p.MaxCost = 1e12, 1e12 }),
		"burst equal to limit":    ok(func(p *admission.Policy) { p.Burst = 1000 }),
		"max_cost 1":              ok(func(p *admission.Policy) { p.MaxCost = 1 }),
		"max_cost equal to limit": ok(func(p *admission.Policy) { p.MaxCost = 1000 }),
	} {
		if err := p.Validate(); err != nil {
			t.Errorf("%s: Validate(%+v) = %v, want nil", name, p, err)
		}
	}
	tests := []struct {
		name  string
		p     admission.Policy
		field string
	}{
		{"calendar unset", ok(func(p *admission.Policy) { p.Calendar = "" }), "calendar"},
		{"calendar unknown", ok(func(p *admission.Policy) { p.Calendar = "fortnight" }), "calendar"},
		{"calendar in wrong case", ok(func(p *admission.Policy) { p.Calendar = "Month" }), "calendar"},
		{"limit 0", ok(func(p *admission.Policy) { p.Limit = 0 }), "limit"},
		{"limit negative", ok(func(p *admission.Policy) { p.Limit = -1 }), "limit"},
		{"limit above 1e12", ok(func(p *admission.Policy) { p.Limit = 1e12 + 1 }), "limit"},
		{"limit MaxInt64", ok(func(p *admission.Policy) { p.Limit = math.MaxInt64 }), "limit"},
		{"period set", ok(func(p *admission.Policy) { p.Period = 30 * day }), "period"},
		{"period negative", ok(func(p *admission.Policy) { p.Period = -1 }), "period"},
		{"burst below limit", ok(func(p *admission.Policy) { p.Burst = 10 }), "burst"},
		{"burst above limit", ok(func(p *admission.Policy) { p.Burst = 1001 }), "burst"},
		{"max_cost above limit", ok(func(p *admission.Policy) { p.MaxCost = 1001 }), "max_cost"},
		{"max_cost negative", ok(func(p *admission.Policy) { p.MaxCost = -1 }), "max_cost"},
		{"first problem wins: calendar before limit", ok(func(p *admission.Policy) { p.Calendar, p.Limit = "", 0 }), "calendar"},
		{"first problem wins: limit before period", ok(func(p *admission.Policy) { p.Limit, p.Period = 0, day }), "limit"},
		{"first problem wins: period before burst", ok(func(p *admission.Policy) { p.Period, p.Burst = day, 5 }), "period"},
		{"first problem wins: burst before max_cost", ok(func(p *admission.Policy) { p.Burst, p.MaxCost = 5, 5000 }), "burst"},
		{"first problem wins: name before calendar", ok(func(p *admission.Policy) { p.Name, p.Calendar = "", "" }), "name"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			err := tc.p.Validate()
			wantFieldError(t, err, tc.field, admission.ErrInvalidPolicy)
			t.Log(err)
		})
	}
}

func BenchmarkDecideQuota(b *testing.B) {
	p := quotaPolicy(admission.CalendarMonth, 100_000)
	if err := p.Validate(); err != nil {
		b.Fatal(err)
	}
	var s admission.State
	now := t0
	allowed := 0
	for b.Loop() {
		var d admission.Decision
		s, d = admission.Decide(p, s, 1, now)
		if d.Allowed {
			allowed++
		}
		now += int64(13 * time.Second) // ~200k requests per month: about half are denied
	}
	if b.N > 1000 && allowed == 0 {
		b.Fatal("nothing allowed")
	}
}
