package node_test

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"connectrpc.com/connect"

	"github.com/quorate/quorate/node"
	"github.com/quorate/quorate/node/nodetest"
	quoratev1 "github.com/quorate/quorate/proto/quorate/v1"
	"github.com/quorate/quorate/proto/quorate/v1/quoratev1connect"
)

// newGroupsCluster starts 3 nodes with groups data groups and waits until
// each has a leader that applied its ownership.
func newGroupsCluster(t *testing.T, groups int) *nodetest.Cluster {
	t.Helper()
	c := nodetest.NewClusterWith(t, nodetest.Options{Nodes: 3, Configure: func(i int, cfg *node.Config) {
		cfg.DataGroups, cfg.ExpectNodes = groups, 3
	}})
	c.Eventually(t, 30*time.Second, "every data group led", func() error {
		led := map[uint32]bool{}
		for i := range c.Len() {
			for _, g := range c.Node(i).Status().GetGroups() {
				if g.GetId() != 0 && g.GetRole() == "leader" && g.GetSlots() > 0 {
					led[g.GetId()] = true
				}
			}
		}
		if len(led) != groups {
			return fmt.Errorf("%d of %d groups led", len(led), groups)
		}
		return nil
	})
	return c
}

// saveAll reads a whole backup through admin: the meta group's pages, then
// each data group's of the shard map.
func saveAll(ctx context.Context, admin quoratev1connect.AdminServiceClient, pageBytes uint32) ([]*quoratev1.SaveSnapshotResponse, error) {
	var pages []*quoratev1.SaveSnapshotResponse
	groups := []uint32{0}
	for i := 0; i < len(groups); i++ {
		req := &quoratev1.SaveSnapshotRequest{Group: groups[i], MaxBytes: pageBytes}
		for {
			resp, err := admin.SaveSnapshot(ctx, connect.NewRequest(req))
			if err != nil {
				return nil, fmt.Errorf("group %d: %w", groups[i], err)
			}
			pages = append(pages, resp.Msg)
			if i == 0 && req.GetSession() == "" {
				for _, g := range resp.Msg.GetShardMap().GetGroups() {
					groups = append(groups, g.GetId())
				}
			}
			if resp.Msg.GetDone() {
				break
			}
			req.Session, req.Offset = resp.Msg.GetSession(), req.GetOffset()+uint64(resp.Msg.GetRecords())
		}
	}
	return pages, nil
}

// A save taken while admits run holds every spend acknowledged before it
// started; restored into a new three-node cluster with another number of
// groups, no key admits more than its capacity minus those spends, nor
// fewer than its capacity minus every admit ever tried.
func TestSnapshotSaveUnderTrafficRestoresEverySpend(t *testing.T) {
	const capacity, keys, workers = 40, 16, 4
	src := newGroupsCluster(t, 2)
	applyBucket(t, src, "p", capacity)

	var acked, tried [keys]atomic.Int64
	stop := make(chan struct{})
	var wg sync.WaitGroup
	for w := range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := w; ; i++ {
				select {
				case <-stop:
					return
				default:
				}
				k := i % keys
				tried[k].Add(1)
				ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
				resp, err := admit(ctx, src, i%src.Len(), "p", fmt.Sprintf("key-%d", k), 1)
				cancel()
				if err == nil && resp.GetAllowed() {
					acked[k].Add(1)
				}
			}
		}()
	}
	// Some traffic first, then the save while it goes on.
	src.Eventually(t, 20*time.Second, "admits before the save", func() error {
		if n := acked[keys-1].Load(); n < 5 {
			return fmt.Errorf("%d admits of the last key", n)
		}
		return nil
	})
	var before [keys]int64
	for k := range keys {
		before[k] = acked[k].Load()
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	pages, err := saveAll(ctx, src.Admin(1), 2048) // small pages: several per group
	if err != nil {
		t.Fatal(err)
	}
	afterSave := acked[0].Load()
	src.Eventually(t, 20*time.Second, "admits after the save", func() error {
		if n := acked[0].Load(); n <= afterSave && n < capacity {
			return fmt.Errorf("no admit of key-0 since the save (%d)", n)
		}
		return nil
	})
	close(stop)
	wg.Wait()

	if len(pages) < 4 || pages[0].GetClusterId() == "" || len(pages[0].GetPolicies()) != 1 || len(pages[0].GetShardMap().GetGroups()) != 2 {
		t.Fatalf("%d pages; the first: %v", len(pages), pages[0])
	}
	for _, p := range pages {
		if p.GetAppliedIndex() == 0 {
			t.Fatalf("a page without its applied index: %v", p)
		}
	}

	dst := newGroupsCluster(t, 3)
	if _, err := dst.Admin(2).ApplyPolicies(ctx, connect.NewRequest(&quoratev1.ApplyPoliciesRequest{Policies: pages[0].GetPolicies()})); err != nil {
		t.Fatal(err)
	}
	into := map[uint32]bool{}
	for _, p := range pages {
		if len(p.GetState()) == 0 {
			continue
		}
		resp, err := dst.Admin(2).RestoreSnapshot(ctx, connect.NewRequest(&quoratev1.RestoreSnapshotRequest{
			State: p.GetState(), SourceNowUnixNano: p.GetNowUnixNano()}))
		if err != nil {
			t.Fatalf("restore group %d's page: %v", p.GetGroup(), err)
		}
		for _, g := range resp.Msg.GetGroups() {
			into[g] = true
		}
	}
	if len(into) != 3 {
		t.Fatalf("the restore wrote into groups %v, want all 3", into)
	}
	for k := range keys {
		key := fmt.Sprintf("key-%d", k)
		allowed := int64(0)
		for {
			resp, err := admit(ctx, dst, k%dst.Len(), "p", key, 1)
			if err != nil {
				t.Fatalf("%s: %v", key, err)
			}
			if !resp.GetAllowed() {
				break
			}
			allowed++
		}
		if hi, lo := capacity-before[k], capacity-tried[k].Load(); allowed > hi || allowed < max(lo, 0) {
			t.Errorf("%s: %d admits after the restore; %d were acknowledged before the save, %d tried in all: want between %d and %d",
				key, allowed, before[k], tried[k].Load(), max(lo, 0), hi)
		}
	}
}

// Saving and restoring need the admin role: a client's calls are refused
// before anything is read or written.
func TestSnapshotCallsNeedTheAdminRole(t *testing.T) {
	e := newAccessEnv(t)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	_, err := e.admin(t, "app-a", 0).SaveSnapshot(ctx, connect.NewRequest(&quoratev1.SaveSnapshotRequest{}))
	wantAccessCode(t, "client saves", err, connect.CodePermissionDenied, "app-a", "admin")
	_, err = e.admin(t, "app-a", 1).RestoreSnapshot(ctx, connect.NewRequest(&quoratev1.RestoreSnapshotRequest{}))
	wantAccessCode(t, "client restores", err, connect.CodePermissionDenied, "app-a", "admin")
	resp, err := e.admin(t, "ops", 1).SaveSnapshot(ctx, connect.NewRequest(&quoratev1.SaveSnapshotRequest{}))
	wantAccessCode(t, "admin saves", err, 0)
	if !resp.Msg.GetDone() || resp.Msg.GetClusterId() == "" {
		t.Fatalf("the meta group's save of an empty cluster: %v", resp.Msg)
	}
	_, err = e.admin(t, "ops", 1).SaveSnapshot(ctx, connect.NewRequest(&quoratev1.SaveSnapshotRequest{MaxBytes: 64 << 20}))
	wantAccessCode(t, "a page too large", err, connect.CodeInvalidArgument, "max_bytes")
}
