package dedupe_test

import (
	"bytes"
	"cmp"
	"errors"
	"fmt"
	"slices"
	"testing"

	"github.com/quorate/quorate/dedupe"
)

// t0 is an arbitrary logged time, Unix nanoseconds.
const t0 = int64(1_700_000_000_000_000_000)

func entry(caller, rid string, expiresAt int64, result string) dedupe.Entry {
	e := dedupe.Entry{
		Key:       dedupe.Key{Caller: caller, RequestID: rid},
		Result:    []byte(result),
		ExpiresAt: expiresAt,
	}
	copy(e.Fingerprint[:], caller+"|"+rid+"|"+result)
	return e
}

func sameEntry(a, b dedupe.Entry) bool {
	return a.Key == b.Key && a.Fingerprint == b.Fingerprint && a.ExpiresAt == b.ExpiresAt && bytes.Equal(a.Result, b.Result)
}

func mustPut(tb testing.TB, t *dedupe.Table, e dedupe.Entry, now int64) {
	tb.Helper()
	if err := t.Put(e, now); err != nil {
		tb.Fatalf("Put(%+v, %d): %v", e.Key, now, err)
	}
}

// mustGet expects k present at now, holding want.
func mustGet(tb testing.TB, t *dedupe.Table, want dedupe.Entry, now int64) {
	tb.Helper()
	got, ok := t.Get(want.Key, now)
	if !ok {
		tb.Fatalf("Get(%+v, %d): absent, want %+v", want.Key, now, want)
	}
	if !sameEntry(got, want) {
		tb.Fatalf("Get(%+v, %d) = %+v, want %+v", want.Key, now, got, want)
	}
}

func mustAbsent(tb testing.TB, t *dedupe.Table, k dedupe.Key, now int64) {
	tb.Helper()
	if got, ok := t.Get(k, now); ok {
		tb.Fatalf("Get(%+v, %d) = %+v, want absent", k, now, got)
	}
}

// keys returns the keys t holds (expired ones included), sorted.
func keys(tb testing.TB, t *dedupe.Table) []dedupe.Key {
	tb.Helper()
	var out []dedupe.Key
	for _, e := range t.Freeze().Entries() {
		out = append(out, e.Key)
	}
	slices.SortFunc(out, func(a, b dedupe.Key) int {
		return cmp.Or(cmp.Compare(a.Caller, b.Caller), cmp.Compare(a.RequestID, b.RequestID))
	})
	if len(out) != t.Len() {
		tb.Fatalf("Freeze().Entries() has %d entries, Len() %d", len(out), t.Len())
	}
	return out
}

// overhead is the fixed estimated size of one entry: the Bytes of a table
// holding one entry with empty strings and result.
func overhead(tb testing.TB) int64 {
	tb.Helper()
	t := dedupe.New(1)
	mustPut(tb, t, dedupe.Entry{ExpiresAt: t0 + 1}, t0)
	if t.Bytes() <= 0 {
		tb.Fatalf("Bytes of one empty entry = %d, want > 0", t.Bytes())
	}
	return t.Bytes()
}

// estimate is the Bytes that a table holding es should report.
func estimate(tb testing.TB, es ...dedupe.Entry) int64 {
	tb.Helper()
	per := overhead(tb)
	var n int64
	for _, e := range es {
		n += per + int64(len(e.Key.Caller)+len(e.Key.RequestID)+len(e.Result))
	}
	return n
}

