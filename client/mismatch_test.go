package client

import (
	"context"
	"errors"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/quorate/quorate/proto/quorate/v1/quoratev1connect"
)

// TestProtocolMismatchIsImmediate: a TLS or protocol mismatch is an error at
// once, never retried into an unknown outcome nor hidden by a fallback.
func TestProtocolMismatchIsImmediate(t *testing.T) {
	f := &flaky{ids: make(chan string, 10)}
	mux := http.NewServeMux()
	mux.Handle(quoratev1connect.NewAdmissionServiceHandler(f))
	tlsSrv := httptest.NewTLSServer(mux)
	defer tlsSrv.Close()
	plain := httptest.NewServer(mux)
	defer plain.Close()
	for name, url := range map[string]string{
		"http to an https server": strings.Replace(tlsSrv.URL, "https", "http", 1),
		"https to an http server": strings.Replace(plain.URL, "http", "https", 1),
		"untrusted certificate":   tlsSrv.URL,
	} {
		t.Run(name, func(t *testing.T) {
			var retries int
			c := fastClient(t, url)
			c.cfg.OnRetry = func(RetryInfo) { retries++ }
			c.fb.store(Policy{Name: "p", Limit: 10, OnUnavailable: "allow"})
			_, err := c.Admit(context.Background(), Request{Policy: "p", Key: "k"})
			var ou *OutcomeUnknownError
			if err == nil || errors.As(err, &ou) || retries != 0 {
				t.Fatalf("%v after %d retries, want an immediate error", err, retries)
			}
		})
	}
}
