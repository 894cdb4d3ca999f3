package main

import (
	"context"
	"errors"
	"strings"
	"sync"
	"testing"
	"time"

	"connectrpc.com/connect"

	quoratev1 "github.com/quorate/quorate/proto/quorate/v1"
	"github.com/quorate/quorate/proto/quorate/v1/quoratev1connect"
)

// drainAdmin answers DrainNode with one move and ClusterStatus as status
// scripts it (n counts calls from 1).
type drainAdmin struct {
	quoratev1connect.UnimplementedAdminServiceHandler
	status func(n int) (*quoratev1.ClusterStatusResponse, error)

	mu    sync.Mutex
	calls int
}

func (f *drainAdmin) DrainNode(context.Context, *connect.Request[quoratev1.DrainNodeRequest]) (*connect.Response[quoratev1.DrainNodeResponse], error) {
	return connect.NewResponse(&quoratev1.DrainNodeResponse{Moves: 1, MapEpoch: 9}), nil
}

func (f *drainAdmin) ClusterStatus(context.Context, *connect.Request[quoratev1.ClusterStatusRequest]) (*connect.Response[quoratev1.ClusterStatusResponse], error) {
	f.mu.Lock()
	f.calls++
	n := f.calls
	f.mu.Unlock()
	s, err := f.status(n)
	if err != nil {
		return nil, err
	}
	return connect.NewResponse(s), nil
}

// A drain's wait reports the errors of its requests instead of swallowing
// them (asking again after a retryable one, ending at another), and gives up
// at --timeout, naming what it waited for and why it had not finished.
func TestDrainWaitReportsErrorsAndHonoursTimeout(t *testing.T) {
	hosting := func(groups ...uint32) *quoratev1.ClusterStatusResponse {
		var gs []*quoratev1.GroupState
		for _, g := range groups {
			gs = append(gs, &quoratev1.GroupState{Id: g, Role: "follower"})
		}
		return &quoratev1.ClusterStatusResponse{
			Members:  []*quoratev1.MemberStatus{member("a", gs...), member("b")},
			ShardMap: &quoratev1.ShardMapStatus{Epoch: 9, Groups: []*quoratev1.ShardGroupStatus{{Id: 2, Replicas: []string{"b", "c"}}}},
		}
	}
	unavailable := connect.NewError(connect.CodeUnavailable, errors.New("no meta leader"))

	// Unavailable, then done: the error is printed and asked again.
	f := &drainAdmin{status: func(n int) (*quoratev1.ClusterStatusResponse, error) {
		if n == 1 {
			return nil, unavailable
		}
		return hosting(), nil
	}}
	_, h := quoratev1connect.NewAdminServiceHandler(f)
	out, errOut, err := runCLI(t, "admin", "node", "drain", "a", "--wait", "--server", serveHandler(t, h, false).URL)
	if err != nil {
		t.Fatalf("drain --wait: %v\n%s", err, errOut)
	}
	if !strings.Contains(errOut, "no meta leader (asking again)") || !strings.Contains(errOut, "waiting up to 10m0s (--timeout) for a to host no data group replica") {
		t.Errorf("stderr does not report the failed request and what it waits for:\n%s", errOut)
	}
	if !strings.Contains(out, "a hosts 0 data group replicas") {
		t.Errorf("output:\n%s", out)
	}

	// An answer that asking again would repeat ends the wait with it.
	f = &drainAdmin{status: func(int) (*quoratev1.ClusterStatusResponse, error) {
		return nil, connect.NewError(connect.CodePermissionDenied, errors.New("not allowed"))
	}}
	_, h = quoratev1connect.NewAdminServiceHandler(f)
	_, _, err = runCLI(t, "admin", "node", "drain", "a", "--wait", "--server", serveHandler(t, h, false).URL)
	wantErrNaming(t, err, "ClusterStatus", "not allowed")

	// Never done: it gives up at --timeout, saying why.
	f = &drainAdmin{status: func(int) (*quoratev1.ClusterStatusResponse, error) { return hosting(2), nil }}
	_, h = quoratev1connect.NewAdminServiceHandler(f)
	start := time.Now()
	out, errOut, err = runCLI(t, "admin", "node", "drain", "a", "--remove", "--timeout", "2s", "--server", serveHandler(t, h, false).URL)
	if d := time.Since(start); d > 10*time.Second {
		t.Errorf("drain --timeout 2s took %v", d)
	}
	wantErrNaming(t, err, "gave up waiting for a to host no data group replica", "--timeout 2s",
		"group 2 → b, c (c has not joined the cluster", "goes on without this command")
	if !strings.Contains(errOut, "still waiting for a to host no data group replica") {
		t.Errorf("stderr has no progress line:\n%s", errOut)
	}
	if strings.Contains(out, "removed") {
		t.Errorf("a node still hosting replicas was removed:\n%s", out)
	}
}
