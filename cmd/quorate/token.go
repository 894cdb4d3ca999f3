package main

import (
	"fmt"
	"strconv"

	"github.com/spf13/cobra"

	"github.com/quorate/quorate/access"
	"github.com/quorate/quorate/cmd/internal/apiflags"
)

func newTokenCmd() *cobra.Command {
	cmd := &cobra.Command{
		Use:   "token",
		Short: "Make bearer tokens for callers",
	}
	cmd.AddCommand(newTokenCreateCmd())
	return cmd
}

func newTokenCreateCmd() *cobra.Command {
	var caller string
	cmd := &cobra.Command{
		Use:   "create --caller NAME",
		Short: "Print a new bearer token and its token file entry",
		Long: "Create prints a new random bearer token for the caller, then the entry to add to the\n" +
			"nodes' --token-file (under \"tokens:\"), which holds only the token's SHA-256. Give the\n" +
			"token to the caller (quorate's commands read it from --token-file or $" + apiflags.TokenEnv + "); it is not\n" +
			"stored anywhere. Nodes pick up the edited file without a restart. Grant the caller roles\n" +
			"in the --access-file.",
		Example: "  quorate token create --caller gateway-eu",
		Args:    cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if caller == "" {
				return fmt.Errorf("--caller: required (the caller name the access file grants roles to)")
			}
			token := access.NewToken()
			entry := fmt.Sprintf("  - caller: %s\n    sha256: %s\n", strconv.Quote(caller), access.HashToken(token))
			// The entry must read back as a token file entry naming caller.
			if _, err := access.ParseTokens("the new entry", []byte("tokens:\n"+entry)); err != nil {
				return fmt.Errorf("--caller: %w", err)
			}
			out := cmd.OutOrStdout()
			fmt.Fprintf(out, "token: %s\n\n# token file entry (add under \"tokens:\"):\n%s", token, entry)
			return nil
		},
	}
	cmd.Flags().StringVar(&caller, "caller", "", "the caller the token authenticates (required)")
	return cmd
}
