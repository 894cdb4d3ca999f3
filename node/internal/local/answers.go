package local

import (
	"container/list"
	"context"
	"fmt"
	"strconv"
	"strings"
	"sync"
	"time"

	"google.golang.org/protobuf/proto"

	"github.com/quorate/quorate/admission"
	"github.com/quorate/quorate/fsm"
	quoratev1 "github.com/quorate/quorate/proto/quorate/v1"
)

// maxAnswerBytes bounds the memory of the requests with an ID a node
// remembers, each counted as its strings, its response's encoded size and
// answerOverhead: with short keys and IDs
// about 300 bytes each, some 50,000 of them; a caller sending the longest
// keys, IDs and checks pushes older ones out sooner, never past the bound.
// Forgetting one early costs what a repeat at another node costs: it may
// be charged again, from a grant, so never past the policy.
const maxAnswerBytes = 16 << 20

// answerOverhead is what an answer costs beyond its strings and response:
// the answer, its list element, map entry and channel.
const answerOverhead = 256

// answers remember, for each request with a request ID that a node's
// grants path saw, what became of it, so that a repeat at this node gets
// the first answer: the answer decided here from a grant, or "decided by
// the cluster", in which case the repeat goes to the cluster, whose record
// answers it. A request is named as the cluster names it: its caller, its
// request ID and its key; a repeat must ask the same (policy, cost and
// checks), as the cluster requires. An answer is kept for its policy's
// dedupe_retention (by this node's clock; the cluster's record is kept by
// log time), or until newer ones push it out of maxAnswerBytes.
type answers struct {
	mu    sync.Mutex
	byID  map[string]*list.Element // of *answer
	order list.List                // oldest first
	bytes int                      // the answers' sizes summed
}

// answer is what became of one request.
type answer struct {
	id      string
	request string // the request's policy, cost and checks
	expires time.Time
	// done is closed once the request is decided; resp is then its answer
	// from a grant, or nil when the cluster decides it.
	done chan struct{}
	resp *quoratev1.AdmitResponse
	size int // counted in answers.bytes
}

// requestName is how answers names m: caller, request ID and key.
func requestName(m *quoratev1.AdmitRequest) string {
	return nameOf(m.GetCaller(), m.GetRequestId(), m.GetKey())
}

func nameOf(caller, requestID, key string) string {
	return caller + "\x00" + requestID + "\x00" + key
}

// requestShape is what a repeat of m must ask again: its policy, cost and
// checks.
func requestShape(m *quoratev1.AdmitRequest) string {
	var b strings.Builder
	b.WriteString(m.GetPolicy())
	b.WriteByte(0)
	b.WriteString(strconv.FormatInt(costOf(m.Cost), 10))
	for _, c := range m.GetAlso() {
		fmt.Fprintf(&b, "\x00%s\x00%s\x00%d", c.GetPolicy(), c.GetKey(), costOf(c.Cost))
	}
	return b.String()
}

// costOf is a request's cost as sent: unset means 1.
func costOf(c *int64) int64 {
	if c == nil {
		return 1
	}
	return *c
}

// reusedRequestID is the error of a repeat of m's request ID asking
// something else: the cluster's own (fsm.ErrRequestIDReused, on
// request_id), in its words.
func reusedRequestID(m *quoratev1.AdmitRequest) error {
	return &admission.FieldError{
		Field: "request_id",
		Reason: fmt.Sprintf("%s was already used by caller %s for another request (operation, policy, key or cost differ); use a new request_id",
			admission.Quote(m.GetRequestId()), admission.Quote(m.GetCaller())),
		Err: fsm.ErrRequestIDReused,
	}
}

// claim looks m up. A request seen before gets its first answer (nil:
// decide it through the cluster) once decided, waiting for it at most
// until ctx ends; first is false then. A request not seen before is taken
// by the caller (first true), who must settle it with settle.
func (a *answers) claim(ctx context.Context, m *quoratev1.AdmitRequest, retention time.Duration, now time.Time) (first bool, resp *quoratev1.AdmitResponse, err error) {
	id := requestName(m)
	a.mu.Lock()
	if a.byID == nil {
		a.byID = make(map[string]*list.Element)
	}
	a.expireLocked(now)
	if e, ok := a.byID[id]; ok {
		ans := e.Value.(*answer)
		a.mu.Unlock()
		if ans.request != requestShape(m) {
			return false, nil, reusedRequestID(m)
		}
		select {
		case <-ans.done:
		case <-ctx.Done():
			return false, nil, ctx.Err()
		}
		if ans.resp == nil {
			return false, nil, nil
		}
		out := proto.Clone(ans.resp).(*quoratev1.AdmitResponse)
		out.Duplicate = true
		return false, out, nil
	}
	ans := &answer{id: id, request: requestShape(m), expires: now.Add(retention), done: make(chan struct{})}
	ans.size = answerOverhead + 2*len(ans.id) + len(ans.request) // the map's key and the answer's
	a.byID[id] = a.order.PushBack(ans)
	a.bytes += ans.size
	a.trimLocked()
	a.mu.Unlock()
	return true, nil, nil
}

// settle records the answer of a request claim gave its caller: resp
// decided here, or nil when the cluster decides it.
func (a *answers) settle(m *quoratev1.AdmitRequest, resp *quoratev1.AdmitResponse) {
	a.mu.Lock()
	defer a.mu.Unlock()
	e, ok := a.byID[requestName(m)]
	if !ok {
		return // pushed out meanwhile
	}
	ans := e.Value.(*answer)
	select {
	case <-ans.done:
		return
	default:
	}
	ans.resp = resp
	close(ans.done)
	if resp != nil {
		n := proto.Size(resp)
		ans.size += n
		a.bytes += n
		a.trimLocked()
	}
}

// trimLocked forgets the oldest answers until they fit maxAnswerBytes.
func (a *answers) trimLocked() {
	for a.bytes > maxAnswerBytes && a.order.Len() > 0 {
		a.removeLocked(a.order.Front())
	}
}

// decidedHere reports whether the request named (caller, request ID, key)
// was decided from a grant here and is still remembered.
func (a *answers) decidedHere(name string) bool {
	a.mu.Lock()
	defer a.mu.Unlock()
	e, ok := a.byID[name]
	if !ok {
		return false
	}
	ans := e.Value.(*answer)
	select {
	case <-ans.done:
		return ans.resp != nil
	default:
		return false
	}
}

// len is how many requests are remembered.
func (a *answers) len() int {
	a.mu.Lock()
	defer a.mu.Unlock()
	return a.order.Len()
}

// expireLocked forgets the answers whose retention ended by now, oldest
// first. An answer of a shorter retention behind one of a longer one is
// forgotten with it: kept longer, never shorter.
func (a *answers) expireLocked(now time.Time) {
	for e := a.order.Front(); e != nil; e = a.order.Front() {
		if ans := e.Value.(*answer); now.Before(ans.expires) {
			return
		}
		a.removeLocked(e)
	}
}

func (a *answers) removeLocked(e *list.Element) {
	ans := a.order.Remove(e).(*answer)
	delete(a.byID, ans.id)
	a.bytes -= ans.size
	select {
	case <-ans.done:
	default:
		close(ans.done) // a waiting repeat goes to the cluster
	}
}
