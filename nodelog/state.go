package nodelog

// loc is where a live entry's record is: its segment, offset and length.
// A zero length is a hole: an entry the scan of a checkpoint knows of but
// whose record it has not met (yet).
type loc struct {
	seg, off, n uint32
}

// groupState is one group's live range and where each entry of it is:
// locs[i] is entry first+i. An empty group has first == last == 0.
type groupState struct {
	first, last uint64
	locs        []loc
}

func (g *groupState) empty() bool { return g.last == 0 }

func (g *groupState) reset() { g.first, g.last, g.locs = 0, 0, nil }

// at returns the location of entry i, if live.
func (g *groupState) at(i uint64) (loc, bool) {
	if g.empty() || i < g.first || i > g.last {
		return loc{}, false
	}
	return g.locs[i-g.first], true
}

// add appends entry i at l; i must be last+1 unless the group is empty.
func (g *groupState) add(i uint64, l loc) bool {
	if g.empty() {
		g.first, g.last, g.locs = i, i, append(g.locs[:0], l)
		return true
	}
	if i != g.last+1 {
		return false
	}
	g.last = i
	g.locs = append(g.locs, l)
	return true
}

// truncHead voids the entries at or below i, handing each to gone.
func (g *groupState) truncHead(i uint64, gone func(loc)) {
	if g.empty() || i < g.first {
		return
	}
	if i >= g.last {
		g.drop(gone)
		return
	}
	k := i - g.first + 1
	for _, l := range g.locs[:k] {
		gone(l)
	}
	g.locs = g.locs[k:]
	g.first = i + 1
}

// truncTail voids the entries above i, handing each to gone.
func (g *groupState) truncTail(i uint64, gone func(loc)) {
	if g.empty() || i >= g.last {
		return
	}
	if i < g.first {
		g.drop(gone)
		return
	}
	k := i - g.first + 1
	for _, l := range g.locs[k:] {
		gone(l)
	}
	g.locs = g.locs[:k:k]
	g.last = i
}

// drop voids every entry.
func (g *groupState) drop(gone func(loc)) {
	for _, l := range g.locs {
		gone(l)
	}
	g.reset()
}

// setSpan makes the range exactly [first, last], as a checkpoint says,
// keeping the locations known inside it and holes elsewhere.
func (g *groupState) setSpan(first, last uint64) {
	locs := make([]loc, last-first+1)
	if !g.empty() {
		for i := max(first, g.first); i <= min(last, g.last); i++ {
			locs[i-first] = g.locs[i-g.first]
		}
	}
	g.first, g.last, g.locs = first, last, locs
}

// hole returns the first entry without a record, if any.
func (g *groupState) hole() (uint64, bool) {
	for k, l := range g.locs {
		if l.n == 0 {
			return g.first + uint64(k), true
		}
	}
	return 0, false
}
