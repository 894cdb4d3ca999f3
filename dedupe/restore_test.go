package dedupe_test

import (
	"errors"
	"fmt"
	"slices"
	"testing"

	"github.com/quorate/quorate/dedupe"
)

func TestRestore(t *testing.T) {
	tab := dedupe.New(2)
	var es []dedupe.Entry
	for i := range 5 {
		e := entry("c", fmt.Sprint("r", i), t0+int64(100+i), fmt.Sprint("result", i))
		es = append(es, e)
		tab.Restore(e)
	}
	// Already-expired entries are restored too: they are absent to Get
	// and swept later, exactly as on the replica that wrote them.
	old := entry("c", "old", t0-5, "x")
	tab.Restore(old)
	if tab.Len() != 6 || tab.Bytes() != estimate(t, append(slices.Clone(es), old)...) {
		t.Fatalf("Restore past the bound: Len %d Bytes %d, want 6 and %d", tab.Len(), tab.Bytes(), estimate(t, append(slices.Clone(es), old)...))
	}
	for _, e := range es {
		mustGet(t, tab, e, t0)
	}
	mustAbsent(t, tab, old.Key, t0)
	if next, ok := tab.NextExpiry(); !ok || next != t0-5 {
		t.Fatalf("NextExpiry %d %v, want %d", next, ok, t0-5)
	}
	// Over the bound, Put refuses; the expired one is reclaimed first but
	// that is not enough room.
	if err := tab.Put(entry("c", "new", t0+500, ""), t0); !errors.Is(err, dedupe.ErrFull) {
		t.Fatalf("Put over the bound: %v, want ErrFull", err)
	}
	if tab.Len() != 5 {
		t.Fatalf("Len %d, want 5 (the expired entry reclaimed, nothing else)", tab.Len())
	}

	// Restore replaces an entry with the same key, even unexpired.
	repl := entry("c", "r2", t0+50, "replacement, longer")
	tab.Restore(repl)
	es[2] = repl
	mustGet(t, tab, repl, t0)
	if tab.Len() != 5 || tab.Bytes() != estimate(t, es...) {
		t.Fatalf("after replacing: Len %d Bytes %d, want 5 and %d", tab.Len(), tab.Bytes(), estimate(t, es...))
	}
	if next, ok := tab.NextExpiry(); !ok || next != t0+50 {
		t.Fatalf("NextExpiry %d %v, want the replacement's %d", next, ok, t0+50)
	}
	if n := tab.Sweep(t0+50, 10); n != 1 {
		t.Fatalf("Sweep at the replacement's expiry removed %d, want 1", n)
	}
	mustAbsent(t, tab, repl.Key, t0)
	// Once enough have expired, Put works again (down to the bound).
	if n := tab.Sweep(t0+101, 10); n != 2 {
		t.Fatalf("Sweep removed %d, want 2", n)
	}
	if err := tab.Put(entry("c", "new", t0+500, ""), t0+101); !errors.Is(err, dedupe.ErrFull) {
		t.Fatalf("Put with 2 unexpired entries in a table of 2: %v, want ErrFull", err)
	}
	mustPut(t, tab, entry("c", "new", t0+500, ""), t0+103)
	if tab.Len() != 2 {
		t.Fatalf("Len %d, want 2", tab.Len())
	}
}

// TestPutOverBoundCountsOnlyUnexpired restores more entries than the bound
// (a binary with a smaller MaxEntries), most of them expired at now, and
// Puts: the bound is on unexpired entries (ErrFull's contract; Restore's
// "until enough have expired"), and expired entries are absent whether or
// not they have been swept.
func TestPutOverBoundCountsOnlyUnexpired(t *testing.T) {
	tab := dedupe.New(3)
	for i := range 10 {
		exp := t0 - 1 // expired at t0
		if i >= 8 {
			exp = t0 + 100
		}
		tab.Restore(entry("c", fmt.Sprint("r", i), exp, "x"))
	}
	// Two unexpired entries, bound 3: one more fits.
	if err := tab.Put(entry("c", "new", t0+100, "y"), t0); err != nil {
		t.Fatalf("Put with 2 unexpired entries in a table of 3: %v", err)
	}
}