func TestGetPut(t *testing.T) {
	tab := dedupe.New(10)
	a := entry("svc", "r1", t0+100, "first")
	mustAbsent(t, tab, a.Key, t0)
	mustPut(t, tab, a, t0)
	mustGet(t, tab, a, t0)
	mustGet(t, tab, a, t0+99)
	mustAbsent(t, tab, dedupe.Key{Caller: "svc", RequestID: "r2"}, t0)
	mustAbsent(t, tab, dedupe.Key{Caller: "other", RequestID: "r1"}, t0)
	mustAbsent(t, tab, dedupe.Key{Caller: "", RequestID: "svcr1"}, t0)
	// Expired is absent at ExpiresAt and after, though nothing swept it.
	mustAbsent(t, tab, a.Key, t0+100)
	mustAbsent(t, tab, a.Key, t0+1_000_000)
	if tab.Len() != 1 {
		t.Fatalf("Len %d, want 1 (expired, not swept)", tab.Len())
	}
	// Time is an argument, not state: an earlier now still sees it.
	mustGet(t, tab, a, t0+50)

	// Put on an unexpired key fails and keeps the first entry.
	b := entry("svc", "r1", t0+500, "second")
	for _, now := range []int64{t0, t0 + 99} {
		if err := tab.Put(b, now); !errors.Is(err, dedupe.ErrExists) {
			t.Fatalf("Put over an unexpired entry at %d: %v, want ErrExists", now, err)
		} else if errors.Is(err, dedupe.ErrFull) {
			t.Fatalf("Put over an unexpired entry: %v also wraps ErrFull", err)
		}
		mustGet(t, tab, a, t0+50)
	}
	if tab.Len() != 1 || tab.Bytes() != estimate(t, a) {
		t.Fatalf("after refused Puts: Len %d Bytes %d, want 1 and %d", tab.Len(), tab.Bytes(), estimate(t, a))
	}

	// Put on an expired key replaces it.
	mustPut(t, tab, b, t0+100)
	mustGet(t, tab, b, t0+100)
	mustGet(t, tab, b, t0+499)
	mustAbsent(t, tab, b.Key, t0+500)
	if tab.Len() != 1 || tab.Bytes() != estimate(t, b) {
		t.Fatalf("after replacing: Len %d Bytes %d, want 1 and %d", tab.Len(), tab.Bytes(), estimate(t, b))
	}
	if next, ok := tab.NextExpiry(); !ok || next != t0+500 {
		t.Fatalf("NextExpiry = %d %v, want %d true", next, ok, t0+500)
	}
}

func TestBound(t *testing.T) {
	tab := dedupe.New(3)
	if tab.MaxEntries() != 3 {
		t.Fatalf("MaxEntries %d, want 3", tab.MaxEntries())
	}
	es := []dedupe.Entry{
		entry("c", "a", t0+10, "ra"),
		entry("c", "b", t0+20, "rb-longer"),
		entry("d", "a", t0+30, "rc"),
	}
	for i, e := range es {
		mustPut(t, tab, e, t0)
		if tab.Len() != i+1 || tab.Bytes() != estimate(t, es[:i+1]...) {
			t.Fatalf("after %d Puts: Len %d Bytes %d, want %d and %d", i+1, tab.Len(), tab.Bytes(), i+1, estimate(t, es[:i+1]...))
		}
	}
	fourth := entry("c", "z", t0+40, "rz")
	for _, now := range []int64{t0, t0 + 9} {
		err := tab.Put(fourth, now)
		if !errors.Is(err, dedupe.ErrFull) || errors.Is(err, dedupe.ErrExists) {
			t.Fatalf("4th Put at %d: %v, want ErrFull only", now, err)
		}
		for _, e := range es {
			mustGet(t, tab, e, now)
		}
		mustAbsent(t, tab, fourth.Key, now)
		if tab.Len() != 3 || tab.Bytes() != estimate(t, es...) {
			t.Fatalf("refused Put changed Len %d / Bytes %d", tab.Len(), tab.Bytes())
		}
	}
	// At t0+10 the first entry has expired (not swept): the 4th Put
	// reclaims exactly it.
	mustPut(t, tab, fourth, t0+10)
	want := []dedupe.Entry{es[1], es[2], fourth}
	if got := keys(t, tab); !slices.Equal(got, []dedupe.Key{es[1].Key, fourth.Key, es[2].Key}) {
		t.Fatalf("after reclaiming: keys %v", got)
	}
	for _, e := range want {
		mustGet(t, tab, e, t0+10)
	}
	if tab.Bytes() != estimate(t, want...) {
		t.Fatalf("Bytes %d, want %d", tab.Bytes(), estimate(t, want...))
	}
	// Full again, nothing expired.
	if err := tab.Put(entry("e", "e", t0+50, ""), t0+10); !errors.Is(err, dedupe.ErrFull) {
		t.Fatalf("Put into a full table: %v, want ErrFull", err)
	}
	// A replacement of an expired key in a full table needs no room.
	mustPut(t, tab, entry("c", "b", t0+60, "again"), t0+20)
	if tab.Len() != 3 {
		t.Fatalf("Len %d after replacing an expired key, want 3", tab.Len())
	}

	if n := tab.Sweep(t0+1000, 100); n != 3 {
		t.Fatalf("Sweep removed %d, want 3", n)
	}
	if tab.Len() != 0 || tab.Bytes() != 0 {
		t.Fatalf("after sweeping everything: Len %d Bytes %d, want 0 0", tab.Len(), tab.Bytes())
	}
	if _, ok := tab.NextExpiry(); ok {
		t.Fatal("NextExpiry of an empty table reports an expiry")
	}
	if got := dedupe.New(0).MaxEntries(); got != 1 {
		t.Fatalf("New(0).MaxEntries() = %d, want 1", got)
	}
}

