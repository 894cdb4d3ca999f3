package node_test

import (
	"bytes"
	"compress/gzip"
	"context"
	"fmt"
	"io"
	"net/http"
	"sync"
	"testing"
	"time"

	"connectrpc.com/connect"

	"github.com/quorate/quorate/node"
	"github.com/quorate/quorate/node/nodetest"
	quoratev1 "github.com/quorate/quorate/proto/quorate/v1"
)

// Many compressed bodies at once: what a listener holds across all its
// requests is bounded (--max-inflight-bytes), and a caller without rights
// costs no more than its headers.

// gzipZeros is size zero bytes gzipped: 16 MiB take about 16 KB.
func gzipZeros(t *testing.T, size int) []byte {
	t.Helper()
	var b bytes.Buffer
	zw, err := gzip.NewWriterLevel(&b, gzip.BestCompression)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := zw.Write(make([]byte, size)); err != nil {
		t.Fatal(err)
	}
	if err := zw.Close(); err != nil {
		t.Fatal(err)
	}
	return b.Bytes()
}

// newBodiesEnv is a hostileEnv's clients for cluster c.
func newBodiesEnv(t *testing.T, c *nodetest.Cluster) *hostileEnv {
	var p1, p2 http.Protocols
	p1.SetHTTP1(true)
	p2.SetUnencryptedHTTP2(true)
	h := &hostileEnv{c: c,
		h1: &http.Client{Transport: &http.Transport{Protocols: &p1}},
		h2: &http.Client{Transport: &http.Transport{Protocols: &p2}},
	}
	t.Cleanup(h.h1.CloseIdleConnections)
	t.Cleanup(h.h2.CloseIdleConnections)
	return h
}

// With an access file, 60 gzip bodies of 16 KB that inflate to 16 MiB each,
// sent at once without a credential or with one that does not check out,
// in Connect JSON, Connect proto and gRPC, are all refused as unauthenticated
// without a byte of them read: the API port reads less than one of them in
// all, and the heap does not grow by what they inflate to.
func TestUnauthenticatedBodiesUnread(t *testing.T) {
	e := newAccessEnv(t)
	h := newBodiesEnv(t, e.c)
	bomb := gzipZeros(t, 16<<20)
	n := e.c.Node(0)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	send := func(i int) hostileReply {
		switch i % 3 {
		case 0:
			return h.post(ctx, h.h1, 0, admitPath, headers("Content-Type", "application/json", "Content-Encoding", "gzip"),
				bytes.NewReader(bomb), int64(len(bomb)))
		case 1:
			return h.post(ctx, h.h1, 0, admitPath, headers("Content-Type", "application/proto", "Content-Encoding", "gzip",
				"Authorization", "Bearer qt_not-a-known-token"), bytes.NewReader(bomb), int64(len(bomb)))
		}
		frame := grpcFrame(true, bomb)
		return h.post(ctx, h.h2, 0, admitPath, headers("Content-Type", "application/grpc+proto", "Grpc-Encoding", "gzip", "Te", "trailers"),
			bytes.NewReader(frame), int64(len(frame)))
	}
	before, _, _ := n.InflightStats()
	stop := watchHeap()
	replies := make([]hostileReply, 60)
	var wg sync.WaitGroup
	for i := range replies {
		wg.Go(func() { replies[i] = send(i) })
	}
	wg.Wait()
	growth := stop()
	after, _, _ := n.InflightStats()
	for i, r := range replies {
		if r.err != nil || r.code != connect.CodeUnauthenticated {
			t.Errorf("bomb %d: %s (%q, %v), want unauthenticated", i, codeName(r.code), r.message, r.err)
		}
	}
	// The nodes' own status calls to the API port carry the node token,
	// and are read: a few KB.
	if read := after.Read - before.Read; read >= int64(len(bomb)) {
		t.Errorf("the API port read %d body bytes while refusing them, want less than one bomb (%d)", read, len(bomb))
	}
	t.Logf("heap grew by at most %d MiB; the API port read %d body bytes", growth>>20, after.Read-before.Read)
	if growth > 64<<20 {
		t.Errorf("heap grew by %d MiB while refusing them, want at most 64", growth>>20)
	}
}

