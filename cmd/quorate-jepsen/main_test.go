package main

import (
	"bytes"
	"context"
	"reflect"
	"slices"
	"strings"
	"testing"

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
