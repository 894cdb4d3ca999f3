package shard

import (
	"fmt"

	"github.com/quorate/quorate/admission"
	"github.com/quorate/quorate/client/slot"
)

// SlotCount is the number of slots keys hash to (slot.Count).
const SlotCount = slot.Count

// Slot is a key's slot, 0..SlotCount-1. A SlotRange's End may be SlotCount.
type Slot uint16

// HashTag returns the part of key that decides its slot (slot.HashTag):
// "{tenant:acme}:ip:1.2.3.4" and "{tenant:acme}:route:/x" share the tag
// "tenant:acme".
func HashTag(key string) string { return slot.HashTag(key) }

// SlotOf returns the slot of key: the client's slot hash (slot.Of), so the
// client and the shard map place every key alike.
func SlotOf(key string) Slot { return Slot(slot.Of(key)) }

// SlotRange is the half-open range of slots [Start, End): Start is the first
// slot in it, End the first slot after it. {0, SlotCount} is every slot;
// {7, 8} is slot 7 alone; a range with Start >= End is empty and invalid.
type SlotRange struct {
	Start, End Slot
}

// AllSlots returns the range of every slot, [0, SlotCount).
func AllSlots() SlotRange { return SlotRange{0, SlotCount} }

// Len returns the number of slots in r (0 when r is empty or inverted).
func (r SlotRange) Len() int {
	if r.End <= r.Start {
		return 0
	}
	return int(r.End) - int(r.Start)
}

// Contains reports whether s is in r.
func (r SlotRange) Contains(s Slot) bool { return r.Start <= s && s < r.End }

// Validate reports whether r is a non-empty range inside [0, SlotCount). The
// error names the field at fault, "Start" or "End".
func (r SlotRange) Validate() error {
	if r.End > SlotCount {
		return &admission.FieldError{Source: errSource, Field: "End", Reason: fmt.Sprintf("is %d, beyond the last slot (at most %d)", r.End, SlotCount)}
	}
	if r.Start >= r.End {
		return &admission.FieldError{Source: errSource, Field: "Start", Reason: fmt.Sprintf("is %d, want less than End %d (ranges are half-open and non-empty)", r.Start, r.End)}
	}
	return nil
}

// String formats r as "[Start,End)".
func (r SlotRange) String() string { return fmt.Sprintf("[%d,%d)", r.Start, r.End) }