// inflightBomb sends a gzip body inflating to 1 MiB (bodyBytes of the
// listener's bound) to node 0 and returns the answer and its Retry-After.
func inflightBomb(ctx context.Context, h *hostileEnv, body io.Reader, size int64) (hostileReply, string) {
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, h.c.APIURL(0)+"/"+admitPath, body)
	if err != nil {
		return hostileReply{err: err}, ""
	}
	req.Header = headers("Content-Type", "application/json", "Content-Encoding", "gzip")
	req.ContentLength = size
	resp, err := h.h1.Do(req)
	if err != nil {
		return hostileReply{err: err}, ""
	}
	return readReply(resp, time.Now()), resp.Header.Get("Retry-After")
}

// The API port's in-flight budget (--max-inflight-bytes, 4 MiB here, with
// a 1 MiB message bound): three compressed bodies that stall hold most of
// it, and 40 compressed bodies sent at once are then all refused at once
// with resource_exhausted and a Retry-After, none waiting; then 40 more
// without the stalled ones: some are served, any others refused. Through it all, a client
// calling every 100 ms is answered, and the budget is back to zero after.
func TestInflightBudget(t *testing.T) {
	const maxBytes, budget = 1 << 20, 4 << 20
	c := nodetest.NewClusterWith(t, nodetest.Options{Nodes: 1, Configure: func(_ int, cfg *node.Config) {
		cfg.MaxRequestBytes, cfg.MaxInflightBytes = maxBytes, budget
	}})
	applyPolicy(t, c, "inflight", 100000, time.Minute, 100000)
	h := newBodiesEnv(t, c)
	n := c.Node(0)
	bomb := gzipZeros(t, maxBytes)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()

	stopClient := pacedClient(t, ctx, c, "inflight")

	// Three stalled bodies: each has sent 1 KiB of gzip, charged as what
	// it may inflate to, the 1 MiB bound.
	stallCtx, unstall := context.WithCancel(ctx)
	var stalled sync.WaitGroup
	for range 3 {
		pr, pw := io.Pipe()
		stalled.Go(func() { _, _ = inflightBomb(stallCtx, h, pr, -1) })
		if _, err := pw.Write(bomb[:1024]); err != nil {
			t.Fatal(err)
		}
		context.AfterFunc(stallCtx, func() { pw.CloseWithError(context.Canceled) })
	}
	c.Eventually(t, 20*time.Second, "the stalled bodies hold 3 MiB", func() error {
		if api, _, _ := n.InflightStats(); api.InUse < 3*maxBytes {
			return fmt.Errorf("%d bytes in flight", api.InUse)
		}
		return nil
	})
	burst := func(what string, wantServed bool) {
		t.Helper()
		refused, served := sendBombs(t, ctx, h, bomb, 40)
		t.Logf("%s: %d refused, %d inflated", what, refused, served)
		if wantServed && served == 0 || !wantServed && refused != 40 {
			t.Errorf("%s: %d refused, %d inflated", what, refused, served)
		}
	}
	burst("with the budget held", false)
	unstall()
	stalled.Wait()
	burst("with the budget free", true)
	if calls := stopClient(); calls < 2 {
		t.Errorf("the client made %d calls", calls)
	}
	c.Eventually(t, 20*time.Second, "the budget is free again", func() error {
		if api, _, _ := n.InflightStats(); api.InUse != 0 {
			return fmt.Errorf("%d bytes in flight", api.InUse)
		}
		return nil
	})
}

