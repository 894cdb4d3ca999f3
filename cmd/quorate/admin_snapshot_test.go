package main

import (
	"context"
	"encoding/binary"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"connectrpc.com/connect"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/durationpb"

	"github.com/quorate/quorate/node"
	"github.com/quorate/quorate/node/nodetest"
	quoratev1 "github.com/quorate/quorate/proto/quorate/v1"
)

// `admin snapshot save` writes a backup of a real cluster, and `admin
// snapshot restore` makes a new three-node cluster (with data groups, the
// source has none) from it: the spends and the lease are there. A damaged, truncated or
// other-version file is refused before anything is applied, and so is a
// second restore into the now non-empty cluster.
func TestAdminSnapshotSaveRestore(t *testing.T) {
	const limit, spent = 10, 4
	src := nodetest.NewCluster(t, 1)
	ctx, cancel := context.WithTimeout(context.Background(), 45*time.Second)
	defer cancel()
	policy := &quoratev1.Policy{Name: "fw", Algorithm: "fixed_window", Limit: limit, Period: durationpb.New(time.Hour)}
	conc := &quoratev1.Policy{Name: "conc", Algorithm: "concurrency", Limit: 1, LeaseTtl: durationpb.New(time.Hour)}
	if _, err := src.Admin(0).ApplyPolicies(ctx, connect.NewRequest(&quoratev1.ApplyPoliciesRequest{Policies: []*quoratev1.Policy{policy, conc}})); err != nil {
		t.Fatal(err)
	}
	lease, err := src.Lease(0).AcquireLease(ctx, connect.NewRequest(&quoratev1.AcquireLeaseRequest{Policy: "conc", Key: "job-1", Caller: "worker"}))
	if err != nil || !lease.Msg.GetAllowed() {
		t.Fatalf("acquire: %v, %v", lease, err)
	}
	for range spent {
		resp, err := src.Admission(0).Admit(ctx, connect.NewRequest(&quoratev1.AdmitRequest{Policy: "fw", Key: "user-1"}))
		if err != nil || !resp.Msg.GetAllowed() {
			t.Fatalf("admit: %v, %v", resp, err)
		}
	}

	dir := t.TempDir()
	file := filepath.Join(dir, "q.qbak")
	out, _, err := runCLI(t, "admin", "snapshot", "save", file, "--server", src.APIURL(0))
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(out, "saved "+file) || !strings.Contains(out, "2 policies, 2 keys") || !strings.Contains(out, "applied indexes: meta at index ") {
		t.Fatalf("save said %q", out)
	}
	if ents, _ := os.ReadDir(dir); len(ents) != 1 {
		t.Fatalf("the save left %d files in its directory", len(ents))
	}
	good, err := os.ReadFile(file)
	if err != nil {
		t.Fatal(err)
	}

	dst := nodetest.NewClusterWith(t, nodetest.Options{Nodes: 3, Configure: func(i int, cfg *node.Config) {
		cfg.DataGroups, cfg.ExpectNodes = 2, 3
	}})
	bad := func(name string, b []byte) string {
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, b, 0o600); err != nil {
			t.Fatal(err)
		}
		return p
	}
	flipped := append([]byte(nil), good...)
	flipped[len(flipped)/2] ^= 0x40
	other := append([]byte(backupMagic), binary.AppendUvarint(nil, backupVersion+1)...)
	other = append(other, good[len(backupMagic)+1:]...)
	for _, tc := range []struct {
		file string
		want []string
	}{
		{bad("flipped.qbak", flipped), []string{"flipped.qbak", "checksum"}},
		{bad("truncated.qbak", good[:len(good)-40]), []string{"truncated.qbak", "checksum"}},
		{bad("short.qbak", good[:10]), []string{"short.qbak", "does not start as a Quorate backup"}},
		{bad("v2.qbak", other), []string{"v2.qbak", "format version 2", "reads version 1 only"}},
	} {
		_, _, err := runCLI(t, "admin", "snapshot", "restore", tc.file, "--server", dst.APIURL(0))
		wantErrNaming(t, err, tc.want...)
		if !errors.Is(err, errBadBackup) {
			t.Errorf("%s: %v is not errBadBackup", tc.file, err)
		}
	}
	pols, err := dst.Admin(0).ListPolicies(ctx, connect.NewRequest(&quoratev1.ListPoliciesRequest{}))
	if err != nil || len(pols.Msg.GetPolicies()) != 0 {
		t.Fatalf("refused files applied something: %v, %v", pols, err)
	}

	out, _, err = runCLI(t, "admin", "snapshot", "restore", file, "--server", dst.APIURL(1))
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(out, "2 policies, 2 state records") {
		t.Fatalf("restore said %q", out)
	}
	nodetest.Eventually(t, 20*time.Second, "the restored policy on a data group", func() error {
		_, err := dst.Admission(2).Admit(ctx, connect.NewRequest(&quoratev1.AdmitRequest{Policy: "fw", Key: "other"}))
		return err
	})
	resp, err := dst.Admission(2).Admit(ctx, connect.NewRequest(&quoratev1.AdmitRequest{Policy: "fw", Key: "user-1"}))
	if err != nil || !resp.Msg.GetAllowed() || resp.Msg.GetRemaining() != limit-spent-1 {
		t.Fatalf("admit after the restore: %v, %v; want %d remaining", resp, err, limit-spent-1)
	}
	// The lease is held still, for the time it had left.
	again, err := dst.Lease(1).AcquireLease(ctx, connect.NewRequest(&quoratev1.AcquireLeaseRequest{Policy: "conc", Key: "job-1", Caller: "other"}))
	if err != nil || again.Msg.GetAllowed() {
		t.Fatalf("acquire of the restored, held lease: %v, %v; want denied", again, err)
	}
	restored, err := dst.Admin(0).GetPolicy(ctx, connect.NewRequest(&quoratev1.GetPolicyRequest{Name: "fw"}))
	if err != nil || !proto.Equal(restored.Msg.GetPolicy().GetPeriod(), policy.GetPeriod()) || restored.Msg.GetPolicy().GetLimit() != limit {
		t.Fatalf("restored policy: %v, %v", restored, err)
	}

	_, _, err = runCLI(t, "admin", "snapshot", "restore", file, "--server", dst.APIURL(0))
	wantErrNaming(t, err, "not new", "2 policies", "--overwrite")
	if _, _, err := runCLI(t, "admin", "snapshot", "restore", file, "--overwrite", "--server", dst.APIURL(0)); err != nil {
		t.Fatalf("--overwrite: %v", err)
	}
}

