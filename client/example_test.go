package client_test

import (
	"context"
	"errors"
	"fmt"
	"log"
	"net/http"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"

	"github.com/quorate/quorate/client"
)

func Example() {
	c, err := client.New(client.Config{
		Servers: []string{"http://127.0.0.1:7070", "http://127.0.0.1:7071"},
		Caller:  "checkout",
	})
	if err != nil {
		log.Fatal(err)
	}
	defer c.Close()

	ctx, cancel := context.WithTimeout(context.Background(), time.Second)
	defer cancel()
	d, err := c.Admit(ctx, client.Request{Policy: "api", Key: "tenant:acme"})
	var unknown *client.OutcomeUnknownError
	switch {
	case errors.As(err, &unknown):
		// Retry later with unknown.RequestID: it spends at most once.
		log.Printf("outcome unknown; retry with request ID %s", unknown.RequestID)
	case err != nil:
		log.Fatal(err)
	case !d.Allowed:
		fmt.Printf("denied (%v); retry after %v\n", d.Outcome, d.RetryAfter)
	case d.Outcome != client.Verified:
		fmt.Printf("allowed without the cluster: %v\n", d.Outcome)
	default:
		fmt.Printf("allowed, %d left\n", d.Remaining)
	}
}

func ExampleClient_Admit_multiCheck() {
	c, err := client.New(client.Config{Servers: []string{"http://127.0.0.1:7070"}})
	if err != nil {
		log.Fatal(err)
	}
	defer c.Close()
	// Both limits are checked and charged atomically: their keys share the
	// hash tag {tenant:acme}.
	d, err := c.Admit(context.Background(), client.Request{
		Policy: "per-tenant", Key: "{tenant:acme}",
		Also: []client.Check{{Policy: "per-ip", Key: "{tenant:acme}:ip:192.0.2.7"}},
	})
	if err != nil {
		log.Fatal(err)
	}
	if !d.Allowed {
		fmt.Printf("denied by %s\n", d.Checks[d.DeniedCheck].Policy)
	}
}

func ExampleClient_AcquireLease() {
	c, err := client.New(client.Config{Servers: []string{"http://127.0.0.1:7070"}})
	if err != nil {
		log.Fatal(err)
	}
	defer c.Close()
	l, err := c.AcquireLease(context.Background(), "reports-active", "tenant:acme", time.Minute)
	var denied *client.LeaseDeniedError
	if errors.As(err, &denied) {
		fmt.Printf("busy; retry after %v\n", denied.RetryAfter)
		return
	}
	if err != nil {
		log.Fatal(err)
	}
	defer l.Release(context.Background())
	// The work stops when the lease is lost; it writes with l.Token() so a
	// resource can refuse an older holder.
	work(l.Context(), l.Token())
}

func ExampleLease_Renew() {
	c, err := client.New(client.Config{Servers: []string{"http://127.0.0.1:7070"}})
	if err != nil {
		log.Fatal(err)
	}
	defer c.Close()
	ctx := context.Background()
	// The caller renews the lease itself, between steps of its work.
	l, err := c.AcquireLeaseWith(ctx, "reports-active", "tenant:acme", client.LeaseOptions{TTL: time.Minute, ManualRenew: true})
	if err != nil {
		log.Fatal(err)
	}
	for step := range 3 {
		work(l.Context(), l.Token())
		a, err := l.Renew(ctx)
		if errors.Is(err, client.ErrLeaseLost) {
			log.Fatalf("lost after step %d", step)
		}
		if err != nil {
			log.Fatal(err)
		}
		fmt.Println("held until", a.ExpiresAt) // log time
	}
	// Done, but let the slot free only when the lease expires.
	l.Abandon()
}

func ExampleClient_Reserve() {
	c, err := client.New(client.Config{Servers: []string{"http://127.0.0.1:7070"}})
	if err != nil {
		log.Fatal(err)
	}
	defer c.Close()
	ctx := context.Background()
	r, err := c.Reserve(ctx, "llm-tokens", "tenant:acme", 800, 10*time.Minute)
	if err != nil || !r.Allowed {
		log.Fatal("not reserved: ", err)
	}
	used := int64(612) // known once the work is done
	res, err := c.Commit(ctx, r, used)
	if err != nil {
		log.Fatal(err)
	}
	fmt.Printf("charged %d, gave back %d\n", res.Charged, res.Released)
}

func ExampleConfig_policies() {
	// A caller that may not read policies says what to do while the cluster
	// cannot decide: admit up to a quarter of the limit on its own.
	c, err := client.New(client.Config{
		Servers:    []string{"http://127.0.0.1:7070"},
		LocalShare: 0.25,
		Policies:   []client.Policy{{Name: "api", Limit: 100, Period: time.Minute, OnUnavailable: "local"}},
	})
	if err != nil {
		log.Fatal(err)
	}
	defer c.Close()
	d, err := c.Admit(context.Background(), client.Request{Policy: "api", Key: "tenant:acme"})
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println(d.Outcome, d.Allowed)
	fmt.Printf("%+v\n", c.Stats())
}

func work(ctx context.Context, token int64) { _, _ = ctx, token }

// A hot path that reuses one Request and one Decision: a decision the
// client makes from a budget lease (a policy with local.mode grant or
// sync) then allocates nothing and sends nothing.
func ExampleClient_AdmitInto() {
	c, err := client.New(client.Config{Servers: []string{"http://127.0.0.1:7070"}})
	if err != nil {
		log.Fatal(err)
	}
	defer c.Close()
	r := client.Request{Policy: "search", Key: "tenant:acme"}
	var d client.Decision
	for range 1000 {
		if err := c.AdmitInto(context.Background(), &r, &d); err != nil {
			log.Fatal(err)
		}
		if !d.Allowed {
			fmt.Printf("denied; retry after %v\n", d.RetryAfter)
			return
		}
	}
	s := c.Stats()
	fmt.Printf("%d decided from grants, %d by the cluster\n", s.LocalGrant, s.Verified)
}

// The client's counters, exported to Prometheus by the caller's registry.
func ExampleClient_Collector() {
	c, err := client.New(client.Config{Servers: []string{"http://127.0.0.1:7070"}})
	if err != nil {
		log.Fatal(err)
	}
	defer c.Close()
	reg := prometheus.NewRegistry()
	reg.MustRegister(c.Collector())
	http.Handle("/metrics", promhttp.HandlerFor(reg, promhttp.HandlerOpts{}))
}
