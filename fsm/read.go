package fsm

import "github.com/quorate/quorate/admission"

// AppliedIndex is the log index of the last command applied (0 right
// after a restore, until the next).
func (f *FSM) AppliedIndex() uint64 {
	f.mu.RLock()
	defer f.mu.RUnlock()
	return f.appliedIndex
}

// Node returns a registered node by ID.
func (f *FSM) Node(id string) (Node, bool) {
	f.mu.RLock()
	defer f.mu.RUnlock()
	m, ok := f.meta.nodes[id]
	return m, ok
}

// Nodes returns every registered node, sorted by ID.
func (f *FSM) Nodes() []Node {
	f.mu.RLock()
	defer f.mu.RUnlock()
	return sortedNodes(f.meta.nodes)
}

// LastNow is the FSM's time as of the last applied entry, Unix nanoseconds.
func (f *FSM) LastNow() int64 {
	f.mu.RLock()
	defer f.mu.RUnlock()
	return f.lastNow
}

// ReservationCount is the number of outstanding reservations.
func (f *FSM) ReservationCount() int {
	f.mu.RLock()
	defer f.mu.RUnlock()
	return f.data.reservations.Len()
}

// SemaphoreCount is the number of concurrency keys holding (or having
// held, until reclaimed) leases.
func (f *FSM) SemaphoreCount() int {
	f.mu.RLock()
	defer f.mu.RUnlock()
	return f.data.sems.Len()
}

// BucketCount is the number of live (not yet reclaimed) buckets.
func (f *FSM) BucketCount() int {
	f.mu.RLock()
	defer f.mu.RUnlock()
	return f.data.buckets.Len()
}

// DedupeLen is the number of request-ID entries held (expired ones not yet
// reclaimed included), and DedupeBytes their estimated memory.
func (f *FSM) DedupeLen() int {
	f.mu.RLock()
	defer f.mu.RUnlock()
	return f.data.dedupe.Len()
}

// DedupeBytes is the estimated memory of the request-ID entries.
func (f *FSM) DedupeBytes() int64 {
	f.mu.RLock()
	defer f.mu.RUnlock()
	return f.data.dedupe.Bytes()
}

// NextExpiry is the earliest time at which some held state (a bucket, a
// semaphore, a reservation, a grant or a request-ID entry) expires, and false when
// nothing is held. The leader proposes Expire once its now passes it.
func (f *FSM) NextExpiry() (int64, bool) {
	f.mu.RLock()
	defer f.mu.RUnlock()
	next, ok := f.data.dedupe.NextExpiry()
	if b, bok := f.data.buckets.NextExpiry(); bok && (!ok || b < next) {
		next, ok = b, true
	}
	for _, t := range []interface{ NextExpiry() (int64, bool) }{f.data.sems, f.data.reservations, f.data.grants.t} {
		if b, bok := t.NextExpiry(); bok && (!ok || b < next) {
			next, ok = b, true
		}
	}
	return next, ok
}

// Bucket returns the token-bucket state of (policy, key); the zero Bucket
// (full) when there is none.
func (f *FSM) Bucket(policy, key string) admission.Bucket {
	return admission.Bucket{TAT: f.State(policy, key).TAT}
}

// State returns the stored state of (policy, key), whatever the algorithm;
// the zero State when there is none.
func (f *FSM) State(policy, key string) admission.State {
	f.mu.RLock()
	defer f.mu.RUnlock()
	s, _ := f.data.buckets.Get(BucketKey(policy, key))
	return s
}
