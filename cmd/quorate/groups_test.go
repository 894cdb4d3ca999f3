package main

import (
	"fmt"
	"path/filepath"
	"strings"
	"testing"
)

func TestGroupsFlag(t *testing.T) {
	for _, tc := range []struct {
		set   string
		nodes int
		want  int
		str   string
	}{
		{"auto", 1, 0, "auto"},
		{"auto", 3, 3, "auto"},
		{"auto", 5, 5, "auto"},
		{"0", 3, 0, "0"},
		{"8", 3, 8, "8"},
		{"1024", 1, 1024, "1024"},
	} {
		g := newGroupsFlag()
		if err := g.Set(tc.set); err != nil {
			t.Fatalf("Set(%q): %v", tc.set, err)
		}
		if got := g.resolve(tc.nodes); got != tc.want || g.String() != tc.str {
			t.Errorf("%q with %d nodes: %d groups, printed %q; want %d, %q", tc.set, tc.nodes, got, g.String(), tc.want, tc.str)
		}
	}
	if g := newGroupsFlag(); g.String() != "auto" || g.resolve(3) != 3 {
		t.Errorf("the default is %s (%d groups for 3 nodes), want auto (3)", g, g.resolve(3))
	}
	for _, bad := range []string{"", "eight", "-1", "1025", "2.5", "Auto"} {
		if err := newGroupsFlag().Set(bad); err == nil || !strings.Contains(err.Error(), "neither auto nor a number of data groups from 0 to 1024") {
			t.Errorf("Set(%q): %v", bad, err)
		}
	}
}

// serve's --groups is auto unless given, in its printed configuration and
// in a config file, which takes auto or a number.
func TestServeGroupsAuto(t *testing.T) {
	_, got := printedConfig(t)
	if got["groups"] != "auto" {
		t.Errorf("default groups: %v (%T), want auto", got["groups"], got["groups"])
	}
	dir := t.TempDir()
	_, got = printedConfig(t, "--config", writeTestFile(t, dir, "auto.yaml", "groups: auto\nexpect-nodes: 3\n"))
	if got["groups"] != "auto" || got["expect-nodes"] != 3 {
		t.Errorf("groups: auto read back as %v, expect-nodes %v", got["groups"], got["expect-nodes"])
	}
	_, got = printedConfig(t, "--config", writeTestFile(t, dir, "five.yaml", "groups: 5\n"))
	if got["groups"] != 5 {
		t.Errorf("groups: 5 read back as %v (%T)", got["groups"], got["groups"])
	}
	_, _, err := runCLI(t, "serve", "--config", writeTestFile(t, dir, "bad.yaml", "groups: many\n"), "--print-config")
	wantErrNaming(t, err, "bad.yaml:1", "groups", "auto or a whole number", `"many"`)
	_, _, err = runCLI(t, "serve", "--groups", "-2", "--print-config")
	wantErrNaming(t, err, "--groups", "neither auto nor a number")
}

// A new dev cluster of three nodes without --groups gets three data
// groups, one per node.
func TestDevDefaultGroupsOnePerNode(t *testing.T) {
	apiPort := freePortRange(t, 3)
	raftPort := freePortRange(t, 3, apiPort)
	dev := startDev(t, []string{"dev", "--dir", filepath.Join(t.TempDir(), "state"), "--nodes", "3", "--policies", "",
		"--api-port", fmt.Sprint(apiPort), "--raft-port", fmt.Sprint(raftPort)})
	defer dev.stop(t)
	if out := dev.stdout.String(); !strings.Contains(out, "data groups: 3 ") {
		t.Errorf("the summary does not say 3 data groups:\n%s", out)
	}
}
