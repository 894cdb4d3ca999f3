package main

import (
	"encoding/json"
	"fmt"
	"io"

	"github.com/spf13/cobra"

	"github.com/quorate/quorate/node"
)

func newVersionCmd() *cobra.Command {
	var output outputFormat
	cmd := &cobra.Command{
		Use:   "version",
		Short: "Print the version, commit and build date of this build",
		Long: "Version prints what this binary knows of its build. `make build` stamps the\n" +
			"version (git describe --tags --always --dirty), the commit and the build date.\n" +
			"A binary built otherwise (go build, go install) prints the Go toolchain's record:\n" +
			"the module version, and the commit, its time and whether the checkout had changes\n" +
			"not committed (modified) when it recorded them (not with -buildvcs=false, outside\n" +
			"a checkout, or in a git worktree); else commit unknown. /metrics exports the same\n" +
			"as quorate_build_info, and every node logs it when it starts.",
		Example: "  quorate version\n  quorate version -o json",
		Args:    cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			return writeBuildInfo(cmd.OutOrStdout(), output, node.Build())
		},
	}
	addOutputFlag(cmd, &output)
	return cmd
}

// writeBuildInfo prints b as text, JSON or YAML.
func writeBuildInfo(w io.Writer, output outputFormat, b node.BuildInfo) error {
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
	_, err := fmt.Fprintf(w, "quorate %s\ncommit:      %s\ncommit time: %s\nbuild date:  %s\nmodified:    %t\ngo:          %s %s\n",
		b.Version, orUnknown(b.Commit), orUnknown(b.CommitTime), orUnknown(b.BuildDate), b.Modified, b.GoVersion, b.Platform)
	return err
}

// orUnknown is s, or "unknown" when it is empty.
func orUnknown(s string) string {
	if s == "" {
		return "unknown"
	}
	return s
}
