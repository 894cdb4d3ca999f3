package hotkeys

import (
	"cmp"
	"container/heap"
	"slices"
)

// Entry is one counted key.
type Entry struct {
	Key string
	// Count is an upper bound of the key's weight; Error is how much it
	// may exceed the truth (the count the key inherited when it took its
	// counter).
	Count, Error uint64
}

// Sketch is a Space-Saving sketch with a fixed number of counters.
type Sketch struct {
	capacity int
	index    map[string]int // key → position in heap
	heap     counters       // a min-heap by Count
	total    uint64
}

// New returns an empty sketch of capacity counters (at least 1).
func New(capacity int) *Sketch {
	capacity = max(capacity, 1)
	s := &Sketch{capacity: capacity, index: make(map[string]int, capacity)}
	s.heap.index = s.index
	return s
}

// Add counts weight for key.
func (s *Sketch) Add(key string, weight uint64) {
	s.total += weight
	if i, ok := s.index[key]; ok {
		s.heap.entries[i].Count += weight
		heap.Fix(&s.heap, i)
		return
	}
	if len(s.heap.entries) < s.capacity {
		heap.Push(&s.heap, Entry{Key: key, Count: weight})
		return
	}
	// Replace the smallest counter: the newcomer inherits its count.
	low := &s.heap.entries[0]
	delete(s.index, low.Key)
	*low = Entry{Key: key, Count: low.Count + weight, Error: low.Count}
	s.index[key] = 0
	heap.Fix(&s.heap, 0)
}

// Lookup returns key's entry, if it holds a counter.
func (s *Sketch) Lookup(key string) (Entry, bool) {
	i, ok := s.index[key]
	if !ok {
		return Entry{}, false
	}
	return s.heap.entries[i], true
}

// Total is the weight added since the sketch was made.
func (s *Sketch) Total() uint64 { return s.total }

// Len is the number of keys counted (at most the capacity).
func (s *Sketch) Len() int { return len(s.heap.entries) }

// Top returns up to n entries, heaviest first (ties by key).
func (s *Sketch) Top(n int) []Entry {
	out := slices.Clone(s.heap.entries)
	slices.SortFunc(out, func(a, b Entry) int {
		if c := cmp.Compare(b.Count, a.Count); c != 0 {
			return c
		}
		return cmp.Compare(a.Key, b.Key)
	})
	if n >= 0 && len(out) > n {
		out = out[:n]
	}
	return out
}

// counters is a min-heap of entries by Count that keeps index current.
type counters struct {
	entries []Entry
	index   map[string]int
}

func (c *counters) Len() int           { return len(c.entries) }
func (c *counters) Less(i, j int) bool { return c.entries[i].Count < c.entries[j].Count }
func (c *counters) Swap(i, j int) {
	c.entries[i], c.entries[j] = c.entries[j], c.entries[i]
	c.index[c.entries[i].Key] = i
	c.index[c.entries[j].Key] = j
}
func (c *counters) Push(x any) {
	e := x.(Entry)
	c.index[e.Key] = len(c.entries)
	c.entries = append(c.entries, e)
}
func (c *counters) Pop() any {
	e := c.entries[len(c.entries)-1]
	c.entries = c.entries[:len(c.entries)-1]
	delete(c.index, e.Key)
	return e
}