// sweepFixture has entries with tied and distinct expiries, keys chosen so
// that (Caller, RequestID) order differs from both insertion orders and
// from concatenated-string order.
func sweepFixture() []dedupe.Entry {
	var es []dedupe.Entry
	callers := []string{"b", "a", "ab", "", "a\x00"}
	for i := range 60 {
		c := callers[i%len(callers)]
		rid := fmt.Sprintf("r%d", (i*7)%23)
		if i%5 == 2 {
			rid = "b" + rid
		}
		es = append(es, entry(c, rid, t0+int64(10*(i%4)), fmt.Sprint(i)))
	}
	// Drop duplicate keys, keep the first.
	seen := map[dedupe.Key]bool{}
	out := es[:0]
	for _, e := range es {
		if !seen[e.Key] {
			seen[e.Key] = true
			out = append(out, e)
		}
	}
	return out
}

// sweepOrder is the order Sweep must remove es in.
func sweepOrder(es []dedupe.Entry) []dedupe.Key {
	s := slices.Clone(es)
	slices.SortFunc(s, func(a, b dedupe.Entry) int {
		return cmp.Or(cmp.Compare(a.ExpiresAt, b.ExpiresAt),
			cmp.Compare(a.Key.Caller, b.Key.Caller), cmp.Compare(a.Key.RequestID, b.Key.RequestID))
	})
	out := make([]dedupe.Key, len(s))
	for i, e := range s {
		out[i] = e.Key
	}
	return out
}

// sweepTrace sweeps t one entry at a time at each of nows and returns the
// keys in the order they were removed.
func sweepTrace(tb testing.TB, t *dedupe.Table, nows ...int64) []dedupe.Key {
	tb.Helper()
	var out []dedupe.Key
	for _, now := range nows {
		for {
			before := keys(tb, t)
			n := t.Sweep(now, 1)
			after := keys(tb, t)
			if n == 0 {
				if len(after) != len(before) {
					tb.Fatal("Sweep reported 0 but removed entries")
				}
				break
			}
			if n != 1 || len(after) != len(before)-1 {
				tb.Fatalf("Sweep(%d, 1) = %d, Len %d → %d", now, n, len(before), len(after))
			}
			for i, k := range before {
				if i == len(after) || after[i] != k {
					out = append(out, k)
					break
				}
			}
		}
	}
	return out
}

