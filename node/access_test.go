package node_test

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"slices"
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

// accessEnv is a 3-node cluster with an access file and a token file, and a
// token per caller.
type accessEnv struct {
	c          *nodetest.Cluster
	dir        string
	accessPath string
	tokenPath  string
	tokens     map[string]string // caller → its bearer token
}

// The callers of accessEnv and their grants at the start. "newbie" has a
// token but is in no access rule; "late" has neither yet.
const accessRules = `callers:
  - caller: ops
    roles: [admin, client]
  - caller: admin-b
    roles: [admin]
  - caller: app-a
    roles: [client]
  - caller: app-b
    roles: [client]
  - caller: only-p
    roles: [client]
    policies: [acc-p]
`

// writeAtomic replaces path with data, as an editor that renames does.
func writeAtomic(t *testing.T, path, data string) {
	t.Helper()
	tmp := path + ".tmp"
	if err := os.WriteFile(tmp, []byte(data), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(tmp, path); err != nil {
		t.Fatal(err)
	}
}

// tokenFile is the token file of tokens.
func tokenFile(tokens map[string]string) string {
	var b strings.Builder
	b.WriteString("tokens:\n")
	for caller, tok := range tokens {
		fmt.Fprintf(&b, "  - caller: %s\n    sha256: %s\n", caller, access.HashToken(tok))
	}
	return b.String()
}

func newAccessEnv(t *testing.T) *accessEnv {
	t.Helper()
	e := &accessEnv{dir: t.TempDir(), tokens: map[string]string{}}
	for _, caller := range []string{"ops", "admin-b", "app-a", "app-b", "only-p", "newbie"} {
		e.tokens[caller] = access.NewToken()
	}
	e.accessPath = filepath.Join(e.dir, "access.yaml")
	e.tokenPath = filepath.Join(e.dir, "tokens.yaml")
	writeAtomic(t, e.accessPath, accessRules)
	writeAtomic(t, e.tokenPath, tokenFile(e.tokens))
	e.c = nodetest.NewClusterWith(t, nodetest.Options{Token: e.tokens["ops"], Configure: func(_ int, cfg *node.Config) {
		cfg.AccessFile, cfg.TokenFile, cfg.NodeToken = e.accessPath, e.tokenPath, e.tokens["ops"]
	}})
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	var policies []*quoratev1.Policy
	for _, name := range []string{"acc-p", "acc-q"} {
		policies = append(policies, &quoratev1.Policy{Name: name, Algorithm: "token_bucket", Limit: 1000, Period: durationpb.New(time.Second)})
	}
	if _, err := e.c.Admin(0).ApplyPolicies(ctx, connect.NewRequest(&quoratev1.ApplyPoliciesRequest{Policies: policies})); err != nil {
		t.Fatalf("ops applies the policies: %v", err)
	}
	return e
}

// httpClient sends token ("" for none) as a bearer token.
func (e *accessEnv) httpClient(t *testing.T, token string) *http.Client {
	tr := &http.Transport{}
	t.Cleanup(tr.CloseIdleConnections)
	if token == "" {
		return &http.Client{Transport: tr}
	}
	return &http.Client{Transport: nodetest.BearerTransport(tr, token)}
}

func (e *accessEnv) admission(t *testing.T, caller string, i int) quoratev1connect.AdmissionServiceClient {
	return quoratev1connect.NewAdmissionServiceClient(e.httpClient(t, e.tokens[caller]), e.c.APIURL(i))
}

func (e *accessEnv) admin(t *testing.T, caller string, i int) quoratev1connect.AdminServiceClient {
	return quoratev1connect.NewAdminServiceClient(e.httpClient(t, e.tokens[caller]), e.c.APIURL(i))
}

// wantAccessCode checks err's Connect code and that its message holds each of
// contains.
func wantAccessCode(t *testing.T, what string, err error, code connect.Code, contains ...string) {
	t.Helper()
	if code == 0 {
		if err != nil {
			t.Fatalf("%s: %v, want OK", what, err)
		}
		return
	}
	if connect.CodeOf(err) != code {
		t.Fatalf("%s: %v, want %v", what, err, code)
	}
	for _, s := range contains {
		if !strings.Contains(err.Error(), s) {
			t.Errorf("%s: %q does not name %q", what, err.Error(), s)
		}
	}
}

func TestAccessControl(t *testing.T) {
	e := newAccessEnv(t)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	leader := e.c.Leader(t)
	follower := (leader + 1) % e.c.Len()
	admitReq := func(policy, caller, id string) *connect.Request[quoratev1.AdmitRequest] {
		return connect.NewRequest(&quoratev1.AdmitRequest{Policy: policy, Key: "k", Caller: caller, RequestId: id})
	}

	t.Run("no credentials", func(t *testing.T) {
		_, err := e.admission(t, "nobody", 0).Admit(ctx, admitReq("acc-p", "", ""))
		wantAccessCode(t, "anonymous admit", err, connect.CodeUnauthenticated, "admit")
		_, err = e.admin(t, "nobody", 0).ListPolicies(ctx, connect.NewRequest(&quoratev1.ListPoliciesRequest{}))
		wantAccessCode(t, "anonymous list policies", err, connect.CodeUnauthenticated)
		bad := quoratev1connect.NewAdmissionServiceClient(e.httpClient(t, "qt_not-a-known-token"), e.c.APIURL(0))
		_, err = bad.Admit(ctx, admitReq("acc-p", "", ""))
		wantAccessCode(t, "unknown token", err, connect.CodeUnauthenticated, "unknown bearer token")
	})

	t.Run("roles", func(t *testing.T) {
		apply := connect.NewRequest(&quoratev1.ApplyPoliciesRequest{Policies: []*quoratev1.Policy{
			{Name: "acc-r", Algorithm: "token_bucket", Limit: 10, Period: durationpb.New(time.Second)}}})
		_, err := e.admin(t, "app-a", 0).ApplyPolicies(ctx, apply)
		wantAccessCode(t, "client applies a policy", err, connect.CodePermissionDenied, "app-a", "admin")
		_, err = e.admin(t, "ops", 1).ApplyPolicies(ctx, apply)
		wantAccessCode(t, "admin applies a policy", err, 0)
		_, err = e.admission(t, "newbie", 0).Admit(ctx, admitReq("acc-p", "", ""))
		wantAccessCode(t, "caller in no rule", err, connect.CodePermissionDenied, "newbie", "not in the access file")
		// Node-to-node status calls to API ports carry the node token.
		st, err := e.admin(t, "ops", follower).ClusterStatus(ctx, connect.NewRequest(&quoratev1.ClusterStatusRequest{}))
		wantAccessCode(t, "cluster status", err, 0)
		for _, m := range st.Msg.GetMembers() {
			if m.GetError() != "" {
				t.Errorf("member %s: %s", m.GetId(), m.GetError())
			}
		}
	})

	t.Run("routes", func(t *testing.T) {
		// Either role may ask where calls go, a caller limited to some
		// policies too; one in no rule, or without credentials, may not.
		for _, caller := range []string{"ops", "admin-b", "app-a", "only-p"} {
			r, err := e.admission(t, caller, follower).Routes(ctx, connect.NewRequest(&quoratev1.RoutesRequest{}))
			wantAccessCode(t, caller+" routes", err, 0)
			if len(r.Msg.GetMembers()) != e.c.Len() {
				t.Errorf("%s routes: members %v", caller, r.Msg.GetMembers())
			}
		}
		_, err := e.admission(t, "newbie", 0).Routes(ctx, connect.NewRequest(&quoratev1.RoutesRequest{}))
		wantAccessCode(t, "caller in no rule routes", err, connect.CodePermissionDenied, "newbie")
		_, err = e.admission(t, "nobody", 0).Routes(ctx, connect.NewRequest(&quoratev1.RoutesRequest{}))
		wantAccessCode(t, "anonymous routes", err, connect.CodeUnauthenticated, "routes")
	})

	t.Run("callers", func(t *testing.T) {
		a := e.admission(t, "app-a", leader)
		_, err := a.Admit(ctx, admitReq("acc-p", "app-b", "r1"))
		wantAccessCode(t, "app-a as app-b", err, connect.CodePermissionDenied, "app-a", "app-b")
		first, err := a.Admit(ctx, admitReq("acc-p", "", "r1"))
		wantAccessCode(t, "app-a naming no caller", err, 0)
		if first.Msg.GetDuplicate() {
			t.Fatal("first admit is a duplicate")
		}
		again, err := a.Admit(ctx, admitReq("acc-p", "app-a", "r1"))
		wantAccessCode(t, "app-a naming itself", err, 0)
		if !again.Msg.GetDuplicate() {
			t.Error("the retry naming app-a is not deduplicated with the one naming none")
		}
		other, err := e.admission(t, "app-b", leader).Admit(ctx, admitReq("acc-p", "", "r1"))
		wantAccessCode(t, "app-b, same request ID", err, 0)
		if other.Msg.GetDuplicate() {
			t.Error("app-b's request r1 was deduplicated with app-a's")
		}
		// Refund is by reference: app-b cannot name app-a's request.
		_, err = e.admission(t, "app-b", leader).Refund(ctx, connect.NewRequest(&quoratev1.RefundRequest{Caller: "app-a", RequestId: "r1", Key: "k"}))
		wantAccessCode(t, "app-b refunds app-a's", err, connect.CodePermissionDenied, "app-b", "app-a")
	})

	t.Run("forwarded", func(t *testing.T) {
		// The follower authenticates, authorizes and sets the caller; the
		// leader serves the forwarded call as it comes (it carries no
		// credential of the client's: were it checked again, it would fail).
		a := e.admission(t, "app-a", follower)
		first, err := a.Admit(ctx, admitReq("acc-p", "", "fwd-1"))
		wantAccessCode(t, "admit through a follower", err, 0)
		if !first.Msg.GetAllowed() || first.Msg.GetDuplicate() {
			t.Fatalf("admit through a follower: %+v", first.Msg)
		}
		again, err := e.admission(t, "app-a", leader).Admit(ctx, admitReq("acc-p", "app-a", "fwd-1"))
		wantAccessCode(t, "the same request on the leader", err, 0)
		if !again.Msg.GetDuplicate() {
			t.Error("the forwarded admit was not recorded under app-a")
		}
		_, err = e.admission(t, "app-b", follower).Admit(ctx, admitReq("acc-p", "app-a", "fwd-2"))
		wantAccessCode(t, "app-b as app-a through a follower", err, connect.CodePermissionDenied, "app-b", "app-a")
	})

	t.Run("audit names the caller of a forwarded change", func(t *testing.T) {
		// admin-b (not the node token's caller) applies a policy through a
		// node that does not lead the meta group: the leader records admin-b,
		// whose identity came with the forwarded call.
		apply := connect.NewRequest(&quoratev1.ApplyPoliciesRequest{Policies: []*quoratev1.Policy{
			{Name: "acc-audit", Algorithm: "token_bucket", Limit: 10, Period: durationpb.New(time.Second)}}})
		_, err := e.admin(t, "admin-b", follower).ApplyPolicies(ctx, apply)
		wantAccessCode(t, "admin-b applies a policy through a follower", err, 0)
		list, err := e.admin(t, "ops", leader).ListAudit(ctx, connect.NewRequest(&quoratev1.ListAuditRequest{Limit: 1000}))
		wantAccessCode(t, "list audit", err, 0)
		var found *quoratev1.AuditEntry
		for _, a := range list.Msg.GetEntries() {
			if a.GetAction() == "policy apply" && strings.Contains(a.GetSummary(), "acc-audit") {
				found = a
			}
		}
		switch {
		case found == nil:
			t.Fatalf("no audit record of applying acc-audit in %v", list.Msg.GetEntries())
		case found.GetCaller() != "admin-b" || found.GetSource() != "token":
			t.Fatalf("applying acc-audit recorded as %q (%s), want admin-b (token)", found.GetCaller(), found.GetSource())
		}
	})

	t.Run("policies", func(t *testing.T) {
		p := e.admission(t, "only-p", follower)
		_, err := p.Admit(ctx, admitReq("acc-p", "", ""))
		wantAccessCode(t, "only-p admits under acc-p", err, 0)
		_, err = p.Admit(ctx, admitReq("acc-q", "", ""))
		wantAccessCode(t, "only-p admits under acc-q", err, connect.CodePermissionDenied, "only-p", "acc-q")
		_, err = p.Peek(ctx, connect.NewRequest(&quoratev1.PeekRequest{Policy: "acc-q", Key: "k"}))
		wantAccessCode(t, "only-p peeks under acc-q", err, connect.CodePermissionDenied, "acc-q")
		multi := admitReq("acc-p", "", "")
		multi.Msg.Also = []*quoratev1.Check{{Policy: "acc-q", Key: "k"}}
		_, err = p.Admit(ctx, multi)
		wantAccessCode(t, "only-p admits acc-p and acc-q", err, connect.CodePermissionDenied, "acc-q")
		_, err = p.AdmitBatch(ctx, connect.NewRequest(&quoratev1.AdmitBatchRequest{Requests: []*quoratev1.AdmitRequest{
			{Policy: "acc-p", Key: "k"}, {Policy: "acc-q", Key: "k"}}}))
		wantAccessCode(t, "only-p batches acc-q", err, connect.CodePermissionDenied, "acc-q")
	})

	t.Run("health needs nothing", func(t *testing.T) {
		resp, err := e.httpClient(t, "").Post(e.c.APIURL(0)+"/grpc.health.v1.Health/Check", "application/json", strings.NewReader("{}"))
		if err != nil {
			t.Fatal(err)
		}
		body, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode != http.StatusOK || !strings.Contains(string(body), "SERVING") {
			t.Fatalf("anonymous health check: %s %s", resp.Status, body)
		}
	})

	t.Run("probes need nothing, reflection a role", func(t *testing.T) {
		for _, path := range []string{"/healthz", "/readyz"} {
			if code, body, err := probe(e.httpClient(t, ""), e.c.APIURL(0)+path); err != nil || code != http.StatusOK {
				t.Errorf("anonymous GET %s: %d %q %v, want 200", path, code, body, err)
			}
		}
		_, err := listServices(h2cClient(t, ""), e.c.APIURL(0))
		wantAccessCode(t, "anonymous reflection", err, connect.CodeUnauthenticated)
		for _, caller := range []string{"app-a", "admin-b"} {
			if got, err := listServices(h2cClient(t, e.tokens[caller]), e.c.APIURL(0)); err != nil || !slices.Contains(got, quoratev1connect.AdmissionServiceName) {
				t.Errorf("%s's reflection: %q %v, want the services", caller, got, err)
			}
		}
	})

	t.Run("hostile", func(t *testing.T) {
		var p2 http.Protocols
		p2.SetUnencryptedHTTP2(true)
		h := &hostileEnv{c: e.c, h1: e.httpClient(t, ""), h2: &http.Client{Transport: &http.Transport{Protocols: &p2}}}
		t.Cleanup(h.h2.CloseIdleConnections)
		runHostileRows(t, h, accessRows(e))
	})

	t.Run("reload", func(t *testing.T) {
		// Grant newbie the client role: it takes effect without a restart.
		writeAtomic(t, e.accessPath, accessRules+"  - caller: newbie\n    roles: [client]\n")
		n := e.admission(t, "newbie", follower)
		e.c.Eventually(t, 20*time.Second, "newbie's grant applies", func() error {
			_, err := n.Admit(ctx, admitReq("acc-p", "", ""))
			return err
		})
		// A new token: unknown until the token file has it.
		e.tokens["late"] = access.NewToken()
		writeAtomic(t, e.accessPath, accessRules+"  - caller: late\n    roles: [client]\n")
		late := e.admission(t, "late", leader)
		_, err := late.Admit(ctx, admitReq("acc-p", "", ""))
		wantAccessCode(t, "a token not yet in the token file", err, connect.CodeUnauthenticated)
		writeAtomic(t, e.tokenPath, tokenFile(e.tokens))
		e.c.Eventually(t, 20*time.Second, "late's token is known", func() error {
			_, err := late.Admit(ctx, admitReq("acc-p", "", ""))
			return err
		})
		// newbie's grant is gone with the last edit.
		e.c.Eventually(t, 20*time.Second, "newbie's grant is withdrawn", func() error {
			_, err := n.Admit(ctx, admitReq("acc-p", "", ""))
			if connect.CodeOf(err) != connect.CodePermissionDenied {
				return fmt.Errorf("newbie admits: %v", err)
			}
			return nil
		})
	})
}

// accessRows: TestHostileClient's rows for a cluster with an access file
// (run against accessEnv's): what a client without rights sends.
func accessRows(e *accessEnv) []hostileRow {
	call := func(path, body string, kv ...string) func(context.Context, *testing.T, *hostileEnv) hostileReply {
		return func(ctx context.Context, _ *testing.T, h *hostileEnv) hostileReply {
			return h.post(ctx, h.h1, 0, path, headers(append([]string{"Content-Type", "application/json"}, kv...)...),
				strings.NewReader(body), int64(len(body)))
		}
	}
	bearer := func(caller string) string { return "Bearer " + e.tokens[caller] }
	admit := `{"policy":"acc-p","key":"k"}`
	return []hostileRow{
		{name: "no credentials", send: call(admitPath, admit), code: connect.CodeUnauthenticated, contains: []string{"bearer token"}},
		{name: "basic auth", send: call(admitPath, admit, "Authorization", "Basic b3BzOm9wcw=="),
			code: connect.CodeUnauthenticated, contains: []string{"Bearer"}},
		{name: "bearer token with a space", send: call(admitPath, admit, "Authorization", "Bearer a b"),
			code: connect.CodeUnauthenticated, contains: []string{"Bearer"}},
		{name: "forwarded header on the API port", send: call(admitPath, admit, "Quorate-Forwarded-By", "node2"),
			code: connect.CodeUnauthenticated},
		{name: "client applies a policy", send: call(applyPath, `{"policies":[{"name":"acc-x","algorithm":"token_bucket","limit":1,"period":"1s"}]}`,
			"Authorization", bearer("app-a")), code: connect.CodePermissionDenied, contains: []string{"app-a", "admin"}},
		{name: "batch naming another caller", send: call(admitBatchPath,
			`{"requests":[{"policy":"acc-p","key":"k"},{"policy":"acc-p","key":"k","caller":"app-b","requestId":"x"}]}`,
			"Authorization", bearer("app-a")), code: connect.CodePermissionDenied, contains: []string{"app-a", "app-b"}},
		{name: "limited caller leases another policy", send: call(acquirePath, `{"policy":"acc-q","key":"k"}`,
			"Authorization", bearer("only-p")), code: connect.CodePermissionDenied, contains: []string{"only-p", "acc-q"}},
	}
}
