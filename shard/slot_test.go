package shard

import (
	"fmt"
	"testing"

	"github.com/quorate/quorate/admission"
)

// keyFamilies are the sequential key shapes the hash must spread: counters,
// user IDs and IPv4 addresses (10.0.0.0, 10.0.0.1, … 10.0.39.15 for 10k).
var keyFamilies = []struct {
	name string
	key  func(i int) string
}{
	{"key-%d", func(i int) string { return fmt.Sprintf("key-%d", i) }},
	{"user:%d", func(i int) string { return fmt.Sprintf("user:%d", i) }},
	{"10.%d.%d.%d", func(i int) string { return fmt.Sprintf("10.%d.%d.%d", i>>16, i>>8&255, i&255) }},
}

// shares returns the fraction of n keys of family key that bucket sends to
// each of buckets buckets; it fails t if bucket answers outside 0..buckets-1.
func shares(tb testing.TB, n, buckets int, key func(int) string, bucket func(string) int) []float64 {
	tb.Helper()
	counts := make([]int, buckets)
	for i := range n {
		b := bucket(key(i))
		if b < 0 || b >= buckets {
			tb.Fatalf("key %q went to bucket %d of %d", key(i), b, buckets)
		}
		counts[b]++
	}
	out := make([]float64, buckets)
	for i, c := range counts {
		out[i] = float64(c) / float64(n)
	}
	return out
}

// checkShares fails t for every share farther than tol from want, and logs
// them all as percentages.
func checkShares(tb testing.TB, what string, got []float64, want, tol float64) {
	tb.Helper()
	line := ""
	for i, s := range got {
		line += fmt.Sprintf(" %.2f%%", 100*s)
		if s < want-tol || s > want+tol {
			tb.Errorf("%s: bucket %d got %.2f%%, want %.2f%% ± %.2f", what, i, 100*s, 100*want, 100*tol)
		}
	}
	tb.Logf("%s:%s", what, line)
}

func sliceOfThird(key string) int { return int(SlotOf(key)) * 3 / SlotCount }

// Sequential keys spread evenly over 3 equal thirds of the slot space: each
// third gets 33.3% ± 5 percentage points of 10k keys (the bar;
// Gubernator's FNV ring gives 37/43/20%). One standard deviation of a
// uniform hash is 0.47 points here, so the bar is generous: it catches a
// broken hash or slot function, not bad luck.
func TestSequentialKeysSpreadEvenly(t *testing.T) {
	for _, f := range keyFamilies {
		checkShares(t, f.name+" over slot thirds", shares(t, 10000, 3, f.key, sliceOfThird), 1.0/3, 0.05)
	}
}

// The same keys spread over the 8 groups of InitialMap(3 nodes, 8 groups):
// 12.5% ± 2 percentage points each (about 6 standard deviations of a uniform
// hash, 0.33 points, and 16% relative: tight enough that one group taking a
// fifth of the keys, or an off-by-one in the range split, fails).
func TestSequentialKeysSpreadOverGroups(t *testing.T) {
	m, err := InitialMap([]string{"n1", "n2", "n3"}, 8, 3)
	if err != nil {
		t.Fatal(err)
	}
	group := func(key string) int {
		g, _, ok := m.Lookup(SlotOf(key))
		if !ok {
			t.Fatalf("no group for key %q", key)
		}
		return int(g) - 1
	}
	for _, f := range keyFamilies {
		checkShares(t, f.name+" over 8 groups", shares(t, 10000, 8, f.key, group), 1.0/8, 0.02)
	}
}

// A chi-square test of 100k keys of each family over 64 equal slot buckets.
// With 63 degrees of freedom a uniform hash exceeds 103.4 with probability
// 0.001; the keys are fixed, so this is a bar the hash clears once and for all.
func TestSlotChiSquare(t *testing.T) {
	const n, buckets, critical = 100000, 64, 103.4
	for _, f := range keyFamilies {
		counts := make([]int, buckets)
		for i := range n {
			counts[int(SlotOf(f.key(i)))*buckets/SlotCount]++
		}
		chi, exp := 0.0, float64(n)/buckets
		for _, c := range counts {
			chi += (float64(c) - exp) * (float64(c) - exp) / exp
		}
		t.Logf("%s: chi-square %.1f over %d buckets (critical %.1f)", f.name, chi, buckets, critical)
		if chi > critical {
			t.Errorf("%s: chi-square %.1f > %.1f: slots are not uniform", f.name, chi, critical)
		}
	}
}

