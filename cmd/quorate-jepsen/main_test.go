package main

import (
	"bytes"
	"context"
	"reflect"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/quorate/quorate/jepsen"
)

func TestFlagsAreChecked(t *testing.T) {
	for _, tc := range []struct {
		args []string
		flag string
	}{
		{[]string{"--nodes", "4"}, "--nodes"},
		{[]string{"--duration", "10ms"}, "--duration"},
		{[]string{"--clients", "0"}, "--clients"},
		{[]string{"--workload", "bogus"}, "--workload"},
		{[]string{"--faults", "kill,flood"}, "--faults"},
		{[]string{"--window", "1500ms"}, "--window"},
		{[]string{"--lease-ttl", "10ms"}, "--lease-ttl"},
		{[]string{"--net", "iptables"}, "--net"},
		{[]string{"--matrix", "huge"}, "--matrix"},
		{[]string{"--planted-bug", "everything"}, "--planted-bug"},
		{[]string{"--faults", "slots,kill"}, "--groups"},
		{[]string{"--interval", "1ms"}, "--interval"},
		{[]string{"--faults", "slots", "--groups", "1"}, "--groups"},
	} {
		var out bytes.Buffer
		err := run(context.Background(), tc.args, &out)
		if err == nil || !strings.Contains(err.Error(), tc.flag) {
			t.Errorf("%v: %v, want an error naming %s", tc.args, err, tc.flag)
		}
	}
}

// The reproduce line a report prints must parse back into the same run.
func TestReproduceCommandRoundTrips(t *testing.T) {
	for _, args := range [][]string{
		{"--seed", "5"},
		{"--seed", "9", "--workload", "lease", "--faults", "partition,clock", "--net", "proxy", "--holders", "3",
			"--lease-ttl", "3s", "--duration", "45s", "--nodes", "5", "--planted-bug", "local-read", "--groups", "8"},
		{"--seed", "11", "--faults", "none", "--window", "3s", "--limit", "7", "--capacity", "9", "--keys", "2", "--clients", "4"},
		{"--seed", "13", "--faults", "slots,kill", "--groups", "4", "--interval", "1s"},
		{"--seed", "17", "--scale", "--faults", "none"},
		{"--seed", "23", "--recovery", "--faults", "none", "--groups", "2"},
		{"--seed", "19", "--tls", "--faults", "kill,partition"},
	} {
		var out bytes.Buffer
		o1, _, err := parse(args, &out)
		if err != nil {
			t.Fatalf("%v: %v", args, err)
		}
		line := jepsen.ReproduceCommand(o1)
		fields := strings.Fields(line)
		if fields[0] != "quorate-jepsen" {
			t.Fatalf("reproduce line %q does not start with quorate-jepsen", line)
		}
		o2, _, err := parse(fields[1:], &out)
		if err != nil {
			t.Fatalf("reproduce line %q: %v", line, err)
		}
		if !reflect.DeepEqual(o1, o2) {
			t.Errorf("%v → %q parses to\n%+v\nwant\n%+v", args, line, o2, o1)
		}
	}
}

// A run driven from a test (options without the command's defaults, no
// interval) reproduces as the command of the same run.
func TestReproduceCommandOfATestRun(t *testing.T) {
	line := jepsen.ReproduceCommand(jepsen.Options{Seed: 42, Duration: 20 * time.Second, Groups: 8,
		Nemesis: jepsen.NemesisOptions{Families: []string{jepsen.FamilyPartition}}})
	var out bytes.Buffer
	o, _, err := parse(strings.Fields(line)[1:], &out)
	if err != nil {
		t.Fatalf("%q: %v", line, err)
	}
	if o.Seed != 42 || o.Duration != 20*time.Second || o.Groups != 8 || o.Nodes != 3 || o.Clients != 6 || o.Keys != 6 ||
		o.Nemesis.Interval != 2*time.Second || !slices.Equal(o.Nemesis.Families, []string{jepsen.FamilyPartition}) ||
		!slices.Equal(o.Workloads, slices.Sorted(slices.Values(jepsen.Workloads))) {
		t.Errorf("%q parses to %+v", line, o)
	}
}

// --scale defaults to 4 data groups; the help names the new families and
// the scale scenario.
func TestScaleAndSlotsFlags(t *testing.T) {
	var out bytes.Buffer
	o, _, err := parse([]string{"--scale"}, &out)
	if err != nil || !o.Scale || o.Groups != 4 {
		t.Fatalf("--scale: %+v %v, want Scale with 4 groups", o, err)
	}
	o, _, err = parse([]string{"--faults", "slots,kill", "--nodes", "3", "--groups", "4", "--duration", "60s"}, &out)
	if err != nil || !slices.Equal(o.Nemesis.Families, []string{jepsen.FamilyKill, jepsen.FamilySlots}) || o.Groups != 4 {
		t.Fatalf("slots,kill: %+v %v", o, err)
	}
	out.Reset()
	if err := run(context.Background(), []string{"--help"}, &out); err == nil {
		t.Fatal("--help ran")
	}
	for _, want := range []string{"-scale", "slots (slot moves"} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("help lacks %q:\n%s", want, out.String())
		}
	}
}
