package main

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"sync"
	"time"

	"connectrpc.com/connect"

	"github.com/quorate/quorate/node"
	quoratev1 "github.com/quorate/quorate/proto/quorate/v1"
)

// devPollInterval is how often dev polls a starting cluster.
const devPollInterval = 100 * time.Millisecond

// devCluster runs the nodes of `quorate dev`, each in its own goroutine, and
// notices when one stops on its own.
type devCluster struct {
	ctx    context.Context // the nodes' Run context
	cancel context.CancelFunc
	wg     sync.WaitGroup
	failed chan struct{} // closed when a node stops before it was asked to
	hc     *http.Client  // dev's calls to the cluster's API (TLS with --tls)

	mu      sync.Mutex
	errs    []error // errors of nodes asked to stop
	failErr error   // the first node that stopped on its own
}

func newDevCluster(parent context.Context, hc *http.Client) *devCluster {
	ctx, cancel := context.WithCancel(parent)
	return &devCluster{ctx: ctx, cancel: cancel, failed: make(chan struct{}), hc: hc}
}

// start runs n until the cluster stops.
func (c *devCluster) start(id string, n *node.Node) {
	c.wg.Add(1)
	go func() {
		defer c.wg.Done()
		err := n.Run(c.ctx)
		c.mu.Lock()
		defer c.mu.Unlock()
		if c.ctx.Err() != nil {
			if err != nil {
				c.errs = append(c.errs, fmt.Errorf("dev: %s: %w", id, err))
			}
			return
		}
		if err == nil {
			err = errors.New("stopped unexpectedly")
		}
		if c.failErr == nil {
			c.failErr = fmt.Errorf("dev: %s: %w", id, err)
			close(c.failed)
		}
	}()
}

// failure returns the error of the first node that stopped on its own.
func (c *devCluster) failure() error {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.failErr
}

// stop stops every node, waits for them and returns their shutdown errors.
func (c *devCluster) stop() error {
	c.cancel()
	c.wg.Wait()
	c.mu.Lock()
	defer c.mu.Unlock()
	return errors.Join(c.errs...)
}

// poll calls try every devPollInterval until it reports done, the deadline
// passes (then the error names what and the last problem), ctx ends or a node
// fails.
func (c *devCluster) poll(ctx context.Context, what string, deadline time.Time, try func(context.Context) (done bool, problem error)) error {
	err := pollEvery(ctx, devPollInterval, 2*time.Second, deadline, c.failed, try)
	var (
		st pollStopped
		dl pollDeadline
	)
	switch {
	case errors.As(err, &st):
		return c.failure()
	case errors.As(err, &dl):
		return fmt.Errorf("dev: %s: not done by the --ready-timeout deadline: %w", what, dl.problem)
	}
	return err
}

// waitReady polls ClusterStatus at base until a leader is known, all n
// members answer with their status and API address and, with data groups,
// the shard map exists and every group has a leader.
func (c *devCluster) waitReady(ctx context.Context, base string, n, groups int, deadline time.Time) (*quoratev1.ClusterStatusResponse, error) {
	client := newAdminClient(c.hc, base)
	var status *quoratev1.ClusterStatusResponse
	err := c.poll(ctx, "waiting for the cluster", deadline, func(ctx context.Context) (bool, error) {
		resp, err := client.ClusterStatus(ctx, connect.NewRequest(&quoratev1.ClusterStatusRequest{}))
		if err != nil {
			return false, wrapRPC("ClusterStatus", base, "", err)
		}
		if problem := readiness(resp.Msg, n, groups); problem != nil {
			return false, problem
		}
		status = resp.Msg
		return true, nil
	})
	return status, err
}

// readiness says why s is not yet a ready cluster of n members and groups
// data groups, or nil.
func readiness(s *quoratev1.ClusterStatusResponse, n, groups int) error {
	if s.GetLeaderId() == "" {
		return errors.New("no leader yet")
	}
	if len(s.GetMembers()) != n {
		return fmt.Errorf("%d of %d members joined", len(s.GetMembers()), n)
	}
	for _, m := range s.GetMembers() {
		switch {
		case m.GetStatus() == nil:
			return fmt.Errorf("member %s has not answered: %s", m.GetId(), m.GetError())
		case m.GetApiAddr() == "":
			return fmt.Errorf("member %s has not registered its API address", m.GetId())
		}
	}
	if groups == 0 {
		return nil
	}
	if len(s.GetShardMap().GetGroups()) == 0 {
		return errors.New("no shard map yet")
	}
	led := map[uint32]bool{}
	for _, m := range s.GetMembers() {
		for _, g := range m.GetStatus().GetGroups() {
			if g.GetRole() == "leader" && g.GetMapEpoch() == s.GetShardMap().GetEpoch() {
				led[g.GetId()] = true
			}
		}
	}
	for _, g := range s.GetShardMap().GetGroups() {
		if !led[g.GetId()] {
			return fmt.Errorf("data group %d has no leader with the current shard map yet", g.GetId())
		}
	}
	return nil
}

// applyPolicies applies policies at base, retrying while the cluster is
// Unavailable, and returns them as stored (with versions).
func (c *devCluster) applyPolicies(ctx context.Context, base string, policies []*quoratev1.Policy, deadline time.Time) ([]*quoratev1.Policy, error) {
	client := newAdminClient(c.hc, base)
	var stored []*quoratev1.Policy
	err := c.poll(ctx, "applying policies", deadline, func(ctx context.Context) (bool, error) {
		resp, err := client.ApplyPolicies(ctx, connect.NewRequest(&quoratev1.ApplyPoliciesRequest{Policies: policies}))
		if err != nil {
			code := connect.CodeOf(err)
			retry := code == connect.CodeUnavailable || code == connect.CodeDeadlineExceeded
			return !retry, wrapRPC("ApplyPolicies", base, "", err)
		}
		stored = resp.Msg.GetPolicies()
		return true, nil
	})
	return stored, err
}

// listPolicies returns the policies already stored (e.g. after a restart).
func (c *devCluster) listPolicies(ctx context.Context, base string) ([]*quoratev1.Policy, error) {
	ctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	resp, err := newAdminClient(c.hc, base).ListPolicies(ctx, connect.NewRequest(&quoratev1.ListPoliciesRequest{}))
	if err != nil {
		return nil, wrapRPC("ListPolicies", base, "", err)
	}
	return resp.Msg.GetPolicies(), nil
}
