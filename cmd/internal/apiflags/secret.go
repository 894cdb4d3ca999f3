package apiflags

import (
	"fmt"
	"os"
	"strings"

	"github.com/spf13/cobra"
)

// refusedFlag is the value of a flag that is refused: it records that it
// was given and drops the value.
type refusedFlag struct{ given bool }

func (f *refusedFlag) String() string     { return "" }
func (f *refusedFlag) Set(_ string) error { f.given = true; return nil }
func (f *refusedFlag) Type() string       { return "string" }

// RefuseSecretFlag registers --name on cmd, hidden, and makes the command
// fail before it runs when it is given, naming --fileFlag and env.
func RefuseSecretFlag(cmd *cobra.Command, name, fileFlag, env string) {
	f := new(refusedFlag)
	cmd.Flags().Var(f, name, "refused: give --"+fileFlag)
	_ = cmd.Flags().MarkHidden(name)
	pre := cmd.PreRunE
	cmd.PreRunE = func(cmd *cobra.Command, args []string) error {
		if f.given {
			return fmt.Errorf("--%s: a secret on the command line is visible to every local user (ps) and on the profiling "+
				"endpoint; write it to a file only you can read and give --%s FILE, or set $%s", name, fileFlag, env)
		}
		if pre != nil {
			return pre(cmd, args)
		}
		return nil
	}
}

// readSecretFile reads the secret in path (the value of --flag): the file's
// text without surrounding white space, which must not be empty.
func readSecretFile(flag, path string) (string, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return "", fmt.Errorf("--%s: %w", flag, err)
	}
	s := strings.TrimSpace(string(b))
	if s == "" {
		return "", fmt.Errorf("--%s: %s is empty", flag, path)
	}
	return s, nil
}

// SecretFromFileOrEnv is the secret of --flag's file when path is set, else
// of $env ("" when unset).
func SecretFromFileOrEnv(flag, path, env string) (string, error) {
	if path != "" {
		return readSecretFile(flag, path)
	}
	return strings.TrimSpace(os.Getenv(env)), nil
}
