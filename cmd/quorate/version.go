package main

import (
	"encoding/json"
	"fmt"
	"io"
	"runtime"
	"runtime/debug"

	"github.com/spf13/cobra"
)

// buildInfo is what `quorate version` reports: the module version and the
// version control stamps the Go toolchain records in a binary built from a
// checkout (go build -buildvcs, the default).
type buildInfo struct {
	// Version is the main module's version: a tag (v1.2.3), a
	// pseudo-version of the commit (+dirty when modified), or "(devel)".
	Version string `json:"version"`
	// Commit is the VCS revision built; "" when the build has no VCS stamp.
	Commit string `json:"commit"`
	// CommitTime is that commit's time (RFC 3339, UTC), the build's stamp
	// of when its source is from.
	CommitTime string `json:"commit_time"`
	// Modified: the checkout had changes not committed.
	Modified  bool   `json:"modified"`
	GoVersion string `json:"go_version"`
	Platform  string `json:"platform"` // GOOS/GOARCH
}

// readBuildInfo reads this binary's buildInfo.
func readBuildInfo() buildInfo {
	info, ok := debug.ReadBuildInfo()
	if !ok {
		info = nil
	}
	return buildInfoOf(info)
}

// buildInfoOf reads a buildInfo from the Go toolchain's record of a build;
// info may be nil (a binary built without module support).
func buildInfoOf(info *debug.BuildInfo) buildInfo {
	b := buildInfo{Version: "(unknown)", GoVersion: runtime.Version(), Platform: runtime.GOOS + "/" + runtime.GOARCH}
	if info == nil {
		return b
	}
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
	return b
}

func newVersionCmd() *cobra.Command {
	var output outputFormat
	cmd := &cobra.Command{
		Use:   "version",
		Short: "Print the version, commit and commit time of this build",
		Long: "Version prints this binary's module version and the version control stamps of its\n" +
			"build: the commit, its time, and whether the checkout had changes not committed\n" +
			"(modified). A binary built without them (go build -buildvcs=false, outside a\n" +
			"checkout, or in a git worktree, which the Go toolchain does not stamp) prints\n" +
			"commit unknown.",
		Example: "  quorate version\n  quorate version -o json",
		Args:    cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			return writeBuildInfo(cmd.OutOrStdout(), output, readBuildInfo())
		},
	}
	addOutputFlag(cmd, &output)
	return cmd
}

// writeBuildInfo prints b as text, JSON or YAML.
func writeBuildInfo(w io.Writer, output outputFormat, b buildInfo) error {
	switch output {
	case outputJSON, outputYAML:
		j, err := json.MarshalIndent(b, "", "  ")
		if err != nil {
			return err
		}
		if output == outputJSON {
			_, err = fmt.Fprintf(w, "%s\n", j)
			return err
		}
		y, err := jsonToYAML(j)
		if err != nil {
			return err
		}
		_, err = io.WriteString(w, y)
		return err
	}
	commit, commitTime := b.Commit, b.CommitTime
	if commit == "" {
		commit = "unknown"
	}
	if commitTime == "" {
		commitTime = "unknown"
	}
	_, err := fmt.Fprintf(w, "quorate %s\ncommit:      %s\ncommit time: %s\nmodified:    %t\ngo:          %s %s\n",
		b.Version, commit, commitTime, b.Modified, b.GoVersion, b.Platform)
	return err
}
