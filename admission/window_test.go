package admission

import (
	"testing"
	"time"
)

func TestWindow(t *testing.T) {
	day := 24 * time.Hour
	at := func(s string) int64 {
		tm, err := time.Parse(time.RFC3339, s)
		if err != nil {
			t.Fatal(err)
		}
		return tm.UnixNano()
	}
	for _, tc := range []struct {
		p    Policy
		now  int64
		want time.Duration
	}{
		{Policy{Algorithm: AlgorithmTokenBucket, Period: time.Minute}, 0, time.Minute},
		{Policy{Algorithm: AlgorithmFixedWindow, Period: 10 * time.Second}, 0, 10 * time.Second},
		{Policy{Algorithm: AlgorithmSlidingWindow, Period: time.Hour}, 0, time.Hour},
		{Policy{Algorithm: AlgorithmSlidingLog, Period: time.Second}, 0, time.Second},
		{Policy{Algorithm: AlgorithmConcurrency}, at("2024-02-10T12:00:00Z"), 0},
		{Policy{Algorithm: AlgorithmQuota, Calendar: CalendarDay}, at("2024-02-10T12:00:00Z"), day},
		{Policy{Algorithm: AlgorithmQuota, Calendar: CalendarWeek}, at("2024-02-11T23:59:59Z"), 7 * day},
		{Policy{Algorithm: AlgorithmQuota, Calendar: CalendarMonth}, at("2024-02-10T12:00:00Z"), 29 * day},
		{Policy{Algorithm: AlgorithmQuota, Calendar: CalendarMonth}, at("2023-02-28T23:59:59Z"), 28 * day},
		{Policy{Algorithm: AlgorithmQuota, Calendar: CalendarMonth}, at("2024-03-01T00:00:00Z"), 31 * day},
		{Policy{Algorithm: AlgorithmQuota, Calendar: CalendarYear}, at("2024-07-01T00:00:00Z"), 366 * day},
		{Policy{Algorithm: AlgorithmQuota, Calendar: CalendarYear}, at("2025-07-01T00:00:00Z"), 365 * day},
		{Policy{Algorithm: AlgorithmQuota, Calendar: "fortnight"}, 0, 0},
	} {
		if got := tc.p.Window(tc.now); got != tc.want {
			t.Errorf("%s %s at %v: %v, want %v", tc.p.Algorithm, tc.p.Calendar, time.Unix(0, tc.now).UTC(), got, tc.want)
		}
	}
}
