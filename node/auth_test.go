package node

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"net/http"
	"net/http/httptest"
	"net/url"
	"os"
	"path/filepath"
	"testing"
	"time"

	"connectrpc.com/connect"
	"google.golang.org/protobuf/reflect/protoreflect"

	"github.com/quorate/quorate/access"
	"github.com/quorate/quorate/fsm"
	"github.com/quorate/quorate/node/internal/engine"
	quoratev1 "github.com/quorate/quorate/proto/quorate/v1"
	"github.com/quorate/quorate/proto/quorate/v1/quoratev1connect"
)

// Every procedure the API server serves has an action, every action is
// some procedure's, and PeerService (peer port only) has none.
func TestProcedureActionsComplete(t *testing.T) {
	served := map[string]bool{"/grpc.health.v1.Health/Check": true, "/grpc.health.v1.Health/Watch": true,
		reflectionV1Procedure: true, reflectionV1AlphaProcedure: true}
	for _, f := range []protoreflect.FileDescriptor{quoratev1.File_quorate_v1_admission_proto,
		quoratev1.File_quorate_v1_admin_proto, quoratev1.File_quorate_v1_lease_proto} {
		for i := range f.Services().Len() {
			s := f.Services().Get(i)
			for j := range s.Methods().Len() {
				proc := "/" + string(s.FullName()) + "/" + string(s.Methods().Get(j).Name())
				if s.FullName() == quoratev1connect.PeerServiceName {
					if _, ok := procedureActions[proc]; ok {
						t.Errorf("%s is in the table, but PeerService is not served on the API port", proc)
					}
					continue
				}
				served[proc] = true
			}
		}
	}
	for proc := range served {
		if a := procedureAction(proc); a == access.ActionNone {
			t.Errorf("procedure %s has no action", proc)
		}
	}
	used := map[access.Action]bool{}
	for proc, a := range procedureActions {
		if !served[proc] {
			t.Errorf("table entry %s is not a served procedure", proc)
		}
		used[a] = true
	}
	for _, a := range access.Actions() {
		if !used[a] {
			t.Errorf("action %s is no procedure's", a)
		}
	}
	if a := procedureAction("/quorate.v1.AdmissionService/Nope"); a != access.ActionNone {
		t.Errorf("unknown procedure: %s, want none", a)
	}
}

func TestRequestPolicies(t *testing.T) {
	lid := fsm.LeaseID("sem", "k", 7, [16]byte{1})
	for _, tc := range []struct {
		msg  any
		want []string
	}{
		{&quoratev1.AdmitRequest{Policy: "p", Also: []*quoratev1.Check{{Policy: "q"}}}, []string{"p", "q"}},
		{&quoratev1.AdmitBatchRequest{Requests: []*quoratev1.AdmitRequest{{Policy: "a"}, {Policy: "b"}}}, []string{"a", "b"}},
		{&quoratev1.PeekRequest{Policy: "p"}, []string{"p"}},
		{&quoratev1.ReserveRequest{Policy: "p"}, []string{"p"}},
		{&quoratev1.CommitRequest{ReservationId: fsm.ReservationID("quota", "k", fsm.ReservationName(3, 2), [16]byte{1})}, []string{"quota"}},
		{&quoratev1.CommitRequest{ReservationId: "lease:x#1"}, nil},
		{&quoratev1.AcquireLeaseRequest{Policy: "sem", ReservePolicy: "quota"}, []string{"sem", "quota"}},
		{&quoratev1.RenewLeaseRequest{LeaseId: lid}, []string{"sem"}},
		{&quoratev1.ReleaseLeaseRequest{LeaseId: "garbage"}, nil},
		{&quoratev1.CheckFenceRequest{LeaseId: lid}, []string{"sem"}},
		{&quoratev1.CheckFenceRequest{LeaseId: "garbage"}, nil},
		{&quoratev1.RefundRequest{Key: "k"}, nil},
	} {
		got := requestPolicies(tc.msg)
		if len(got) != len(tc.want) {
			t.Errorf("%T: got %q, want %q", tc.msg, got, tc.want)
			continue
		}
		for i := range got {
			if got[i] != tc.want[i] {
				t.Errorf("%T: got %q, want %q", tc.msg, got, tc.want)
			}
		}
	}
}

