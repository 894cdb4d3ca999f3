package apiflags

import (
	"errors"
	"fmt"
	"net/url"
	"os"
	"strings"

	"github.com/spf13/cobra"
)

// DefaultServer is the API of node1 of `quorate dev`.
const DefaultServer = "http://127.0.0.1:7070"

// ServerEnv names the environment variable --server defaults to; the flag
// wins when given.
const ServerEnv = "QUORATE_SERVER"

// ServerFromEnv sets the --server of cmd, when it has one and it was not
// given, from $QUORATE_SERVER (when set): a root command's hook, so that
// every command's --server reads it alike.
func ServerFromEnv(cmd *cobra.Command) error {
	f := cmd.Flags().Lookup("server")
	if f == nil || f.Changed {
		return nil
	}
	v := strings.TrimSpace(os.Getenv(ServerEnv))
	if v == "" {
		return nil
	}
	if err := f.Value.Set(v); err != nil {
		return fmt.Errorf("$%s: %w", ServerEnv, err)
	}
	return nil
}

// ServerURLs parses a comma-separated list of servers with ServerURL.
func ServerURLs(list string) ([]string, error) {
	parts := strings.Split(list, ",")
	out := make([]string, 0, len(parts))
	for i, p := range parts {
		u, err := ServerURL(p)
		if err != nil {
			if len(parts) > 1 {
				return nil, fmt.Errorf("entry %d of %q: %w", i+1, list, err)
			}
			return nil, err
		}
		out = append(out, u)
	}
	return out, nil
}

// ServerURL turns "host:port", "http://host:port" or "https://host:port/"
// into a base URL without a trailing slash.
func ServerURL(s string) (string, error) {
	s = strings.TrimSpace(s)
	if s == "" {
		return "", errors.New("must not be empty")
	}
	if !strings.Contains(s, "://") {
		s = "http://" + s
	}
	u, err := url.Parse(s)
	if err != nil {
		return "", err
	}
	if u.Scheme != "http" && u.Scheme != "https" {
		return "", fmt.Errorf("%q: scheme must be http or https", s)
	}
	if u.Host == "" {
		return "", fmt.Errorf("%q has no host", s)
	}
	if u.RawQuery != "" || u.Fragment != "" {
		return "", fmt.Errorf("%q: a server URL has no query or fragment", s)
	}
	return strings.TrimRight(u.String(), "/"), nil
}
