package fsm

import (
	"strings"

	"github.com/quorate/quorate/lease"
)

// LeaseUse is what the semaphores of one concurrency policy hold on a
// replica: the keys with at least one live lease, and those leases.
type LeaseUse struct {
	Keys int64
	Held int64
}

// LeasesHeld sums, by policy name, the leases live at the time of the last
// applied entry, for the metrics of lease saturation. It reads the state
// without changing it.
func (f *FSM) LeasesHeld() map[string]LeaseUse {
	f.mu.RLock()
	defer f.mu.RUnlock()
	out := map[string]LeaseUse{}
	f.data.sems.Range(func(key string, s lease.Semaphore) {
		live := lease.Live(s, f.lastNow)
		if live == 0 {
			return
		}
		name, _, _ := strings.Cut(key, "/")
		u := out[name]
		u.Keys++
		u.Held += live
		out[name] = u
	})
	return out
}
