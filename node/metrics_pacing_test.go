package node_test

import (
	"context"
	"fmt"
	"math"
	"testing"
	"time"

	"connectrpc.com/connect"
	dto "github.com/prometheus/client_model/go"
	"google.golang.org/protobuf/types/known/durationpb"

	"github.com/quorate/quorate/node/nodetest"
	quoratev1 "github.com/quorate/quorate/proto/quorate/v1"
)

// series is the metric of family name in mfs whose labels include want,
// or nil.
func series(mfs map[string]*dto.MetricFamily, name string, want map[string]string) *dto.Metric {
	for _, m := range mfs[name].GetMetric() {
		l := labelsOf(m)
		ok := true
		for k, v := range want {
			ok = ok && l[k] == v
		}
		if ok {
			return m
		}
	}
	return nil
}

// TestMetricsPacingQueue: Admits with max_wait on a policy of one token
// per 10 s are given waits of 0, 10, 20, 30 and 40 s; the node asked
// counts them in quorate_pacing_wait_seconds and four callers waiting; a
// denied one is not counted. An AcquireLease parked for a slot shows as a
// waiting lease caller until a release frees the slot.
func TestMetricsPacingQueue(t *testing.T) {
	c := nodetest.NewCluster(t, 3)
	applyPolicies(t, c, tbPolicy("paced", 1, 10*time.Second, 1))
	applyConcurrency(t, c, "gpu", 1, time.Hour)
	policiesEverywhere(t, c, "paced", "gpu")
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	admit := func(maxWait time.Duration) *quoratev1.AdmitResponse {
		t.Helper()
		resp, err := c.Admission(1).Admit(ctx, connect.NewRequest(&quoratev1.AdmitRequest{
			Policy: "paced", Key: "k", MaxWait: durationpb.New(maxWait)}))
		if err != nil {
			t.Fatal(err)
		}
		return resp.Msg
	}
	var given time.Duration
	for j := range 5 {
		r := admit(time.Minute)
		if !r.GetAllowed() {
			t.Fatalf("admit %d with max_wait 1m: %v", j, r)
		}
		given += r.GetWait().AsDuration()
	}
	if r := admit(time.Second); r.GetAllowed() {
		t.Fatalf("an admit that would wait 50s allowed with max_wait 1s: %v", r)
	}
	mfs := scrape(t, c, 1)
	admits := map[string]string{"policy": "paced", "kind": "admit"}
	h := series(mfs, "quorate_pacing_wait_seconds", admits).GetHistogram()
	if h.GetSampleCount() != 5 || math.Abs(h.GetSampleSum()-given.Seconds()) > 0.01 || given < 95*time.Second {
		t.Errorf("quorate_pacing_wait_seconds: %d waits summing %vs, want 5 summing %v (about 100s)", h.GetSampleCount(), h.GetSampleSum(), given)
	}
	if n := series(mfs, "quorate_pacing_waiting", admits).GetGauge().GetValue(); n != 4 {
		t.Errorf("quorate_pacing_waiting of admits %v, want 4", n)
	}
	if age := series(mfs, "quorate_pacing_oldest_wait_seconds", admits).GetGauge().GetValue(); age < 0 || age > 10 {
		t.Errorf("quorate_pacing_oldest_wait_seconds of admits %v, want within the first wait (10s)", age)
	}
	for _, i := range []int{0, 2} {
		if m := series(scrape(t, c, i), "quorate_pacing_wait_seconds", admits); m.GetHistogram().GetSampleCount() != 0 {
			t.Errorf("node %d, not asked, counted paced admits: %v", i, m)
		}
	}

	first, err := acquire(ctx, c, 0, "gpu", "model-a", "first")
	if err != nil || !first.GetAllowed() {
		t.Fatalf("first lease: %v, %v", first, err)
	}
	got := make(chan *quoratev1.AcquireLeaseResponse, 1)
	go func() {
		resp, err := c.Lease(1).AcquireLease(ctx, connect.NewRequest(&quoratev1.AcquireLeaseRequest{
			Policy: "gpu", Key: "model-a", Caller: "worker", RequestId: "second", MaxWait: durationpb.New(30 * time.Second)}))
		if err != nil {
			t.Error(err)
			got <- nil
			return
		}
		got <- resp.Msg
	}()
	leases := map[string]string{"policy": "gpu", "kind": "lease"}
	nodetest.Eventually(t, 20*time.Second, "the parked acquire counted", func() error {
		mfs := scrape(t, c, 1)
		n := series(mfs, "quorate_pacing_waiting", leases).GetGauge().GetValue()
		age := series(mfs, "quorate_pacing_oldest_wait_seconds", leases).GetGauge().GetValue()
		if n != 1 || age <= 0 {
			return fmt.Errorf("lease callers waiting %v, oldest %vs; want 1, > 0", n, age)
		}
		return nil
	})
	if _, err := c.Lease(2).ReleaseLease(ctx, connect.NewRequest(&quoratev1.ReleaseLeaseRequest{
		LeaseId: first.GetLeaseId(), FencingToken: first.GetFencingToken(), Caller: "worker", RequestId: "rel-first"})); err != nil {
		t.Fatal(err)
	}
	second := <-got
	if second == nil || !second.GetAllowed() {
		t.Fatalf("the parked acquire: %v", second)
	}
	mfs = scrape(t, c, 1)
	if n := series(mfs, "quorate_pacing_waiting", leases).GetGauge().GetValue(); n != 0 {
		t.Errorf("lease callers waiting %v after the acquire was answered, want 0", n)
	}
	lh := series(mfs, "quorate_pacing_wait_seconds", leases).GetHistogram()
	if lh.GetSampleCount() != 1 || math.Abs(lh.GetSampleSum()-second.GetWaited().AsDuration().Seconds()) > 0.001 {
		t.Errorf("lease waits: %d summing %vs, want the one of %v", lh.GetSampleCount(), lh.GetSampleSum(), second.GetWaited().AsDuration())
	}
}
