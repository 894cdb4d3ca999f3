package main

import (
	"strings"
	"testing"
	"time"

	"google.golang.org/protobuf/types/known/timestamppb"

	quoratev1 "github.com/quorate/quorate/proto/quorate/v1"
)

// `quorate admin status` lists the replicas that report a storage error,
// after the tables, and prints nothing more when none does.
func TestWriteClusterStatusShowsStorageErrors(t *testing.T) {
	at := timestamppb.New(time.Date(2026, 12, 1, 14, 0, 0, 0, time.UTC))
	s := &quoratev1.ClusterStatusResponse{AnsweredBy: "a", LeaderId: "a", Members: []*quoratev1.MemberStatus{
		member("a", &quoratev1.GroupState{Id: 0, Role: "leader"}),
		member("b", &quoratev1.GroupState{Id: 0, Role: "follower", StorageError: "writing log entries to /d/raft/raft.db: no space left on device", StorageErrorAt: at},
			&quoratev1.GroupState{Id: 3, Role: "damaged", StorageError: "node: group 3 replica: /d/groups/3/raft.db is damaged: ...", StorageErrorAt: at}),
	}}
	var out strings.Builder
	if err := writeClusterStatus(&out, s); err != nil {
		t.Fatal(err)
	}
	want := "\nstorage errors:\n" +
		"  b, group 0 (follower), 2026-12-01T14:00:00Z: writing log entries to /d/raft/raft.db: no space left on device\n" +
		"  b, group 3 (damaged), 2026-12-01T14:00:00Z: node: group 3 replica: /d/groups/3/raft.db is damaged: ...\n"
	if !strings.HasSuffix(out.String(), want) {
		t.Errorf("status:\n%s\nwant it to end with:\n%s", out.String(), want)
	}

	s.Members[1] = member("b", &quoratev1.GroupState{Id: 0, Role: "follower"})
	out.Reset()
	if err := writeClusterStatus(&out, s); err != nil {
		t.Fatal(err)
	}
	if strings.Contains(out.String(), "storage errors") {
		t.Errorf("status without storage errors lists some:\n%s", out.String())
	}
}
