package devcluster

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"time"

	"connectrpc.com/connect"

	quoratev1 "github.com/quorate/quorate/proto/quorate/v1"
	"github.com/quorate/quorate/proto/quorate/v1/quoratev1connect"
)

// pollInterval is how often Ready polls a starting cluster.
const pollInterval = 100 * time.Millisecond

// poll calls try every pollInterval until it reports done, the deadline
// passes (then the error names what and the last problem), ctx ends or a node
// fails.
func (c *Cluster) poll(ctx context.Context, what string, deadline time.Time, try func(context.Context) (done bool, problem error)) error {
	err := Poll(ctx, pollInterval, 2*time.Second, deadline, c.failed, try)
	var (
		st PollStopped
		dl PollDeadline
	)
	switch {
	case errors.As(err, &st):
		return c.Failure()
	case errors.As(err, &dl):
		return fmt.Errorf("dev: %s: not done by the --ready-timeout deadline: %w", what, dl.Problem)
	}
	return err
}

// rpcError names the call and the node of a failed call.
func rpcError(procedure, base string, err error) error {
	return fmt.Errorf("%s on %s: %w", procedure, base, err)
}

// waitReady polls ClusterStatus at base until a leader is known, all the
// nodes answer with their status and API address and, with data groups,
// the shard map exists and every group has a leader.
func (c *Cluster) waitReady(ctx context.Context, base string, deadline time.Time) (*quoratev1.ClusterStatusResponse, error) {
	client := quoratev1connect.NewAdminServiceClient(c.hc, base)
	var status *quoratev1.ClusterStatusResponse
	err := c.poll(ctx, "waiting for the cluster", deadline, func(ctx context.Context) (bool, error) {
		resp, err := client.ClusterStatus(ctx, connect.NewRequest(&quoratev1.ClusterStatusRequest{}))
		if err != nil {
			return false, rpcError("ClusterStatus", base, err)
		}
		if problem := readiness(resp.Msg, c.cfg.Nodes, c.cfg.Groups); problem != nil {
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
func (c *Cluster) applyPolicies(ctx context.Context, base string, policies []*quoratev1.Policy, deadline time.Time) ([]*quoratev1.Policy, error) {
	client := quoratev1connect.NewAdminServiceClient(c.hc, base)
	var stored []*quoratev1.Policy
	err := c.poll(ctx, "applying policies", deadline, func(ctx context.Context) (bool, error) {
		resp, err := client.ApplyPolicies(ctx, connect.NewRequest(&quoratev1.ApplyPoliciesRequest{Policies: policies}))
		if err != nil {
			code := connect.CodeOf(err)
			retry := code == connect.CodeUnavailable || code == connect.CodeDeadlineExceeded
			return !retry, rpcError("ApplyPolicies", base, err)
		}
		stored = resp.Msg.GetPolicies()
		return true, nil
	})
	return stored, err
}

// listPolicies returns the policies already stored (e.g. after a restart).
func (c *Cluster) listPolicies(ctx context.Context, base string) ([]*quoratev1.Policy, error) {
	ctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	resp, err := quoratev1connect.NewAdminServiceClient(c.hc, base).ListPolicies(ctx, connect.NewRequest(&quoratev1.ListPoliciesRequest{}))
	if err != nil {
		return nil, rpcError("ListPolicies", base, err)
	}
	return resp.Msg.GetPolicies(), nil
}

// recordFile, in Dir, records how the cluster was created.
const recordFile = "dev.json"

// record is what recordFile holds.
type record struct {
	Groups int `json:"groups"` // --groups of the new cluster
}

// readRecord reads dir's recordFile; false when there is none.
func readRecord(dir string) (record, bool, error) {
	var r record
	b, err := os.ReadFile(filepath.Join(dir, recordFile))
	if errors.Is(err, fs.ErrNotExist) {
		return r, false, nil
	}
	if err == nil {
		err = json.Unmarshal(b, &r)
	}
	if err != nil {
		return r, false, fmt.Errorf("dev: %s: %w", filepath.Join(dir, recordFile), err)
	}
	return r, true, nil
}

func writeRecord(dir string, r record) error {
	b, err := json.Marshal(r)
	if err == nil {
		err = os.WriteFile(filepath.Join(dir, recordFile), append(b, '\n'), 0o644)
	}
	if err != nil {
		return fmt.Errorf("dev: recording the cluster's --groups: %w", err)
	}
	return nil
}
