package node

import (
	"container/list"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/quorate/quorate/admission"
)

// The pacing queue, counted at the node the caller asked (as the
// decisions are). Two kinds of call wait with max_wait:
//
//   - kind "admit": an Admit (an AdmitBatch item, a ShouldRateLimit) whose
//     token buckets conform within max_wait is admitted at a later slot, and
//     its caller waits the answer's wait before proceeding. The node does
//     not hold the call: it counts the caller waiting from the answer until
//     its slot (to pacingTick), as the answer told it.
//   - kind "lease": an AcquireLease that finds no free slot parks on its
//     key's leader until one frees or max_wait passes. The node asked
//     counts it waiting while the call is in flight.
//
// quorate_pacing_wait_seconds is the wait each admitted Admit was given
// (0 when admitted at once) and the time each answered AcquireLease
// waited, of calls with max_wait only; quorate_pacing_waiting the callers
// waiting now, and quorate_pacing_oldest_wait_seconds how long the one
// that has waited longest has waited.

// pacingTick is the resolution of the paced Admits' slots, and pacingSlots
// covers the longest wait an answer can give (MaxWait) with room to spare.
const (
	pacingTick  = 100 * time.Millisecond
	pacingSlots = int(MaxWait/pacingTick) + 2
)

// The kind label of the pacing metrics.
const (
	pacingAdmit = "admit"
	pacingLease = "lease"
)

var (
	descPacingWaiting = prometheus.NewDesc("quorate_pacing_waiting",
		"Callers waiting now with max_wait, by policy and kind: admit (told by this node to wait for a paced slot that has not come yet, to 100 ms), lease (AcquireLease calls to this node parked for a free slot).",
		[]string{"policy", "kind"}, nil)
	descPacingOldest = prometheus.NewDesc("quorate_pacing_oldest_wait_seconds",
		"How long the caller waiting longest among quorate_pacing_waiting has waited, by policy and kind (0 when none waits).",
		[]string{"policy", "kind"}, nil)
)

// pacingQueue is the node's count of the callers waiting; the zero value is
// ready to use. Its memory is bounded by the policy labels: a ring of
// pacingSlots per paced policy, and one list element per parked lease call
// (itself bounded by the calls in flight).
type pacingQueue struct {
	mu     sync.Mutex
	admits map[string]*pacedSlots // by policy label
	leases map[string]*list.List  // start times of the parked calls, oldest first, by policy label
	primed map[[2]string]bool     // policy label and kind whose series show when none waits (prime)
}

// pacingKind is the kind of the pacing calls policies of algorithm a may
// have, if any: max_wait paces token buckets' Admits and parks concurrency
// policies' AcquireLease calls.
func pacingKind(a admission.Algorithm) string {
	switch a {
	case admission.AlgorithmTokenBucket:
		return pacingAdmit
	case admission.AlgorithmConcurrency:
		return pacingLease
	}
	return ""
}

// prime makes policy's series of kind show, at zero, while none waits.
func (p *pacingQueue) prime(policy, kind string) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.primed == nil {
		p.primed = map[[2]string]bool{}
	}
	p.primed[[2]string{policy, kind}] = true
}

// pacedSlots counts the paced Admits by the tick of their slot, in a ring.
type pacedSlots [pacingSlots]pacedSlot

type pacedSlot struct {
	tick   int64 // the slot's tick (Unix time / pacingTick), rounded up
	n      int64 // callers told to wait for it
	oldest int64 // when the first of them was answered (Unix nanoseconds)
}

// paced counts a caller of policy told at now to wait wait > 0.
func (p *pacingQueue) paced(policy string, now time.Time, wait time.Duration) {
	due := (now.Add(wait).UnixNano() + int64(pacingTick) - 1) / int64(pacingTick)
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.admits == nil {
		p.admits = map[string]*pacedSlots{}
	}
	r := p.admits[policy]
	if r == nil {
		r = &pacedSlots{}
		p.admits[policy] = r
	}
	s := &r[due%int64(pacingSlots)]
	if s.tick != due {
		*s = pacedSlot{tick: due, oldest: now.UnixNano()}
	}
	s.n++
	s.oldest = min(s.oldest, now.UnixNano())
}

// parked counts a lease call of policy waiting from now; the function it
// returns ends its wait.
func (p *pacingQueue) parked(policy string, now time.Time) (done func()) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.leases == nil {
		p.leases = map[string]*list.List{}
	}
	l := p.leases[policy]
	if l == nil {
		l = list.New()
		p.leases[policy] = l
	}
	e := l.PushBack(now)
	return func() {
		p.mu.Lock()
		defer p.mu.Unlock()
		l.Remove(e)
		if l.Len() == 0 {
			delete(p.leases, policy)
		}
	}
}

// collect sends the waiting callers and the oldest wait at now.
func (p *pacingQueue) collect(ch chan<- prometheus.Metric, now time.Time) {
	p.mu.Lock()
	defer p.mu.Unlock()
	sent := map[[2]string]bool{}
	send := func(policy, kind string, n int64, oldest time.Duration) {
		sent[[2]string{policy, kind}] = true
		ch <- prometheus.MustNewConstMetric(descPacingWaiting, prometheus.GaugeValue, float64(n), policy, kind)
		ch <- prometheus.MustNewConstMetric(descPacingOldest, prometheus.GaugeValue, max(0, oldest.Seconds()), policy, kind)
	}
	defer func() {
		for k := range p.primed {
			if !sent[k] {
				send(k[0], k[1], 0, 0)
			}
		}
	}()
	tick := now.UnixNano() / int64(pacingTick)
	for policy, r := range p.admits {
		var n int64
		oldest := now.UnixNano()
		for i := range r {
			if s := &r[i]; s.tick > tick && s.n > 0 {
				n += s.n
				oldest = min(oldest, s.oldest)
			}
		}
		send(policy, pacingAdmit, n, time.Duration(now.UnixNano()-oldest))
	}
	for policy, l := range p.leases {
		send(policy, pacingLease, int64(l.Len()), now.Sub(l.Front().Value.(time.Time)))
	}
}

// Describe and Collect make p a collector of the node's registry.
func (p *pacingQueue) Describe(ch chan<- *prometheus.Desc) {
	ch <- descPacingWaiting
	ch <- descPacingOldest
}

func (p *pacingQueue) Collect(ch chan<- prometheus.Metric) { p.collect(ch, time.Now()) }