// The burst of the report, on a node with the default bounds: 200 gzip
// bodies of 16 KB sent at once, each inflating to 16 MiB (the default
// message bound), with a client calling every 100 ms beside them. Each
// bomb is answered at once — refused with resource_exhausted and a
// Retry-After past the in-flight budget, or inflated within it (zeros are
// no JSON: invalid_argument) — the client's every call is answered, the
// heap grows by at most 300 MiB, and the budget is free again after.
func TestGzipBurstWithinBudget(t *testing.T) {
	c := nodetest.NewClusterWith(t, nodetest.Options{Nodes: 1})
	applyPolicy(t, c, "burst", 100000, time.Minute, 100000)
	h := newBodiesEnv(t, c)
	n := c.Node(0)
	bomb := gzipZeros(t, 16<<20)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()

	stopClient := pacedClient(t, ctx, c, "burst")
	stop := watchHeap()
	refused, inflated := sendBombs(t, ctx, h, bomb, 200)
	growth := stop()
	legitCalls := stopClient()
	t.Logf("200 bombs: %d refused, %d inflated; heap grew by at most %d MiB; the client made %d calls", refused, inflated, growth>>20, legitCalls)
	if refused == 0 {
		t.Errorf("no bomb was refused: the budget bounded nothing")
	}
	if growth > 300<<20 {
		t.Errorf("heap grew by %d MiB, want at most 300", growth>>20)
	}
	if legitCalls < 2 {
		t.Errorf("the client made %d calls", legitCalls)
	}
	c.Eventually(t, 20*time.Second, "the budget is free again", func() error {
		if api, _, _ := n.InflightStats(); api.InUse != 0 {
			return fmt.Errorf("%d bytes in flight", api.InUse)
		}
		return nil
	})
}

// pacedClient calls Admit on node 0 of c for policy every 100 ms until the
// returned function is called, which returns how many calls were answered;
// a call that fails fails the test. As a client does, a call whose outcome
// is unknown (its command was sent, and the node's request timeout passed
// before it was applied: a node starved of CPU by a burst of inflations,
// under the race detector on two cores) is sent again with its request ID
// until ctx ends: what counts is that the client is answered, once.
func pacedClient(t *testing.T, ctx context.Context, c *nodetest.Cluster, policy string) func() int {
	done, stop := make(chan struct{}), make(chan struct{})
	calls := 0
	go func() {
		defer close(done)
		for {
			req := &quoratev1.AdmitRequest{Policy: policy, Key: "k", RequestId: fmt.Sprintf("paced-%d", calls)}
			for {
				_, err := c.Admission(0).Admit(ctx, connect.NewRequest(req))
				if err == nil {
					break
				}
				if !outcomeUnknown(err) || ctx.Err() != nil {
					t.Errorf("the client's call %d: %v", calls, err)
					return
				}
				t.Logf("the client's call %d, sent again: %v", calls, err)
			}
			calls++
			select {
			case <-stop:
				return
			case <-time.After(100 * time.Millisecond): // the client's pace
			}
		}
	}()
	return func() int {
		close(stop)
		<-done
		return calls
	}
}

// sendBombs sends n copies of the gzip body bomb at once and returns how
// many were refused (resource_exhausted, each with a Retry-After) and how
// many inflated (zeros are no JSON: invalid_argument); any other answer,
// or none, fails the test.
func sendBombs(t *testing.T, ctx context.Context, h *hostileEnv, bomb []byte, n int) (refused, inflated int) {
	t.Helper()
	type answer struct {
		r          hostileReply
		retryAfter string
	}
	answers := make([]answer, n)
	var wg sync.WaitGroup
	for i := range answers {
		wg.Go(func() {
			r, ra := inflightBomb(ctx, h, bytes.NewReader(bomb), int64(len(bomb)))
			answers[i] = answer{r, ra}
		})
	}
	wg.Wait()
	for i, a := range answers {
		switch {
		case a.r.err != nil:
			t.Errorf("bomb %d: no answer: %v", i, a.r.err)
		case a.r.code == connect.CodeResourceExhausted:
			refused++
			if a.retryAfter == "" {
				t.Errorf("bomb %d refused without a Retry-After: %q", i, a.r.message)
			}
		case a.r.code == connect.CodeInvalidArgument:
			inflated++
		default:
			t.Errorf("bomb %d: %s (%q)", i, codeName(a.r.code), a.r.message)
		}
	}
	return refused, inflated
}
