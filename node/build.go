package node

import (
	"runtime"
	"runtime/debug"
	"strings"

	"github.com/prometheus/client_golang/prometheus"
)

// The build's stamps, set by the linker (`make build`):
//
//	-X github.com/quorate/quorate/node.stampVersion=$(git describe --tags --always --dirty)
//	-X github.com/quorate/quorate/node.stampCommit=$(git rev-parse HEAD)
//	-X github.com/quorate/quorate/node.stampBuildDate=$(date -u +%Y-%m-%dT%H:%M:%SZ)
//
// Constants in all but name: only the linker writes them. A build without
// them (go build, go install) reports what the Go toolchain recorded
// (runtime/debug.ReadBuildInfo).
var stampVersion, stampCommit, stampBuildDate string

// BuildInfo is what a binary knows of its own build: `quorate version`
// prints it, /metrics exports it (quorate_build_info) and every node logs it
// when it starts.
type BuildInfo struct {
	// Version is `git describe --tags --always --dirty` of the checkout
	// built (v1.2.3, v1.2.3-4-gabcdef0, abcdef0-dirty), else the main
	// module's version: a tag, a pseudo-version or "(devel)".
	Version string `json:"version"`
	// Commit is the commit built; "" when the build has no stamp of it.
	Commit string `json:"commit"`
	// CommitTime is that commit's time (RFC 3339, UTC), when the Go
	// toolchain recorded it.
	CommitTime string `json:"commitTime"`
	// BuildDate is when the binary was built (RFC 3339, UTC); "" unless
	// stamped.
	BuildDate string `json:"buildDate"`
	// Modified: the checkout had changes not committed.
	Modified  bool   `json:"modified"`
	GoVersion string `json:"goVersion"`
	Platform  string `json:"platform"` // GOOS/GOARCH
}

// Build returns this binary's BuildInfo: the linker's stamps, else the Go
// toolchain's record.
func Build() BuildInfo {
	info, ok := debug.ReadBuildInfo()
	if !ok {
		info = nil
	}
	return buildInfoOf(info, stampVersion, stampCommit, stampBuildDate)
}

// buildInfoOf is the BuildInfo of the stamps given (each may be "") over
// the toolchain's record info (which may be nil).
func buildInfoOf(info *debug.BuildInfo, version, commit, buildDate string) BuildInfo {
	b := BuildInfo{Version: "(unknown)", GoVersion: runtime.Version(), Platform: runtime.GOOS + "/" + runtime.GOARCH}
	if info != nil {
		if info.Main.Version != "" {
			b.Version = info.Main.Version
		}
		for _, s := range info.Settings {
			switch s.Key {
			case "vcs.revision":
				b.Commit = s.Value
			case "vcs.time":
				b.CommitTime = s.Value
			case "vcs.modified":
				b.Modified = s.Value == "true"
			}
		}
	}
	if version != "" {
		b.Version = version
		b.Modified = strings.HasSuffix(version, "-dirty")
	}
	if commit != "" {
		if commit != b.Commit {
			b.CommitTime = "" // the toolchain's time is another commit's
		}
		b.Commit = commit
	}
	b.BuildDate = buildDate
	return b
}

// buildInfoGauge is quorate_build_info: 1, labelled with the build.
func buildInfoGauge(b BuildInfo) prometheus.Collector {
	commit := b.Commit
	if commit == "" {
		commit = "unknown"
	}
	return prometheus.NewGaugeFunc(prometheus.GaugeOpts{
		Name:        "quorate_build_info",
		Help:        "Always 1, labelled with this binary's version (git describe), commit and Go version.",
		ConstLabels: prometheus.Labels{"version": b.Version, "commit": commit, "go_version": b.GoVersion},
	}, func() float64 { return 1 })
}

// logAttrs are the build's fields of a node's start-up log line.
func (b BuildInfo) logAttrs() []any {
	return []any{"version", b.Version, "commit", b.Commit, "build_date", b.BuildDate, "go", b.GoVersion}
}
