package local

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync/atomic"
	"time"

	"github.com/quorate/quorate/admission"
	"github.com/quorate/quorate/client"
	quoratev1 "github.com/quorate/quorate/proto/quorate/v1"
)

// Config is what a Decider needs of its node.
type Config struct {
	// Grant makes one Grant call as the node's Grant handler would (routed
	// to the key's group leader); its errors are Connect errors.
	Grant func(ctx context.Context, req *quoratev1.GrantRequest) (*quoratev1.GrantResponse, error)
	// Policy is the named policy as the node's meta replica has it.
	Policy func(name string) (admission.Policy, bool)
	// PolicyAPI is the same in the API's form, for the grants' sizing.
	PolicyAPI func(name string) (*quoratev1.Policy, bool)
	// Caller is who the node holds its grants as.
	Caller string
	// Timeout is each Grant call's deadline.
	Timeout time.Duration
	Logger  *slog.Logger
}

// Decider decides a node's requests on hot keys of policies with local
// decisions from the grants the node holds (see the package doc).
type Decider struct {
	holder *client.Holder
	policy func(name string) (admission.Policy, bool)
	hot    hotness
	ids    answers
	// duplicates counts the repeats answered from answers.
	duplicates atomic.Uint64
}

// New returns a Decider holding no grant yet.
func New(cfg Config) (*Decider, error) {
	if cfg.Policy == nil {
		return nil, errors.New("local: Config.Policy is required")
	}
	d := &Decider{policy: cfg.Policy}
	h, err := client.NewHolder(client.HolderConfig{Grant: cfg.Grant, Policy: cfg.PolicyAPI,
		Want:   func(policy, key string) bool { return d.hot.miss(policy, key, time.Now()) },
		Caller: cfg.Caller, Timeout: cfg.Timeout, Logger: cfg.Logger})
	if err != nil {
		return nil, err
	}
	d.holder = h
	return d, nil
}

// Admit decides m, checked and with its caller set, from the node's grants
// when it can: nil and no error means decide it through the cluster, as
// before. Only a request every check of which names a policy with local
// decisions, without pacing and not marked strict, is looked at. A request with a request ID is
// decided here only the first time this node sees it (caller, request ID,
// key): a repeat gets the first answer (duplicate, spending nothing) when
// it was decided here, and goes to the cluster when the cluster decided it,
// whose record answers it; a repeat asking something else is refused as the
// cluster refuses it. A repeat at another node is a request that node has
// not seen: it may be charged again, from a grant or the log, never past
// the policy.
func (d *Decider) Admit(ctx context.Context, m *quoratev1.AdmitRequest) (*quoratev1.AdmitResponse, error) {
	if m.GetStrict() || m.GetMaxWait() != nil {
		return nil, nil
	}
	p, ok := d.localPolicy(m.GetPolicy())
	if !ok {
		return nil, nil
	}
	r := &client.Request{Policy: m.GetPolicy(), Key: m.GetKey(), Cost: m.GetCost()}
	for _, c := range m.GetAlso() {
		if _, ok := d.localPolicy(c.GetPolicy()); !ok {
			return nil, nil
		}
		r.Also = append(r.Also, client.Check{Policy: c.GetPolicy(), Key: c.GetKey(), Cost: c.GetCost()})
	}
	if m.GetRequestId() == "" {
		if dec := d.holder.Decide(r); dec != nil {
			return response(dec), nil
		}
		return nil, nil
	}
	first, resp, err := d.ids.claim(ctx, m, retention(p), time.Now())
	if err != nil || !first {
		if resp != nil {
			d.duplicates.Add(1)
		}
		return resp, err
	}
	dec := d.holder.Decide(r)
	if dec == nil {
		d.ids.settle(m, nil)
		return nil, nil
	}
	resp = response(dec)
	d.ids.settle(m, resp)
	return resp, nil
}

// retention is how long p's request IDs are remembered.
func retention(p admission.Policy) time.Duration {
	if p.DedupeRetention > 0 {
		return p.DedupeRetention
	}
	return admission.DefaultDedupeRetention
}

// localPolicy is the named policy when it has local decisions.
func (d *Decider) localPolicy(name string) (admission.Policy, bool) {
	p, ok := d.policy(name)
	if !ok || p.Local.Mode == "" {
		return admission.Policy{}, false
	}
	return p, true
}

// Stats are a node's local decisions.
type Stats struct {
	client.HolderStats
	// Duplicates are the repeats of requests decided here answered with
	// their first answer; RequestIDs the requests with an ID remembered.
	Duplicates uint64
	RequestIDs int
}

// Stats returns the Decider's counters.
func (d *Decider) Stats() Stats {
	return Stats{HolderStats: d.holder.Stats(), Duplicates: d.duplicates.Load(), RequestIDs: d.ids.len()}
}

// ErrDecidedLocally is the refusal of a refund of a request the node
// decided from its grant: the key's log holds no record of it.
var ErrDecidedLocally = errors.New("decided from a budget lease this node holds")

// CheckRefund refuses (ErrDecidedLocally) a refund of the request named
// (caller, request ID, key) when this node decided it from its grant.
func (d *Decider) CheckRefund(caller, requestID, key string) error {
	if d.ids.decidedHere(nameOf(caller, requestID, key)) {
		return fmt.Errorf("request_id %s on key %s: %w, so the key's log holds no record of it to refund; "+
			"send a request you may refund with strict: true", admission.Quote(requestID), admission.Quote(key), ErrDecidedLocally)
	}
	return nil
}

// Status is Stats as a node's status reports it.
func (d *Decider) Status() *quoratev1.NodeGrants {
	s := d.Stats()
	return &quoratev1.NodeGrants{Held: s.GrantsHeld, LocalDecisions: s.LocalGrant, Duplicates: s.Duplicates,
		UnitsGranted: s.UnitsGranted, UnitsReturned: s.UnitsReturned, UnitsWasted: s.UnitsWasted}
}

// Close gives back what the node's grants hold unspent (client.Holder.
// Close); Admit decides nothing locally after it.
func (d *Decider) Close() { d.holder.Close() }
