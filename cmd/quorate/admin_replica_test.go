package main

import (
	"bytes"
	"context"
	"strings"
	"testing"

	quoratev1 "github.com/quorate/quorate/proto/quorate/v1"
)

func member(id string, groups ...*quoratev1.GroupState) *quoratev1.MemberStatus {
	return &quoratev1.MemberStatus{Id: id, Status: &quoratev1.NodeState{Groups: groups}}
}

func TestReplicaMoveState(t *testing.T) {
	g := func(id uint32, role string) *quoratev1.GroupState { return &quoratev1.GroupState{Id: id, Role: role} }
	for _, tc := range []struct {
		members []*quoratev1.MemberStatus
		want    string
	}{
		{[]*quoratev1.MemberStatus{member("a", g(1, "leader")), member("d", g(2, "follower"))}, "waiting for d"},
		{[]*quoratev1.MemberStatus{member("a", g(1, "leader")), member("d", g(1, "follower"))}, "a still hosts"},
		{[]*quoratev1.MemberStatus{member("a", g(2, "leader")), member("d", g(1, "candidate"))}, "d is candidate"},
		{[]*quoratev1.MemberStatus{member("a", g(2, "leader")), member("d", g(1, "follower"))}, "done"},
	} {
		got := replicaMoveState(&quoratev1.ClusterStatusResponse{Members: tc.members}, 1, "a", "d")
		if !strings.Contains(got, tc.want) {
			t.Errorf("state %q, want it to contain %q", got, tc.want)
		}
	}
}

func TestReplicaMoveNeedsItsFlags(t *testing.T) {
	cmd := newRootCmd(new(strings.Builder), new(strings.Builder))
	cmd.SetArgs([]string{"admin", "replica", "move", "--group", "1", "--from", "a"})
	if err := cmd.Execute(); err == nil || !strings.Contains(err.Error(), "--to") {
		t.Fatalf("move without --to: %v, want an error naming --to", err)
	}
}

func TestHostedReplicas(t *testing.T) {
	s := &quoratev1.ClusterStatusResponse{Members: []*quoratev1.MemberStatus{
		member("a", &quoratev1.GroupState{Id: 0}, &quoratev1.GroupState{Id: 2}, &quoratev1.GroupState{Id: 5}),
		{Id: "b"}, // unreachable
	}}
	for id, want := range map[string]int{"a": 2, "b": -1, "zz": -1} {
		if got := hostedReplicas(s, id); got != want {
			t.Errorf("hostedReplicas(%s) = %d, want %d", id, got, want)
		}
	}
}

func TestMovingReplicas(t *testing.T) {
	members := []*quoratev1.MemberStatus{member("a"), member("b"), member("c"), member("d"), {Id: "e"}}
	for _, tc := range []struct {
		want, hosts []string
		out         string
	}{
		{[]string{"a", "b", "c"}, []string{"a", "b", "c"}, ""},
		{[]string{"a", "b", "d"}, []string{"a", "b", "c"}, "+d -c"},
		{[]string{"a", "b", "d"}, []string{"a", "b", "c", "d"}, "-c"},
		{[]string{"a", "b", "e"}, []string{"a", "b"}, ""}, // e unreachable
	} {
		if got := movingReplicas(tc.want, tc.hosts, members); got != tc.out {
			t.Errorf("want %v hosts %v: %q, want %q", tc.want, tc.hosts, got, tc.out)
		}
	}
}

func TestAdminNodeAddFlags(t *testing.T) {
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"admin", "node", "add", "n4", "--api-addr", "127.0.0.1:7073"}, "--raft-addr"},
		{[]string{"admin", "node", "add", "n4", "--raft-addr", "127.0.0.1:7173"}, "--api-addr"},
		{[]string{"admin", "node", "add", "--raft-addr", "a:1", "--api-addr", "a:2"}, "accepts 1 arg"},
	} {
		var out, errOut bytes.Buffer
		err := run(context.Background(), append(tc.args, "--server", "127.0.0.1:1"), &out, &errOut)
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%v: error %v, want one naming %q", tc.args, err, tc.want)
		}
	}
}
