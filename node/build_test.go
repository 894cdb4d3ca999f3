package node

import (
	"runtime/debug"
	"testing"
)

// The linker's stamps win over the Go toolchain's record, which fills in
// what was not stamped.
func TestBuildInfoOf(t *testing.T) {
	record := &debug.BuildInfo{Main: debug.Module{Version: "v1.2.3"}, Settings: []debug.BuildSetting{
		{Key: "vcs", Value: "git"}, {Key: "vcs.revision", Value: "0123abcd"},
		{Key: "vcs.time", Value: "2026-12-01T10:00:00Z"}, {Key: "vcs.modified", Value: "true"}}}
	for _, tc := range []struct {
		name                  string
		info                  *debug.BuildInfo
		version, commit, date string
		want                  BuildInfo
	}{
		{"the toolchain's record", record, "", "", "",
			BuildInfo{Version: "v1.2.3", Commit: "0123abcd", CommitTime: "2026-12-01T10:00:00Z", Modified: true}},
		{"stamped", record, "v1.2.4-2-g89abcdef", "89abcdef", "2026-12-02T11:00:00Z",
			BuildInfo{Version: "v1.2.4-2-g89abcdef", Commit: "89abcdef", BuildDate: "2026-12-02T11:00:00Z"}},
		{"stamped dirty, same commit", record, "0123abcd-dirty", "0123abcd", "2026-12-02T11:00:00Z",
			BuildInfo{Version: "0123abcd-dirty", Commit: "0123abcd", CommitTime: "2026-12-01T10:00:00Z", BuildDate: "2026-12-02T11:00:00Z", Modified: true}},
		{"no record", nil, "", "", "", BuildInfo{Version: "(unknown)"}},
	} {
		got := buildInfoOf(tc.info, tc.version, tc.commit, tc.date)
		if got.GoVersion == "" || got.Platform == "" {
			t.Errorf("%s: no Go version or platform: %+v", tc.name, got)
		}
		got.GoVersion, got.Platform = "", ""
		if got != tc.want {
			t.Errorf("%s: %+v, want %+v", tc.name, got, tc.want)
		}
	}
}