// authorize fills in the identity's caller, refuses another, and lets a
// health check through without credentials.
func TestAuthorizeResolvesCallers(t *testing.T) {
	rules, err := access.ParseRules("access.yaml", []byte("callers:\n  - caller: app\n    roles: [client]\n"))
	if err != nil {
		t.Fatal(err)
	}
	n := &Node{}
	a := &edgeAuth{authz: access.Enforce(func() *access.Rules { return rules }), connectErr: n.toConnectError}
	ctx := engine.WithIdentity(context.Background(), access.Identity{Caller: "app", Source: access.SourceToken})
	batch := &quoratev1.AdmitBatchRequest{Requests: []*quoratev1.AdmitRequest{{Policy: "p"}, {Policy: "p", Caller: "app"}}}
	if err := a.authorize(ctx, access.ActionAdmitBatch, batch); err != nil {
		t.Fatal(err)
	}
	for i, r := range batch.GetRequests() {
		if r.GetCaller() != "app" {
			t.Errorf("request %d: caller %q, want app", i, r.GetCaller())
		}
	}
	err = a.authorize(ctx, access.ActionRefund, &quoratev1.RefundRequest{Caller: "other"})
	if !errors.Is(err, access.ErrPermissionDenied) || connect.CodeOf(n.toConnectError(err)) != connect.CodePermissionDenied {
		t.Errorf("another caller: %v, want permission denied", err)
	}
	if err := a.authorize(context.Background(), access.ActionHealth, nil); err != nil {
		t.Errorf("health: %v", err)
	}
	err = a.authorize(context.Background(), access.ActionPeek, &quoratev1.PeekRequest{Policy: "p"})
	if connect.CodeOf(n.toConnectError(err)) != connect.CodeUnauthenticated {
		t.Errorf("anonymous: %v, want unauthenticated", err)
	}
}

// authenticate takes the caller from a verified client certificate only,
// and from a bearer token of the token file.
func TestAuthenticateMiddleware(t *testing.T) {
	dir := t.TempDir()
	token := access.NewToken()
	path := filepath.Join(dir, "tokens.yaml")
	if err := os.WriteFile(path, []byte("tokens:\n  - caller: app\n    sha256: "+access.HashToken(token)+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	w, err := access.WatchTokens(path, time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	a := &edgeAuth{tokens: w, authz: access.Open()} // open: nothing is refused before the handler
	cert := &x509.Certificate{URIs: []*url.URL{{Scheme: "spiffe", Host: "example.org", Path: "/svc"}}}
	for _, tc := range []struct {
		name    string
		tls     *tls.ConnectionState
		auth    string
		want    access.Identity
		wantErr bool
	}{
		{name: "nothing", want: access.Anonymous()},
		{name: "token", auth: "Bearer " + token, want: access.Identity{Caller: "app", Source: access.SourceToken}},
		{name: "unknown token", auth: "Bearer qrt_nope", want: access.Anonymous(), wantErr: true},
		{name: "verified certificate", tls: &tls.ConnectionState{VerifiedChains: [][]*x509.Certificate{{cert}}},
			want: access.Identity{Caller: "spiffe://example.org/svc", Source: access.SourceCertificate}},
		{name: "unverified certificate", tls: &tls.ConnectionState{PeerCertificates: []*x509.Certificate{cert}}, want: access.Anonymous()},
		{name: "certificate and another's token", tls: &tls.ConnectionState{VerifiedChains: [][]*x509.Certificate{{cert}}},
			auth: "Bearer " + token, want: access.Anonymous(), wantErr: true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var got access.Identity
			var gotErr bool
			h := a.authenticate(serveAPI, http.HandlerFunc(func(_ http.ResponseWriter, r *http.Request) {
				got = engine.IdentityOf(r.Context())
				_, gotErr = r.Context().Value(authErrorKey{}).(error)
			}))
			r := httptest.NewRequest(http.MethodPost, "/quorate.v1.AdmissionService/Admit", nil)
			r.TLS = tc.tls
			if tc.auth != "" {
				r.Header.Set("Authorization", tc.auth)
			}
			h.ServeHTTP(httptest.NewRecorder(), r)
			if got != tc.want || gotErr != tc.wantErr {
				t.Errorf("identity %+v (error %v), want %+v (error %v)", got, gotErr, tc.want, tc.wantErr)
			}
		})
	}
}
