package clienttest

import (
	"context"
	"fmt"
	"testing"
	"time"

	"google.golang.org/protobuf/types/known/durationpb"

	"github.com/quorate/quorate/client"
	"github.com/quorate/quorate/node/nodetest"
	quoratev1 "github.com/quorate/quorate/proto/quorate/v1"
)

// TestOnUnavailableModes stops the whole cluster: deny denies, allow
// bypasses, local admits at most its share of the policy, and Stats counts
// each apart from the verified decisions made before.
func TestOnUnavailableModes(t *testing.T) {
	c := nodetest.NewCluster(t, 3)
	hour := durationpb.New(time.Hour)
	applyPolicies(t, c,
		&quoratev1.Policy{Name: "closed", Algorithm: "token_bucket", Limit: 30, Period: hour, OnUnavailable: "deny"},
		&quoratev1.Policy{Name: "open", Algorithm: "token_bucket", Limit: 30, Period: hour, OnUnavailable: "allow"},
		&quoratev1.Policy{Name: "shared", Algorithm: "token_bucket", Limit: 30, Period: hour, OnUnavailable: "local"})
	cl := newClient(t, c, client.Config{Timeout: 300 * time.Millisecond})
	ctx := context.Background()
	for _, p := range []string{"closed", "open", "shared"} {
		d, err := cl.Admit(ctx, client.Request{Policy: p, Key: "k"})
		if err != nil || d.Outcome != client.Verified || !d.Allowed {
			t.Fatalf("%s with the cluster up: %+v, %v", p, d, err)
		}
	}
	c.Eventually(t, 10*time.Second, "the client keeps the policies", func() error {
		if got := len(cl.Policies()); got != 3 {
			return fmt.Errorf("%d policies kept", got)
		}
		return nil
	})
	for i := range c.Len() {
		c.Stop(i)
	}

	d, err := cl.Admit(ctx, client.Request{Policy: "closed", Key: "k"})
	if err != nil || d.Outcome != client.Unavailable || d.Allowed || d.Cause == nil {
		t.Fatalf("deny: %+v, %v", d, err)
	}
	d, err = cl.Admit(ctx, client.Request{Policy: "open", Key: "k"})
	if err != nil || d.Outcome != client.Bypassed || !d.Allowed {
		t.Fatalf("allow: %+v, %v", d, err)
	}
	allowed := 0
	const tries = 15
	for range tries {
		d, err := cl.Admit(ctx, client.Request{Policy: "shared", Key: "k"})
		if err != nil || d.Outcome != client.LocalDecision {
			t.Fatalf("local: %+v, %v", d, err)
		}
		if d.Allowed {
			allowed++
		}
	}
	if allowed != 10 {
		t.Fatalf("local admitted %d of %d, want its share: 10 (a third of 30)", allowed, tries)
	}
	// NoFallback returns the error instead.
	if d, err := cl.Admit(ctx, client.Request{Policy: "open", Key: "k", NoFallback: true}); err == nil {
		t.Fatalf("NoFallback with the cluster down: %+v", d)
	}
	want := client.Stats{Verified: 3, Unavailable: 1, Bypassed: 1, Local: tries}
	if got := cl.Stats(); got != want {
		t.Fatalf("stats %+v, want %+v", got, want)
	}
}

// TestConfiguredPolicies: a client that may not read the policies applies
// the on_unavailable of those it was given.
func TestConfiguredPolicies(t *testing.T) {
	cl, err := client.New(client.Config{Servers: []string{"127.0.0.1:1"}, Timeout: 100 * time.Millisecond,
		LocalShare: 0.5, Policies: []client.Policy{{Name: "p", Limit: 4, Period: time.Hour, OnUnavailable: "local"}}})
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	allowed := 0
	for range 5 {
		d, err := cl.Admit(context.Background(), client.Request{Policy: "p", Key: "k"})
		if err != nil || d.Outcome != client.LocalDecision {
			t.Fatalf("%+v, %v", d, err)
		}
		if d.Allowed {
			allowed++
		}
	}
	if allowed != 2 {
		t.Fatalf("admitted %d, want 2 (half of 4)", allowed)
	}
	if _, err := cl.Admit(context.Background(), client.Request{Policy: "unknown", Key: "k"}); err == nil {
		t.Fatal("an unknown policy with no server: no error")
	}
}
