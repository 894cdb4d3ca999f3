package local

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/quorate/quorate/admission"
	"github.com/quorate/quorate/fsm"
	quoratev1 "github.com/quorate/quorate/proto/quorate/v1"
)

func admitWithID(id string) *quoratev1.AdmitRequest {
	cost := int64(2)
	return &quoratev1.AdmitRequest{Policy: "p", Key: "k", Cost: &cost, RequestId: id, Caller: "c"}
}

// A repeat of a request decided here gets its first answer, marked a
// duplicate; a repeat of one the cluster decided is sent to the cluster; a
// repeat asking something else is refused as the cluster refuses it.
func TestAnswersRepeat(t *testing.T) {
	var a answers
	ctx, now := context.Background(), time.Unix(1000, 0)
	m := admitWithID("r1")
	first, resp, err := a.claim(ctx, m, time.Minute, now)
	if !first || resp != nil || err != nil {
		t.Fatalf("first claim = %v, %v, %v", first, resp, err)
	}
	a.settle(m, &quoratev1.AdmitResponse{Allowed: true, Remaining: 7})
	first, resp, err = a.claim(ctx, admitWithID("r1"), time.Minute, now.Add(time.Second))
	if first || err != nil || resp == nil || !resp.GetAllowed() || resp.GetRemaining() != 7 || !resp.GetDuplicate() {
		t.Fatalf("repeat = %v, %v, %v; want the first answer as a duplicate", first, resp, err)
	}

	strict := admitWithID("r2")
	if first, _, _ := a.claim(ctx, strict, time.Minute, now); !first {
		t.Fatal("a new request ID was not first")
	}
	a.settle(strict, nil)
	if first, resp, err := a.claim(ctx, admitWithID("r2"), time.Minute, now); first || resp != nil || err != nil {
		t.Fatalf("repeat of a request the cluster decided = %v, %v, %v; want to the cluster", first, resp, err)
	}

	other := admitWithID("r1")
	three := int64(3)
	other.Cost = &three
	_, _, err = a.claim(ctx, other, time.Minute, now)
	var fe *admission.FieldError
	if !errors.Is(err, fsm.ErrRequestIDReused) || !errors.As(err, &fe) || fe.Field != "request_id" {
		t.Fatalf("repeat with another cost: %v; want the cluster's reused request ID on request_id", err)
	}
	// The same ID on another key, or of another caller, is another request.
	onOtherKey := admitWithID("r1")
	onOtherKey.Key = "k2"
	ofOtherCaller := admitWithID("r1")
	ofOtherCaller.Caller = "c2"
	for _, m := range []*quoratev1.AdmitRequest{onOtherKey, ofOtherCaller} {
		if first, _, err := a.claim(ctx, m, time.Minute, now); !first || err != nil {
			t.Fatalf("%v: first %v, %v; want a request of its own", m, first, err)
		}
	}
}

// A repeat arriving while the first is being decided waits for its answer.
func TestAnswersRepeatWaitsForTheFirst(t *testing.T) {
	var a answers
	ctx, now := context.Background(), time.Unix(1000, 0)
	m := admitWithID("r1")
	if first, _, _ := a.claim(ctx, m, time.Minute, now); !first {
		t.Fatal("not first")
	}
	got := make(chan *quoratev1.AdmitResponse)
	go func() {
		_, resp, _ := a.claim(ctx, admitWithID("r1"), time.Minute, now)
		got <- resp
	}()
	a.settle(m, &quoratev1.AdmitResponse{Allowed: true, Remaining: 3})
	if resp := <-got; resp == nil || resp.GetRemaining() != 3 || !resp.GetDuplicate() {
		t.Fatalf("a waiting repeat got %v; want the first answer", resp)
	}

	// One whose context ends first gets its error.
	m2 := admitWithID("r2")
	a.claim(ctx, m2, time.Minute, now)
	cctx, cancel := context.WithCancel(ctx)
	cancel()
	if _, _, err := a.claim(cctx, admitWithID("r2"), time.Minute, now); !errors.Is(err, context.Canceled) {
		t.Fatalf("a repeat whose context ended: %v", err)
	}
}

// Answers are kept for their retention and within maxAnswerBytes.
func TestAnswersForgotten(t *testing.T) {
	var a answers
	ctx, now := context.Background(), time.Unix(1000, 0)
	m := admitWithID("r1")
	a.claim(ctx, m, time.Minute, now)
	a.settle(m, &quoratev1.AdmitResponse{Allowed: true})
	if first, _, _ := a.claim(ctx, admitWithID("r1"), time.Minute, now.Add(59*time.Second)); first {
		t.Fatal("forgotten within its retention")
	}
	if first, _, _ := a.claim(ctx, admitWithID("r1"), time.Minute, now.Add(61*time.Second)); !first {
		t.Fatal("remembered past its retention")
	}

	// The longest keys and IDs, answers with many checks: the oldest are
	// pushed out once they fill maxAnswerBytes, never past it.
	var b answers
	long := func(i int) *quoratev1.AdmitRequest {
		m := admitWithID(fmt.Sprintf("%0128d", i))
		m.Key = strings.Repeat("k", 512)
		for range 8 {
			m.Also = append(m.Also, &quoratev1.Check{Policy: "p", Key: strings.Repeat("a", 512)})
		}
		return m
	}
	resp := &quoratev1.AdmitResponse{Allowed: true}
	for range 9 {
		resp.Checks = append(resp.Checks, &quoratev1.CheckResult{Allowed: true, Limit: 1 << 40, Remaining: 1 << 40})
	}
	n := 0
	for ; n < 1_000_000; n++ {
		m := long(n)
		b.claim(ctx, m, time.Hour, now)
		b.settle(m, resp)
		if b.len() < n+1 {
			break
		}
	}
	for i := range 1000 {
		m := long(n + 1 + i)
		b.claim(ctx, m, time.Hour, now)
		b.settle(m, resp)
	}
	kept, bytes := b.len(), b.bytes
	if bytes > maxAnswerBytes || bytes < maxAnswerBytes-20_000 || kept >= n+1001 {
		t.Fatalf("%d answers of %d bytes kept, want at most %d bytes and older ones pushed out", kept, bytes, maxAnswerBytes)
	}
	if first, _, _ := b.claim(ctx, long(0), time.Hour, now); !first {
		t.Fatal("the oldest answer was not the one pushed out")
	}
	if first, _, _ := b.claim(ctx, long(n+1000), time.Hour, now); first {
		t.Fatal("the newest answer was pushed out")
	}
	t.Logf("%d answers of the longest requests fill %d bytes", kept, bytes)
}

// A key is hot once it went to the cluster hotMisses times within a second
// (this one or the last); keys seen once each, however many, are not.
func TestHotness(t *testing.T) {
	var h hotness
	now := time.Unix(5000, 0)
	for i := range 3 * hotCounters {
		if h.miss("p", fmt.Sprint("cold-", i), now) {
			t.Fatalf("cold key %d taken for hot", i)
		}
	}
	for i := 1; i <= hotMisses; i++ {
		if hot := h.miss("p", "k", now); hot != (i == hotMisses) {
			t.Fatalf("miss %d: hot %v", i, hot)
		}
	}
	// Still hot the next second (by the last), not two seconds on.
	if !h.miss("p", "k", now.Add(time.Second)) {
		t.Fatal("not hot the second after")
	}
	if h.miss("p", "k", now.Add(3*time.Second)) {
		t.Fatal("hot after two quiet seconds")
	}
	// The same key of another policy is counted apart.
	if h.miss("q", "k", now.Add(3*time.Second)) {
		t.Fatal("another policy's key counted with it")
	}
}
