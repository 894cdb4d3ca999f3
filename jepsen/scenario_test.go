package jepsen

import (
	"archive/tar"
	"bytes"
	"context"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	quoratev1 "github.com/quorate/quorate/proto/quorate/v1"
)

// ResolveRevision says why a revision cannot be built, as ErrNoRevision:
// a directory that is not a git checkout, and a first commit's parent.
func TestResolveRevisionWithoutHistory(t *testing.T) {
	if _, err := exec.LookPath("git"); err != nil {
		t.Skip("git is not installed")
	}
	ctx := context.Background()
	plain := t.TempDir()
	if _, err := ResolveRevision(ctx, plain, "HEAD~1"); !errors.Is(err, ErrNoRevision) || !strings.Contains(err.Error(), "not a git checkout") {
		t.Errorf("a plain directory: %v, want ErrNoRevision naming it not a git checkout", err)
	}
	repo := t.TempDir()
	for _, args := range [][]string{{"init", "-q"}, {"-c", "user.name=q", "-c", "user.email=q@example.com", "commit", "-q", "--allow-empty", "-m", "first"}} {
		if b, err := exec.Command("git", append([]string{"-C", repo}, args...)...).CombinedOutput(); err != nil {
			t.Fatalf("git %v: %v\n%s", args, err, b)
		}
	}
	if _, err := ResolveRevision(ctx, repo, "HEAD~1"); !errors.Is(err, ErrNoRevision) || !strings.Contains(err.Error(), "no parent") {
		t.Errorf("the first commit's parent: %v, want ErrNoRevision naming no parent", err)
	}
	rev, err := ResolveRevision(ctx, repo, "HEAD")
	if err != nil || len(rev.Commit) != 40 || rev.Version == "" {
		t.Errorf("HEAD: %+v, %v", rev, err)
	}
}

// extractTar refuses a path that leaves its directory.
func TestExtractTarRefusesEscape(t *testing.T) {
	var buf bytes.Buffer
	tw := tar.NewWriter(&buf)
	for _, name := range []string{"ok/file.go", "../escape.go"} {
		if err := tw.WriteHeader(&tar.Header{Name: name, Mode: 0o644, Size: 1, Typeflag: tar.TypeReg}); err != nil {
			t.Fatal(err)
		}
		if _, err := tw.Write([]byte("x")); err != nil {
			t.Fatal(err)
		}
	}
	if err := tw.Close(); err != nil {
		t.Fatal(err)
	}
	dir := filepath.Join(t.TempDir(), "x")
	err := extractTar(&buf, dir)
	if err == nil || !strings.Contains(err.Error(), "leaves the directory") {
		t.Errorf("extract: %v, want a refusal of ../escape.go", err)
	}
	if _, err := os.Stat(filepath.Join(dir, "ok", "file.go")); err != nil {
		t.Errorf("the file before it: %v", err)
	}
	if _, err := os.Stat(filepath.Join(filepath.Dir(dir), "escape.go")); err == nil {
		t.Error("../escape.go was written")
	}
}

// wholeProblems finds a group whose voters are not exactly the members,
// a non-voter, and a group without a leader.
func TestWholeProblems(t *testing.T) {
	member := func(id string, groups ...*quoratev1.GroupState) *quoratev1.MemberStatus {
		return &quoratev1.MemberStatus{Id: id, Suffrage: "voter", Status: &quoratev1.NodeState{Id: id, Groups: groups}}
	}
	led := func(id uint32, voters ...string) *quoratev1.GroupState {
		return &quoratev1.GroupState{Id: id, Role: "leader", Voters: voters}
	}
	live := []string{"n3", "n4", "n5"}
	whole := &quoratev1.ClusterStatusResponse{Members: []*quoratev1.MemberStatus{
		member("n3", led(0, "n5", "n4", "n3")), member("n4"), member("n5")}}
	if p := wholeProblems(whole, live); len(p) != 0 {
		t.Errorf("a whole cluster: %v", p)
	}
	for name, st := range map[string]*quoratev1.ClusterStatusResponse{
		"the survivor alone a voter": {Members: []*quoratev1.MemberStatus{member("n3", led(0, "n3")), member("n4"), member("n5")}},
		"a lost node still a voter":  {Members: []*quoratev1.MemberStatus{member("n3", led(0, "n1", "n3", "n4")), member("n4"), member("n5")}},
		"a non-voter": {Members: []*quoratev1.MemberStatus{member("n3", &quoratev1.GroupState{Id: 0, Role: "leader",
			Voters: live, Nonvoters: []string{"n6"}}), member("n4"), member("n5")}},
		"no leader": {Members: []*quoratev1.MemberStatus{member("n3", &quoratev1.GroupState{Id: 0, Role: "follower", Voters: live}),
			member("n4"), member("n5")}},
		"a lost node a member": {Members: []*quoratev1.MemberStatus{member("n3", led(0, live...)), member("n4"), member("n5"),
			{Id: "n1", Error: "connection refused"}}},
	} {
		if p := wholeProblems(st, live); len(p) == 0 {
			t.Errorf("%s: no problem found", name)
		}
	}
}
