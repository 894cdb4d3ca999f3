package node_test

import (
	"bytes"
	"context"
	"errors"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"connectrpc.com/connect"
	"google.golang.org/protobuf/types/known/durationpb"

	"github.com/quorate/quorate/access"
	"github.com/quorate/quorate/node"
	"github.com/quorate/quorate/node/nodetest"
	quoratev1 "github.com/quorate/quorate/proto/quorate/v1"
	"github.com/quorate/quorate/proto/quorate/v1/quoratev1connect"
)

// TestErrorsSpeakQuorate checks, on a 3-node cluster with an access file,
// the messages a client receives: request IDs as the caller sent them,
// times in RFC 3339, no package prefixes, no code said twice, and a 415
// that says which content types are expected.
func TestErrorsSpeakQuorate(t *testing.T) {
	dir := t.TempDir()
	token := access.NewToken()
	accessPath, tokenPath := filepath.Join(dir, "access.yaml"), filepath.Join(dir, "tokens.yaml")
	for path, data := range map[string]string{
		accessPath: "callers:\n  - caller: ops\n    roles: [admin, client]\n",
		tokenPath:  "tokens:\n  - caller: ops\n    sha256: " + access.HashToken(token) + "\n",
	} {
		if err := os.WriteFile(path, []byte(data), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	c := nodetest.NewClusterWith(t, nodetest.Options{Token: token, Configure: func(_ int, cfg *node.Config) {
		cfg.AccessFile, cfg.TokenFile, cfg.NodeToken = accessPath, tokenPath, token
	}})
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if _, err := c.Admin(0).ApplyPolicies(ctx, connect.NewRequest(&quoratev1.ApplyPoliciesRequest{Policies: []*quoratev1.Policy{
		{Name: "err-rate", Algorithm: "token_bucket", Limit: 100, Period: durationpb.New(time.Second)},
		{Name: "err-conc", Algorithm: "concurrency", Limit: 2, LeaseTtl: durationpb.New(time.Minute)},
	}})); err != nil {
		t.Fatal(err)
	}
	api := c.Admission(1) // a follower or the leader: either answers the same
	check := func(what string, err error, code connect.Code, want ...string) {
		t.Helper()
		if connect.CodeOf(err) != code {
			t.Fatalf("%s: %v, want code %v", what, err, code)
		}
		var ce *connect.Error
		if !errors.As(err, &ce) {
			t.Fatalf("%s: %v is not a Connect error", what, err)
		}
		msg := ce.Message()
		t.Logf("%s: %s", what, err)
		for _, w := range want {
			if !strings.Contains(msg, w) {
				t.Errorf("%s: message %q, want it to hold %q", what, msg, w)
			}
		}
		if strings.ContainsRune(msg, 0) || strings.Contains(msg, `\x00`) {
			t.Errorf("%s: message %q shows a NUL byte", what, msg)
		}
		if m := regexp.MustCompile(`\b(fsm|node|lease|admission|dedupe|access): `).FindString(msg); m != "" {
			t.Errorf("%s: message %q shows the package prefix %q", what, msg, m)
		}
		if m := regexp.MustCompile(`\bat \d{15,}\b`).FindString(msg); m != "" {
			t.Errorf("%s: message %q shows a time in raw nanoseconds: %s", what, msg, m)
		}
		if code != 0 && strings.HasPrefix(strings.ReplaceAll(strings.ToLower(msg), " ", "_"), code.String()) {
			t.Errorf("%s: message %q repeats its code %v", what, msg, code)
		}
	}

	// request_id reuse names the ID as sent.
	if _, err := api.Admit(ctx, connect.NewRequest(&quoratev1.AdmitRequest{Policy: "err-rate", Key: "k", RequestId: "7f3c9a51e2d04b8c"})); err != nil {
		t.Fatal(err)
	}
	_, err := api.Admit(ctx, connect.NewRequest(&quoratev1.AdmitRequest{Policy: "err-rate", Key: "k", Cost: ptr(int64(2)), RequestId: "7f3c9a51e2d04b8c"}))
	check("request_id reused", err, connect.CodeInvalidArgument, `request_id: "7f3c9a51e2d04b8c" was already used`)

	// Refund of a request never admitted.
	_, err = api.Refund(ctx, connect.NewRequest(&quoratev1.RefundRequest{RequestId: "nonexistent", Key: "k"}))
	check("refund unknown", err, connect.CodeNotFound, `request_id "nonexistent"`)

	// A released lease renewed.
	leases := c.Lease(2)
	acq, err := leases.AcquireLease(ctx, connect.NewRequest(&quoratev1.AcquireLeaseRequest{Policy: "err-conc", Key: "job"}))
	if err != nil || !acq.Msg.GetAllowed() {
		t.Fatalf("acquire: %v %v", acq, err)
	}
	if _, err := leases.ReleaseLease(ctx, connect.NewRequest(&quoratev1.ReleaseLeaseRequest{LeaseId: acq.Msg.GetLeaseId(), FencingToken: acq.Msg.GetFencingToken()})); err != nil {
		t.Fatal(err)
	}
	_, err = leases.RenewLease(ctx, connect.NewRequest(&quoratev1.RenewLeaseRequest{LeaseId: acq.Msg.GetLeaseId(), FencingToken: acq.Msg.GetFencingToken()}))
	check("stale lease", err, connect.CodeFailedPrecondition, "is not a live lease")
	if m := regexp.MustCompile(`at (\S+) `).FindStringSubmatch(err.Error()); m == nil {
		t.Errorf("stale lease: %v names no time", err)
	} else if _, perr := time.Parse(time.RFC3339Nano, m[1]); perr != nil {
		t.Errorf("stale lease: time %q is not RFC 3339: %v", m[1], perr)
	}

	// No credential under an access file.
	anon := quoratev1connect.NewAdmissionServiceClient(&http.Client{}, c.APIURL(0))
	_, err = anon.Admit(ctx, connect.NewRequest(&quoratev1.AdmitRequest{Policy: "err-rate", Key: "k"}))
	check("unauthenticated", err, connect.CodeUnauthenticated)

	// curl without a Content-Type, and curl -d's form encoding.
	for _, ct := range []string{"", "application/x-www-form-urlencoded"} {
		req, _ := http.NewRequestWithContext(ctx, http.MethodPost, c.APIURL(0)+"/quorate.v1.AdmissionService/Admit", bytes.NewReader([]byte(`{"policy":"err-rate","key":"k"}`)))
		req.Header.Set("Authorization", "Bearer "+token)
		if ct != "" {
			req.Header.Set("Content-Type", ct)
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		body, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		t.Logf("Content-Type %q: %d %q", ct, resp.StatusCode, body)
		if resp.StatusCode != http.StatusUnsupportedMediaType {
			t.Fatalf("Content-Type %q: status %d, want 415", ct, resp.StatusCode)
		}
		for _, w := range []string{"Content-Type", ct, "application/json", "application/proto", "application/grpc"} {
			if !bytes.Contains(body, []byte(w)) {
				t.Errorf("Content-Type %q: 415 body %q, want it to name %q", ct, body, w)
			}
		}
	}
}