// The spread check is not vacuous: a slot function that is a poor hash of
// sequential keys (the sum of their bytes) fails it.
func TestSpreadCheckRejectsPoorHash(t *testing.T) {
	byteSum := func(key string) int {
		s := 0
		for i := range len(key) {
			s += int(key[i])
		}
		return s % SlotCount * 3 / SlotCount
	}
	got := shares(t, 10000, 3, keyFamilies[0].key, byteSum)
	var rec recorder
	checkShares(&rec, "byte sum", got, 1.0/3, 0.05)
	if !rec.failed {
		t.Fatalf("spread check passed a byte-sum slot function: %v", got)
	}
}

// recorder is a testing.TB that records failure instead of failing.
type recorder struct {
	testing.TB
	failed bool
}

func (r *recorder) Helper()               {}
func (r *recorder) Errorf(string, ...any) { r.failed = true }
func (r *recorder) Logf(string, ...any)   {}

func TestSlotsInRange(t *testing.T) {
	for i := range 100000 {
		if s := SlotOf(fmt.Sprintf("k%d", i)); s >= SlotCount {
			t.Fatalf("SlotOf(k%d) = %d, beyond the last slot", i, s)
		}
	}
}

func TestSlotRange(t *testing.T) {
	all := AllSlots()
	if all.Len() != SlotCount || !all.Contains(0) || !all.Contains(SlotCount-1) || all.Validate() != nil {
		t.Fatalf("AllSlots() = %v: Len %d, Validate %v", all, all.Len(), all.Validate())
	}
	one := SlotRange{7, 8}
	if one.Len() != 1 || !one.Contains(7) || one.Contains(6) || one.Contains(8) || one.String() != "[7,8)" {
		t.Fatalf("%v: Len %d", one, one.Len())
	}
	for _, c := range []struct {
		r     SlotRange
		field string
	}{
		{SlotRange{5, 5}, "Start"},
		{SlotRange{6, 5}, "Start"},
		{SlotRange{0, SlotCount + 1}, "End"},
	} {
		if c.r.Len() != 0 && c.field == "Start" {
			t.Errorf("%v: Len %d, want 0", c.r, c.r.Len())
		}
		wantField(t, c.r.Validate(), c.field)
	}
}

// wantField fails t unless err is an *admission.FieldError naming field.
func wantField(tb testing.TB, err error, field string) *admission.FieldError {
	tb.Helper()
	fe, ok := err.(*admission.FieldError)
	if !ok {
		tb.Errorf("error %v (%T), want an *admission.FieldError naming %s", err, err, field)
		return nil
	}
	if fe.Field != field {
		tb.Errorf("error %q names %s, want %s", err, fe.Field, field)
	}
	return fe
}

// TestErrorText checks that shard's errors read "shard: <field>: <problem>"
// and keep their prefix when a plan places them under "m.".
func TestErrorText(t *testing.T) {
	err := SlotRange{Start: 5, End: 5}.Validate()
	if want := "shard: Start: is 5, want less than End 5 (ranges are half-open and non-empty)"; err == nil || err.Error() != want {
		t.Errorf("Validate: %v, want %s", err, want)
	}
	var m Map
	_, err = m.MoveSlots(SlotRange{Start: 0, End: 1}, 1)
	if want := "shard: m.Epoch: is 0, want at least 1"; err == nil || err.Error() != want {
		t.Errorf("MoveSlots on an empty map: %v, want %s", err, want)
	}
}

func BenchmarkSlotOf(b *testing.B) {
	for _, key := range []string{"user:12345", "{tenant:acme}:ip:10.0.0.1", "api/route:/v1/reports/monthly-summary:user:12345"} {
		b.Run(fmt.Sprintf("len%d", len(key)), func(b *testing.B) {
			var sink Slot
			for b.Loop() {
				sink ^= SlotOf(key)
			}
			_ = sink
		})
	}
}
