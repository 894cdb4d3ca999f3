package fsm

import "github.com/quorate/quorate/shard"

// Reads of the slot-migration state, for status and the coordinator.

// Frozen returns the migrations freezing slots of this group.
func (f *FSM) Frozen() map[uint64]shard.SlotRange {
	f.mu.RLock()
	defer f.mu.RUnlock()
	out := make(map[uint64]shard.SlotRange, len(f.data.frozen))
	for m, r := range f.data.frozen {
		out[m] = r
	}
	return out
}

// ImportStatus is a target group's view of one migration into it.
type ImportStatus struct {
	Range             shard.SlotRange
	Attempt           uint64
	NextSeq           uint32
	Complete, Dropped bool
	Records           uint64
}

// Import returns this replica's record of migration into it.
func (f *FSM) Import(migration uint64) (ImportStatus, bool) {
	f.mu.RLock()
	defer f.mu.RUnlock()
	st, ok := f.data.imports[migration]
	if !ok {
		return ImportStatus{}, false
	}
	return ImportStatus{Range: st.r, Attempt: st.attempt, NextSeq: st.nextSeq, Complete: st.complete, Dropped: st.dropped, Records: st.records}, true
}
