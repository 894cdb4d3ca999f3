package main

import "testing"

// TestByteSize parses and prints --memory-limit's sizes.
func TestByteSize(t *testing.T) {
	for _, c := range []struct {
		in   string
		want int64
		out  string
	}{
		{"0", 0, "0"},
		{"1048577", 1048577, "1048577"},
		{"512MiB", 512 << 20, "512MiB"},
		{"2GiB", 2 << 30, "2GiB"},
		{"3KiB", 3 << 10, "3KiB"},
		{"1536MiB", 1536 << 20, "1536MiB"},
	} {
		var n int64
		if err := (byteSize{&n}).Set(c.in); err != nil || n != c.want {
			t.Fatalf("Set(%q) = %d, %v; want %d", c.in, n, err, c.want)
		}
		if got := (byteSize{&n}).String(); got != c.out {
			t.Errorf("String of %d = %q, want %q", n, got, c.out)
		}
	}
	for _, bad := range []string{"", "-1", "1GB", "1.5GiB", "MiB", "99999999999GiB"} {
		var n int64
		if err := (byteSize{&n}).Set(bad); err == nil {
			t.Errorf("Set(%q) = %d, want an error", bad, n)
		}
	}
}
