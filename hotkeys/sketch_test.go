package hotkeys

import (
	"fmt"
	"math/rand/v2"
	"testing"
)

func TestExactWhileUnderCapacity(t *testing.T) {
	s := New(4)
	for i, k := range []string{"a", "b", "a", "c", "a", "b"} {
		s.Add(k, uint64(i%2+1))
	}
	got := s.Top(-1)
	want := []Entry{{Key: "b", Count: 4}, {Key: "a", Count: 3}, {Key: "c", Count: 2}}
	if fmt.Sprint(got) != fmt.Sprint(want) {
		t.Fatalf("Top = %v, want %v", got, want)
	}
	if s.Total() != 9 {
		t.Fatalf("Total = %d, want 9", s.Total())
	}
	if top := s.Top(1); len(top) != 1 || top[0].Key != "b" {
		t.Fatalf("Top(1) = %v", top)
	}
}

func TestReplacesTheSmallest(t *testing.T) {
	s := New(2)
	s.Add("a", 5)
	s.Add("b", 2)
	s.Add("c", 1) // takes b's counter: 3, error 2
	got := s.Top(-1)
	want := []Entry{{Key: "a", Count: 5}, {Key: "c", Count: 3, Error: 2}}
	if fmt.Sprint(got) != fmt.Sprint(want) {
		t.Fatalf("Top = %v, want %v", got, want)
	}
	if s.Len() != 2 {
		t.Fatalf("Len = %d, want 2", s.Len())
	}
}

// TestFindsHeavyKeys checks the sketch's guarantees on a skewed stream of
// many distinct keys: the heavy keys are found, counts bound the truth from
// above within their error, and memory stays at the capacity.
func TestFindsHeavyKeys(t *testing.T) {
	const capacity = 32
	s := New(capacity)
	truth := map[string]uint64{}
	rng := rand.New(rand.NewPCG(1, 2))
	heavy := []string{"hot-1", "hot-2", "hot-3"}
	for i := range 100_000 {
		var k string
		switch {
		case i%10 < 3:
			k = heavy[i%10] // 10% each
		default:
			k = fmt.Sprintf("cold-%d", rng.IntN(50_000))
		}
		truth[k]++
		s.Add(k, 1)
	}
	if s.Len() != capacity {
		t.Fatalf("Len = %d, want %d", s.Len(), capacity)
	}
	top := s.Top(3)
	for i, e := range top {
		if e.Key != heavy[0] && e.Key != heavy[1] && e.Key != heavy[2] {
			t.Fatalf("Top(3)[%d] = %v, want one of %v", i, e, heavy)
		}
	}
	for _, e := range s.Top(-1) {
		if e.Count < truth[e.Key] || e.Count-e.Error > truth[e.Key] {
			t.Fatalf("%s: count %d error %d, true weight %d", e.Key, e.Count, e.Error, truth[e.Key])
		}
	}
}

func BenchmarkAdd(b *testing.B) {
	s := New(64)
	keys := make([]string, 4096)
	for i := range keys {
		keys[i] = fmt.Sprintf("key-%d", i)
	}
	b.ResetTimer()
	for i := range b.N {
		s.Add(keys[(i*i)%len(keys)], 1)
	}
}

func TestLookup(t *testing.T) {
	s := New(2)
	s.Add("a", 5)
	s.Add("b", 2)
	if e, ok := s.Lookup("a"); !ok || e != (Entry{Key: "a", Count: 5}) {
		t.Fatalf("Lookup(a) = %v, %v", e, ok)
	}
	s.Add("c", 1) // takes b's counter: count 3, error 2
	if e, ok := s.Lookup("c"); !ok || e != (Entry{Key: "c", Count: 3, Error: 2}) {
		t.Fatalf("Lookup(c) = %v, %v", e, ok)
	}
	if e, ok := s.Lookup("b"); ok {
		t.Fatalf("Lookup(b) = %v after b lost its counter", e)
	}
}
