package clienttest

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"connectrpc.com/connect"
	"google.golang.org/protobuf/types/known/durationpb"

	"github.com/quorate/quorate/client"
	"github.com/quorate/quorate/node/nodetest"
	quoratev1 "github.com/quorate/quorate/proto/quorate/v1"
	"github.com/quorate/quorate/proto/quorate/v1/quoratev1connect"
)

// applyPolicies stores ps through any running node.
func applyPolicies(t testing.TB, c *nodetest.Cluster, ps ...*quoratev1.Policy) {
	t.Helper()
	c.Eventually(t, 10*time.Second, "policies applied", func() error {
		ctx, cancel := context.WithTimeout(context.Background(), 3*time.Second)
		defer cancel()
		_, err := c.Admin(0).ApplyPolicies(ctx, connect.NewRequest(&quoratev1.ApplyPoliciesRequest{Policies: ps}))
		return err
	})
}

// longBucket is a token bucket of capacity units that refills too slowly to
// matter during a test.
func longBucket(name string, capacity int64) *quoratev1.Policy {
	return &quoratev1.Policy{Name: name, Algorithm: "token_bucket", Limit: capacity, Period: durationpb.New(366 * 24 * time.Hour)}
}

// newClient is a client of every node of c, closed when the test ends.
func newClient(t testing.TB, c *nodetest.Cluster, cfg client.Config) *client.Client {
	t.Helper()
	for i := range c.Len() {
		cfg.Servers = append(cfg.Servers, c.APIURL(i))
	}
	if cfg.HTTPClient == nil {
		cfg.HTTPClient = c.HTTPClient()
	}
	if cfg.Caller == "" {
		cfg.Caller = "test"
	}
	cl, err := client.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = cl.Close() })
	return cl
}

// forwarded is the data calls the running nodes forwarded, in total.
func forwarded(c *nodetest.Cluster) uint64 {
	var n uint64
	for i := range c.Len() {
		if nd := c.Node(i); nd != nil {
			n += nd.Status().GetForwardedCalls()
		}
	}
	return n
}

// admitted collects the request IDs the cluster admitted.
type admitted struct {
	mu  sync.Mutex
	ids map[string]bool
	// unknown counts the outcome-unknown answers, duplicate the recorded
	// answers to an earlier attempt.
	unknown, duplicate atomic.Int64
}

func (a *admitted) add(id string) {
	a.mu.Lock()
	defer a.mu.Unlock()
	a.ids[id] = true
}

func (a *admitted) len() int {
	a.mu.Lock()
	defer a.mu.Unlock()
	return len(a.ids)
}

// admitUntilKnown admits r until its outcome is known, retrying an unknown
// outcome with the same request ID as the contract says, and records an
// admission.
func admitUntilKnown(t *testing.T, cl *client.Client, r client.Request, got *admitted) error {
	r.NoFallback = true
	r.RequestID = client.NewRequestID()
	for range 20 {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		d, err := cl.Admit(ctx, r)
		cancel()
		var ou *client.OutcomeUnknownError
		switch {
		case errors.As(err, &ou):
			got.unknown.Add(1)
			continue
		case err != nil:
			return err
		case d.Outcome != client.Verified:
			return fmt.Errorf("outcome %v with NoFallback", d.Outcome)
		case d.Allowed:
			if d.Duplicate {
				got.duplicate.Add(1)
			}
			got.add(d.RequestID)
		}
		return nil
	}
	return fmt.Errorf("request %s: outcome still unknown", r.RequestID)
}

// TestSameIDRetriesAcrossKilledLeader admits concurrently while the leader
// of the key's group is killed: every admission the cluster applied is one
// the client saw admitted exactly once (remaining = capacity − distinct
// admitted request IDs).
func TestSameIDRetriesAcrossKilledLeader(t *testing.T) {
	c := nodetest.NewCluster(t, 3)
	const capacity = 100_000
	applyPolicies(t, c, longBucket("p", capacity))
	var retries atomic.Int64
	cl := newClient(t, c, client.Config{OnRetry: func(client.RetryInfo) { retries.Add(1) }})

	got := &admitted{ids: map[string]bool{}}
	var done atomic.Int64
	errs := make(chan error, 16)
	var wg sync.WaitGroup
	const workers, each = 16, 40
	for range workers {
		wg.Go(func() {
			for range each {
				if err := admitUntilKnown(t, cl, client.Request{Policy: "p", Key: "k"}, got); err != nil {
					errs <- err
					return
				}
				done.Add(1)
			}
		})
	}
	c.Eventually(t, 20*time.Second, "admissions under way", func() error {
		if done.Load() < workers*each/4 {
			return fmt.Errorf("%d admitted", done.Load())
		}
		return nil
	})
	c.Kill(c.Leader(t))
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	p, err := cl.Peek(ctx, "p", "k")
	if err != nil {
		t.Fatal(err)
	}
	if want := int64(capacity - got.len()); p.Remaining != want {
		t.Fatalf("remaining %d, want %d (capacity %d − %d admitted IDs)", p.Remaining, want, capacity, got.len())
	}
	t.Logf("%d admitted, %d retries, %d outcome-unknown answers, %d duplicate answers", got.len(), retries.Load(), got.unknown.Load(), got.duplicate.Load())
}

// countingTransport counts the calls of each procedure.
type countingTransport struct {
	next  http.RoundTripper
	mu    sync.Mutex
	calls map[string]int
}

