package main

import (
	"bytes"
	"context"
	"strings"
	"testing"
)

func TestFlagsAreChecked(t *testing.T) {
	for _, tc := range []struct {
		args []string
		flag string
	}{
		{[]string{"--nodes", "4"}, "--nodes"},
		{[]string{"--duration", "10ms"}, "--duration"},
		{[]string{"--clients", "0"}, "--clients"},
	} {
		var out bytes.Buffer
		err := run(context.Background(), tc.args, &out)
		if err == nil || !strings.Contains(err.Error(), tc.flag) {
			t.Errorf("%v: %v, want an error naming %s", tc.args, err, tc.flag)
		}
	}
}
