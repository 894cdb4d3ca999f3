package main

import (
	"bytes"
	"context"
	"reflect"
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