func (t *countingTransport) RoundTrip(r *http.Request) (*http.Response, error) {
	t.mu.Lock()
	t.calls[r.URL.Path]++
	t.mu.Unlock()
	return t.next.RoundTrip(r)
}

func (t *countingTransport) count(path string) int {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.calls[path]
}

// TestCoalescing: concurrent Admits to one leader go as AdmitBatch calls,
// and each caller gets its own answer.
func TestCoalescing(t *testing.T) {
	c := nodetest.NewCluster(t, 3)
	const capacity = 1_000_000
	applyPolicies(t, c, longBucket("p", capacity))
	tr := &countingTransport{next: c.HTTPClient().Transport, calls: map[string]int{}}
	cl := newClient(t, c, client.Config{HTTPClient: &http.Client{Transport: tr}})
	got := &admitted{ids: map[string]bool{}}
	var wg sync.WaitGroup
	const workers, each = 32, 30
	errs := make(chan error, workers)
	for w := range workers {
		wg.Go(func() {
			for range each {
				if err := admitUntilKnown(t, cl, client.Request{Policy: "p", Key: fmt.Sprintf("k%d", w%4)}, got); err != nil {
					errs <- err
					return
				}
			}
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
	if got.len() != workers*each {
		t.Fatalf("%d admitted, want %d", got.len(), workers*each)
	}
	batches := tr.count("/quorate.v1.AdmissionService/AdmitBatch")
	unary := tr.count("/quorate.v1.AdmissionService/Admit")
	if batches == 0 {
		t.Fatalf("no AdmitBatch call (%d Admit calls)", unary)
	}
	if batches+unary >= workers*each {
		t.Fatalf("%d AdmitBatch and %d Admit calls for %d admissions: nothing coalesced", batches, unary, workers*each)
	}
	t.Logf("%d admissions in %d AdmitBatch and %d Admit calls", workers*each, batches, unary)
	st := cl.Stats()
	if st.Verified != workers*each || st.Unavailable+st.Bypassed+st.Local != 0 {
		t.Fatalf("stats %+v", st)
	}
}

// encodingTransport records the Content-Encoding of each AdmitBatch answer.
type encodingTransport struct {
	next http.RoundTripper
	mu   sync.Mutex
	seen []string
}

func (t *encodingTransport) RoundTrip(r *http.Request) (*http.Response, error) {
	resp, err := t.next.RoundTrip(r)
	if err == nil && r.URL.Path == "/quorate.v1.AdmissionService/AdmitBatch" {
		t.mu.Lock()
		t.seen = append(t.seen, resp.Header.Get("Content-Encoding"))
		t.mu.Unlock()
	}
	return resp, err
}

func (t *encodingTransport) take() []string {
	t.mu.Lock()
	defer t.mu.Unlock()
	s := t.seen
	t.seen = nil
	return s
}

// TestBatchAnswersAreNotCompressed: the Go client asks for no gzip, so a
// node sends an AdmitBatch's answer as it is, where a Connect client that
// accepts gzip (connect's default) gets the same answer compressed.
func TestBatchAnswersAreNotCompressed(t *testing.T) {
	c := nodetest.NewCluster(t, 3)
	applyPolicies(t, c, longBucket("p", 1_000_000))
	tr := &encodingTransport{next: c.HTTPClient().Transport}
	const n = 200 // an answer well over the nodes' 4 KiB compression threshold
	reqs := make([]client.Request, n)
	msg := &quoratev1.AdmitBatchRequest{}
	for i := range reqs {
		reqs[i] = client.Request{Policy: "p", Key: fmt.Sprintf("k%d", i)}
		msg.Requests = append(msg.Requests, &quoratev1.AdmitRequest{Policy: "p", Key: fmt.Sprintf("k%d", i)})
	}
	raw := quoratev1connect.NewAdmissionServiceClient(&http.Client{Transport: tr}, c.APIURL(0))
	c.Eventually(t, 10*time.Second, "a gzip answer to a plain Connect client", func() error {
		ctx, cancel := context.WithTimeout(context.Background(), 3*time.Second)
		defer cancel()
		if _, err := raw.AdmitBatch(ctx, connect.NewRequest(msg)); err != nil {
			return err
		}
		if got := tr.take(); len(got) != 1 || got[0] != "gzip" {
			return fmt.Errorf("answers encoded %q, want one gzip", got)
		}
		return nil
	})

	// The client's own AdmitBatch splits a batch by leader; through Invoke
	// the whole batch is one call, and its answer carries all 200 results.
	cl := newClient(t, c, client.Config{HTTPClient: &http.Client{Transport: tr}})
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	resp, err := client.Invoke(ctx, cl, client.Call{Procedure: "AdmitBatch"},
		func(ctx context.Context, s client.Services) (*connect.Response[quoratev1.AdmitBatchResponse], error) {
			return s.Admission.AdmitBatch(ctx, connect.NewRequest(msg))
		})
	if err != nil {
		t.Fatal(err)
	}
	if len(resp.GetResults()) != n {
		t.Fatalf("%d results, want %d", len(resp.GetResults()), n)
	}
	for i, r := range cl.AdmitBatch(ctx, reqs) {
		if r.Err != nil || !r.Decision.Allowed {
			t.Fatalf("request %d: %+v", i, r)
		}
	}
	got := tr.take()
	if len(got) == 0 {
		t.Fatal("the client sent no AdmitBatch call")
	}
	for _, enc := range got {
		if enc != "" {
			t.Fatalf("the client got answers encoded %q, want none compressed", got)
		}
	}
}
