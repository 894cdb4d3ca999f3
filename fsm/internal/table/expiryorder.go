package table

// expiryOrder is a binary min-heap of a table's refs by (expiry, key): a
// total order, since keys are unique, so the minimum — and with it every
// sweep — is the same on every replica holding the same states, whatever
// the heap's shape. The table (an orderedSlots) answers the comparisons and
// records each ref's position, for fix and remove. It is not safe for
// concurrent use.
type expiryOrder struct {
	refs []uint32
}

// orderedSlots is what an expiryOrder needs of its table.
type orderedSlots interface {
	// before reports whether a's (expiry, key) is smaller than b's.
	before(a, b uint32) bool
	// setPos records that ref is at position i of the heap.
	setPos(ref uint32, i int)
}

// len is the number of refs in the heap.
func (h *expiryOrder) len() int { return len(h.refs) }

// min is the ref with the smallest (expiry, key); the heap is not empty.
func (h *expiryOrder) min() uint32 { return h.refs[0] }

// push adds ref to the heap.
func (h *expiryOrder) push(t orderedSlots, ref uint32) {
	h.refs = append(h.refs, ref)
	h.up(t, len(h.refs)-1)
}

// remove takes the ref at position i out of the heap. The heap's array
// shrinks when it is at most a quarter full.
func (h *expiryOrder) remove(t orderedSlots, i int) {
	last := len(h.refs) - 1
	if i != last {
		h.refs[i] = h.refs[last]
		t.setPos(h.refs[i], i)
	}
	h.refs = h.refs[:last]
	if i != last {
		h.fix(t, i)
	}
	if c := cap(h.refs); c > 1024 && len(h.refs) <= c/4 {
		h.refs = append(make([]uint32, 0, 2*len(h.refs)), h.refs...)
	}
}

// set puts ref at position i (its slot moved) and records it.
func (h *expiryOrder) set(t orderedSlots, i int, ref uint32) {
	h.refs[i] = ref
	t.setPos(ref, i)
}

// fix restores the order after the ref at position i changed its expiry.
func (h *expiryOrder) fix(t orderedSlots, i int) {
	if !h.down(t, i) {
		h.up(t, i)
	}
}

// init orders the whole heap (after every expiry may have changed).
func (h *expiryOrder) init(t orderedSlots) {
	for i := len(h.refs)/2 - 1; i >= 0; i-- {
		h.down(t, i)
	}
}

// up moves the ref at position i up to its place.
func (h *expiryOrder) up(t orderedSlots, i int) {
	ref := h.refs[i]
	for i > 0 {
		parent := (i - 1) / 2
		if !t.before(ref, h.refs[parent]) {
			break
		}
		h.refs[i] = h.refs[parent]
		t.setPos(h.refs[i], i)
		i = parent
	}
	h.refs[i] = ref
	t.setPos(ref, i)
}

// down moves the ref at position i down to its place and reports whether
// it moved.
func (h *expiryOrder) down(t orderedSlots, i int) bool {
	ref, start, n := h.refs[i], i, len(h.refs)
	for {
		child := 2*i + 1
		if child >= n {
			break
		}
		if r := child + 1; r < n && t.before(h.refs[r], h.refs[child]) {
			child = r
		}
		if !t.before(h.refs[child], ref) {
			break
		}
		h.refs[i] = h.refs[child]
		t.setPos(h.refs[i], i)
		i = child
	}
	h.refs[i] = ref
	t.setPos(ref, i)
	return i > start
}
