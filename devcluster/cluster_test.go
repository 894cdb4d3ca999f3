package devcluster

import (
	"context"
	"errors"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"connectrpc.com/connect"
	"google.golang.org/protobuf/types/known/durationpb"

	"github.com/quorate/quorate/node/nodetest"
	quoratev1 "github.com/quorate/quorate/proto/quorate/v1"
	"github.com/quorate/quorate/proto/quorate/v1/quoratev1connect"
)

// testConfig is a cluster of nodes in dir with groups data groups, on free
// ports.
func testConfig(t *testing.T, dir string, nodes, groups int) Config {
	base, err := nodetest.FreePorts(2 * nodes)
	if err != nil {
		t.Fatal(err)
	}
	return Config{Dir: dir, Nodes: nodes, Groups: groups, APIPort: base, RaftPort: base + nodes, LogLevel: "warn",
		Logs: new(Output), Heartbeat: 500 * time.Millisecond, ReadyTimeout: time.Minute, TLS: true}
}

// startReady starts cfg's cluster and waits until it is ready with
// policies, failing the test otherwise; the cluster stops at the test's end
// unless stopped before.
func startReady(t *testing.T, cfg Config, policies []*quoratev1.Policy) *Cluster {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	c, err := Start(ctx, cfg)
	if err != nil {
		t.Fatalf("Start: %v", err)
	}
	if err := c.Ready(ctx, policies); err != nil {
		t.Fatalf("Ready: %v", errors.Join(err, c.Stop()))
	}
	t.Cleanup(func() { _ = c.Stop() })
	return c
}

// A TLS cluster of three nodes with data groups: ready with every member,
// a leader of each group and the policies applied, reachable with the
// admin certificate of its CA (and only over TLS); restarted from its
// directory, it keeps its groups and policies and refuses other --groups.
func TestClusterStartsReadyAndRestarts(t *testing.T) {
	dir := t.TempDir()
	cfg := testConfig(t, dir, 3, 2)
	policy := &quoratev1.Policy{Name: "p", Algorithm: "token_bucket", Limit: 10, Period: durationpb.New(time.Minute)}
	c := startReady(t, cfg, []*quoratev1.Policy{policy})
	if c.Restarted() {
		t.Error("a new cluster says it was restarted")
	}
	if st := c.Status(); st.GetLeaderId() == "" || len(st.GetMembers()) != 3 || len(st.GetShardMap().GetGroups()) != 2 {
		t.Fatalf("ready status: leader %q, %d members, %d groups", st.GetLeaderId(), len(st.GetMembers()), len(st.GetShardMap().GetGroups()))
	}
	if ps := c.Policies(); len(ps) != 1 || ps[0].GetName() != "p" || ps[0].GetVersion() != 1 {
		t.Fatalf("policies after Ready: %v", ps)
	}
	if !strings.HasPrefix(c.BaseURL(), "https://") || c.TLS() == nil || c.TLS().Dir != filepath.Join(dir, "tls") {
		t.Fatalf("a TLS cluster: base %s, files %+v", c.BaseURL(), c.TLS())
	}
	for _, f := range []string{c.TLS().CA, c.TLS().Admin.CertFile, c.TLS().Admin.KeyFile, filepath.Join(dir, recordFile)} {
		if _, err := os.Stat(f); err != nil {
			t.Errorf("after Ready: %v", err)
		}
	}
	hc, err := c.TLS().httpClient()
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	for _, n := range c.Nodes() {
		admit := quoratev1connect.NewAdmissionServiceClient(hc, "https://"+n.APIAddr())
		resp, err := admit.Admit(ctx, connect.NewRequest(&quoratev1.AdmitRequest{Policy: "p", Key: "k"}))
		if err != nil || !resp.Msg.GetAllowed() {
			t.Fatalf("admit through %s: %v, %v", n.APIAddr(), resp, err)
		}
	}
	plain := quoratev1connect.NewAdminServiceClient(http.DefaultClient, "http://"+c.Nodes()[0].APIAddr())
	if _, err := plain.ClusterStatus(ctx, connect.NewRequest(&quoratev1.ClusterStatusRequest{})); err == nil {
		t.Error("a plaintext call reached the TLS cluster")
	}
	if err := c.Stop(); err != nil {
		t.Fatalf("Stop: %v", err)
	}

	other := cfg
	other.Groups, other.GroupsGiven = 4, true
	if c, err := Start(context.Background(), other); err == nil {
		t.Fatalf("restart with --groups 4 of a cluster of 2 groups started: %v", errors.Join(c.Stop()))
	} else if !strings.Contains(err.Error(), "--groups 4") || !strings.Contains(err.Error(), "--groups 2") {
		t.Errorf("restart with other groups: %v, want an error naming both --groups", err)
	}
	c = startReady(t, cfg, nil)
	if !c.Restarted() || len(c.Status().GetShardMap().GetGroups()) != 2 {
		t.Fatalf("restart: restarted %t, %d groups", c.Restarted(), len(c.Status().GetShardMap().GetGroups()))
	}
	if ps := c.Policies(); len(ps) != 1 || ps[0].GetName() != "p" || ps[0].GetVersion() != 1 {
		t.Fatalf("policies after a restart: %v", ps)
	}
}
