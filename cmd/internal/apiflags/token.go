package apiflags

import (
	"context"
	"net/http"

	"github.com/spf13/cobra"
)

// TokenEnv names the environment variable the token defaults to without
// --token-file.
const TokenEnv = "QUORATE_TOKEN"

// tokenKey is the context key of the bearer token a command's calls send.
type tokenKey struct{}

// AddTokenFlag registers --token-file on cmd, into *file, and puts the
// bearer token of that file, or of $QUORATE_TOKEN, into the command's
// context before it runs, for Token and the transports of WithToken to
// send. The token itself is never an argument: --token is refused. Every
// command means the bearer token by --token (a lease's fencing token is
// --fencing-token).
func AddTokenFlag(cmd *cobra.Command, file *string) {
	const name = "token"
	cmd.Flags().StringVar(file, name+"-file", "", "file holding the bearer token to authenticate with (default $"+TokenEnv+"); see quorate token create")
	pre := cmd.PreRunE
	cmd.PreRunE = func(cmd *cobra.Command, args []string) error {
		token, err := SecretFromFileOrEnv(name+"-file", *file, TokenEnv)
		if err != nil {
			return err
		}
		if token != "" {
			cmd.SetContext(context.WithValue(cmd.Context(), tokenKey{}, token))
		}
		if pre != nil {
			return pre(cmd, args)
		}
		return nil
	}
	RefuseSecretFlag(cmd, name, name+"-file", TokenEnv)
}

// Token is the bearer token AddTokenFlag put into ctx, or "".
func Token(ctx context.Context) string {
	token, _ := ctx.Value(tokenKey{}).(string)
	return token
}

// WithToken returns a transport that adds the bearer token of each
// request's context (Token), if any, to the requests it passes to next.
func WithToken(next http.RoundTripper) http.RoundTripper { return tokenTransport{next: next} }

// tokenTransport adds the context's bearer token to each request.
type tokenTransport struct{ next http.RoundTripper }

func (t tokenTransport) RoundTrip(r *http.Request) (*http.Response, error) {
	if token := Token(r.Context()); token != "" {
		r = r.Clone(r.Context())
		r.Header.Set("Authorization", "Bearer "+token)
	}
	return t.next.RoundTrip(r)
}

func (t tokenTransport) CloseIdleConnections() {
	if c, ok := t.next.(interface{ CloseIdleConnections() }); ok {
		c.CloseIdleConnections()
	}
}

// WithoutToken returns ctx without a bearer token: the transports of
// WithToken send none on its requests.
func WithoutToken(ctx context.Context) context.Context {
	return context.WithValue(ctx, tokenKey{}, nil)
}