func TestSweepOrder(t *testing.T) {
	es := sweepFixture()
	want := sweepOrder(es)
	reversed := slices.Clone(es)
	slices.Reverse(reversed)
	interleaved := make([]dedupe.Entry, 0, len(es))
	for i := range es {
		interleaved = append(interleaved, es[(i*17)%len(es)])
	}
	if len(interleaved) != len(es) || len(es) < 40 {
		t.Fatalf("fixture: %d entries", len(es))
	}

	build := map[string]func() *dedupe.Table{}
	for name, order := range map[string][]dedupe.Entry{"forward": es, "reversed": reversed, "interleaved": interleaved} {
		build["put/"+name] = func() *dedupe.Table {
			tab := dedupe.New(len(order))
			for _, e := range order {
				mustPut(t, tab, e, t0-1)
			}
			return tab
		}
		build["restore/"+name] = func() *dedupe.Table {
			tab := dedupe.New(1)
			for _, e := range order {
				tab.Restore(e)
			}
			return tab
		}
	}
	// A replica restored from the snapshot of one that already swept a
	// few (its heap churned, Entries in map order).
	build["restore/from-entries"] = func() *dedupe.Table {
		src := build["put/interleaved"]()
		if n := src.Sweep(t0, 3); n != 3 {
			t.Fatalf("Sweep removed %d, want 3", n)
		}
		tab := dedupe.New(1)
		for _, e := range src.Freeze().Entries() {
			tab.Restore(e)
		}
		return tab
	}

	nows := []int64{t0 - 1, t0, t0 + 5, t0 + 10, t0 + 29, t0 + 30, t0 + 1000}
	for name, mk := range build {
		tab := mk()
		trace := sweepTrace(t, tab, nows...)
		w := want
		if name == "restore/from-entries" {
			w = want[3:]
		}
		if !slices.Equal(trace, w) {
			t.Errorf("%s: swept %v, want %v", name, trace, w)
		}
		if tab.Len() != 0 || tab.Bytes() != 0 {
			t.Errorf("%s: Len %d Bytes %d after sweeping all", name, tab.Len(), tab.Bytes())
		}
	}

	// Batches: at most limit, only ExpiresAt ≤ now, smallest first.
	tab := build["put/reversed"]()
	expiredAt := func(now int64) int {
		n := 0
		for _, e := range es {
			if e.ExpiresAt <= now {
				n++
			}
		}
		return n
	}
	if n := tab.Sweep(t0-1, 100); n != 0 {
		t.Fatalf("Sweep before any expiry removed %d", n)
	}
	if n := tab.Sweep(t0+10, 0); n != 0 {
		t.Fatalf("Sweep with limit 0 removed %d", n)
	}
	removed := 0
	for _, step := range []struct {
		now   int64
		limit int
	}{{t0, 4}, {t0, 4}, {t0 + 10, 7}, {t0 + 10, 100}, {t0 + 25, 100}, {t0 + 30, 1}, {t0 + 30, 2}, {t0 + 100, 1000}} {
		n := tab.Sweep(step.now, step.limit)
		wantN := min(step.limit, expiredAt(step.now)-removed)
		if n != wantN {
			t.Fatalf("Sweep(%d, %d) = %d, want %d", step.now-t0, step.limit, n, wantN)
		}
		removed += n
		if got := keys(t, tab); !slices.Equal(got, sortedKeys(want[removed:])) {
			t.Fatalf("after Sweep(%d, %d): the wrong entries remain", step.now-t0, step.limit)
		}
		if next, ok := tab.NextExpiry(); ok != (removed < len(es)) || (ok && next != expiry(es, want[removed])) {
			t.Fatalf("NextExpiry = %d %v after removing %d", next, ok, removed)
		}
	}
}

func sortedKeys(ks []dedupe.Key) []dedupe.Key {
	s := slices.Clone(ks)
	slices.SortFunc(s, func(a, b dedupe.Key) int {
		return cmp.Or(cmp.Compare(a.Caller, b.Caller), cmp.Compare(a.RequestID, b.RequestID))
	})
	return s
}

func expiry(es []dedupe.Entry, k dedupe.Key) int64 {
	for _, e := range es {
		if e.Key == k {
			return e.ExpiresAt
		}
	}
	panic("no such key")
}

// TestEntriesAreCopies checks that Entries and Get return values that do
// not alias the table's bookkeeping: editing them changes nothing.
func TestEntriesAreCopies(t *testing.T) {
	tab := dedupe.New(4)
	e := entry("c", "r", t0+10, "res")
	mustPut(t, tab, e, t0)
	got := tab.Freeze().Entries()
	got[0].ExpiresAt = t0 + 1_000
	got[0].Key.RequestID = "other"
	g, _ := tab.Get(e.Key, t0)
	g.ExpiresAt = 0
	mustGet(t, tab, e, t0)
	if n := tab.Sweep(t0+10, 10); n != 1 || tab.Len() != 0 {
		t.Fatalf("Sweep removed %d, Len %d", n, tab.Len())
	}
}

func BenchmarkPutGet(b *testing.B) {
	const live = 100_000
	tab := dedupe.New(2 * live)
	result := make([]byte, 40)
	ids := make([]string, 4096)
	b.ReportAllocs()
	b.ResetTimer()
	for i := range b.N {
		if i%len(ids) == 0 {
			b.StopTimer()
			for j := range ids {
				ids[j] = fmt.Sprintf("%032x", i+j)
			}
			b.StartTimer()
		}
		// One decision per µs, retained for live µs: a steady state of
		// live entries, one swept per Put.
		now := t0 + int64(i)*1000
		k := dedupe.Key{Caller: "svc-checkout", RequestID: ids[i%len(ids)]}
		tab.Sweep(now, 1)
		if _, ok := tab.Get(k, now); ok {
			b.Fatal("a new request ID is present")
		}
		if err := tab.Put(dedupe.Entry{Key: k, Result: result, ExpiresAt: now + live*1000}, now); err != nil {
			b.Fatal(err)
		}
		if _, ok := tab.Get(k, now); !ok {
			b.Fatal("a recorded request ID is absent")
		}
	}
	b.StopTimer()
	b.ReportMetric(float64(tab.Len()), "entries")
}