// A cluster that expects data groups but has not made them yet (here one
// node of the three it waits for) takes no state: a restore waits for the
// shard map until --timeout and then fails saying so, rather than writing
// the keys into the meta group, where the map would leave them behind.
func TestAdminSnapshotRestoreWaitsForTheShardMap(t *testing.T) {
	src := nodetest.NewCluster(t, 1)
	ctx, cancel := context.WithTimeout(context.Background(), 45*time.Second)
	defer cancel()
	policy := &quoratev1.Policy{Name: "fw", Algorithm: "fixed_window", Limit: 10, Period: durationpb.New(time.Hour)}
	if _, err := src.Admin(0).ApplyPolicies(ctx, connect.NewRequest(&quoratev1.ApplyPoliciesRequest{Policies: []*quoratev1.Policy{policy}})); err != nil {
		t.Fatal(err)
	}
	if resp, err := src.Admission(0).Admit(ctx, connect.NewRequest(&quoratev1.AdmitRequest{Policy: "fw", Key: "user-1"})); err != nil || !resp.Msg.GetAllowed() {
		t.Fatalf("admit: %v, %v", resp, err)
	}
	file := filepath.Join(t.TempDir(), "q.qbak")
	if _, _, err := runCLI(t, "admin", "snapshot", "save", file, "--server", src.APIURL(0)); err != nil {
		t.Fatal(err)
	}

	dst := nodetest.NewClusterWith(t, nodetest.Options{Nodes: 1, Configure: func(i int, cfg *node.Config) {
		cfg.DataGroups, cfg.ExpectNodes = 2, 3
	}})
	_, _, err := runCLI(t, "admin", "snapshot", "restore", file, "--timeout", "2s", "--server", dst.APIURL(0))
	wantErrNaming(t, err, "q.qbak", "0 state records written", "no shard map yet")
	st, err := dst.Admin(0).ClusterStatus(ctx, connect.NewRequest(&quoratev1.ClusterStatusRequest{}))
	if err != nil {
		t.Fatal(err)
	}
	for _, m := range st.Msg.GetMembers() {
		for _, g := range m.GetStatus().GetGroups() {
			if g.GetKeys() != 0 {
				t.Errorf("group %d on %s holds %d keys; want none before the shard map", g.GetId(), m.GetId(), g.GetKeys())
			}
		}
	}
}
