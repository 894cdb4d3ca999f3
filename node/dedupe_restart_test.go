package node_test

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/quorate/quorate/node/nodetest"
	raftcmdv1 "github.com/quorate/quorate/proto/quorate/raftcmd/v1"
	quoratev1 "github.com/quorate/quorate/proto/quorate/v1"
)

// Retries that wait on every node while a fully restarted cluster comes up
// get their first answers, and every attempt is proposed under the same
// name, the request ID with its key folded in. A leader elected right
// after the restart has applied nothing of its log yet (there is no
// snapshot): what it names a request by must not depend on what its
// replica has applied, or a retry it proposes in that moment misses the
// record of the first attempt and spends again. Each round kills every
// node, starts them all and sends every recorded request again to every
// node at once, so that retries are waiting on the node that wins the
// election.
func TestRetriesWhileClusterComesUpGetFirstAnswers(t *testing.T) {
	c := nodetest.NewCluster(t, 3)
	applyPolicy(t, c, "durable", 1000, 366*24*time.Hour, 1000)
	ctx, cancel := context.WithTimeout(context.Background(), 120*time.Second)
	defer cancel()
	const requests = 30
	first := make([]*quoratev1.AdmitResponse, requests)
	for r := range first {
		var err error
		if first[r], err = admitID(ctx, c, r%c.Len(), "durable", "k", "svc", fmt.Sprintf("r%d", r)); err != nil {
			t.Fatal(err)
		}
	}
	var bare atomic.Int64 // admits proposed without the key folded into their request ID
	for i := range c.Len() {
		c.Observer(i).SetProposed(func(env *raftcmdv1.Envelope) {
			if a := env.GetAdmit(); a != nil && !strings.Contains(a.GetRequestId(), "\x00") {
				bare.Add(1)
			}
		})
	}
	for round := range 3 {
		for i := range c.Len() {
			c.Kill(i)
		}
		for i := range c.Len() {
			c.Start(i)
		}
		var wg sync.WaitGroup
		var mu sync.Mutex
		var failures []string
		for r := range requests {
			for i := range c.Len() {
				wg.Go(func() {
					again, err := admitID(ctx, c, i, "durable", "k", "svc", fmt.Sprintf("r%d", r))
					if err == nil && again.GetDuplicate() && sameDecision(first[r], again) {
						return
					}
					mu.Lock()
					defer mu.Unlock()
					failures = append(failures, fmt.Sprintf("r%d at node %d: %v %v, want %v with duplicate", r, i, again, err, first[r]))
				})
			}
		}
		wg.Wait()
		if len(failures) > 0 {
			t.Fatalf("round %d: %d of %d retries not answered their first answer, e.g. %s", round, len(failures), requests*c.Len(), failures[0])
		}
		if n := bare.Load(); n > 0 {
			t.Fatalf("round %d: %d admits proposed under their bare request ID", round, n)
		}
	}
	if got := remainingAfterOneMore(t, ctx, c, 0, "durable", "k"); got != 1000-requests {
		t.Fatalf("bucket holds %d, want %d: a retry spent again", got, 1000-requests)
	}
}
