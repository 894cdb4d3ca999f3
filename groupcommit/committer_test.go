package groupcommit

import (
	"context"
	"testing"
	"time"

	"github.com/quorate/quorate/fsm"
	raftcmdv1 "github.com/quorate/quorate/proto/quorate/raftcmd/v1"
)

// batchLog answers every entry with a BatchResult of one string per
// command, and keeps the results it gave.
type batchLog struct{ given []*fsm.BatchResult }

func (l *batchLog) Append(_ *raftcmdv1.Envelope, cmds []*raftcmdv1.Envelope) (any, error) {
	if len(cmds) == 1 {
		return "only", nil
	}
	b := &fsm.BatchResult{}
	for i := range cmds {
		b.Results = append(b.Results, string(rune('a'+i)))
	}
	l.given = append(l.given, b)
	return b, nil
}
func (l *batchLog) Applied(*raftcmdv1.Envelope) {}

// A Batch entry's results reach their ops, and the Committer then lets go
// of them: the log's caller (raft, whose log cache keeps each recent
// entry's future with its result) may hold the BatchResult much longer.
func TestCommitterReleasesBatchResults(t *testing.T) {
	l := &batchLog{}
	c := New(l)
	c.Hold()
	ops := []*Op{NewOp(&raftcmdv1.Envelope{}), NewOp(&raftcmdv1.Envelope{}), NewOp(&raftcmdv1.Envelope{})}
	c.Add(ops...)
	c.Release()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	for i, op := range ops {
		r, _, err := op.Wait(ctx)
		if err != nil || r.Err != nil || r.Res != string(rune('a'+i)) {
			t.Fatalf("op %d: %+v, %v; want result %q", i, r, err, string(rune('a'+i)))
		}
	}
	select { // the entry is done once nothing is in flight
	case <-c.Hold():
	case <-ctx.Done():
		t.Fatal("the entry is still in flight")
	}
	if len(l.given) != 1 {
		t.Fatalf("%d Batch entries, want 1", len(l.given))
	}
	if l.given[0].Results != nil {
		t.Errorf("the BatchResult still holds %d results after answering its ops", len(l.given[0].Results))
	}
}
