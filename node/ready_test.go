package node_test

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"slices"
	"strings"
	"testing"
	"time"

	"connectrpc.com/connect"
	"connectrpc.com/grpchealth"
	"connectrpc.com/grpcreflect"

	"github.com/quorate/quorate/node"
	"github.com/quorate/quorate/node/nodetest"
	"github.com/quorate/quorate/proto/quorate/v1/quoratev1connect"
)

// probe GETs url and returns its status code and body.
func probe(hc *http.Client, url string) (int, string, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return 0, "", err
	}
	resp, err := hc.Do(req)
	if err != nil {
		return 0, "", err
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(io.LimitReader(resp.Body, 4<<10))
	return resp.StatusCode, string(body), err
}

// h2cClient is an HTTP client speaking cleartext HTTP/2 (reflection is a
// bidirectional stream), sending token as a bearer token when not empty.
func h2cClient(t *testing.T, token string) *http.Client {
	var p http.Protocols
	p.SetUnencryptedHTTP2(true)
	tr := &http.Transport{Protocols: &p}
	t.Cleanup(tr.CloseIdleConnections)
	if token == "" {
		return &http.Client{Transport: tr}
	}
	return &http.Client{Transport: nodetest.BearerTransport(tr, token)}
}

// listServices lists the services node url's reflection names.
func listServices(hc *http.Client, url string) ([]string, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	stream := grpcreflect.NewClient(hc, url, connect.WithGRPC()).NewStream(ctx)
	names, err := stream.ListServices()
	_, closeErr := stream.Close()
	if err != nil {
		return nil, err
	}
	if closeErr != nil {
		return nil, closeErr
	}
	out := make([]string, 0, len(names))
	for _, n := range names {
		out = append(out, string(n))
	}
	slices.Sort(out)
	return out, nil
}

// readiness is node i's /readyz and gRPC health answer (the whole node's).
type readiness struct {
	code   int
	body   string
	status grpchealth.Status
}

func readinessOf(c *nodetest.Cluster, i int) (readiness, error) {
	var r readiness
	var err error
	if r.code, r.body, err = probe(c.HTTPClient(), c.APIURL(i)+"/readyz"); err != nil {
		return r, err
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	resp, err := grpchealth.NewClient(c.HTTPClient(), c.APIURL(i)).Check(ctx, &grpchealth.CheckRequest{})
	if err != nil {
		return r, err
	}
	r.status = resp.Status
	return r, nil
}

// A node is ready (/readyz 200, gRPC health SERVING) while every replica it
// hosts has a leader; stopping the two other nodes of a 3-node cluster takes
// its quorum, and with it readiness (503 with the reason, NOT_SERVING),
// while /healthz stays 200; starting them again brings it back.
func TestReadinessFollowsQuorum(t *testing.T) {
	c := nodetest.NewClusterWith(t, nodetest.Options{Nodes: 3, Configure: func(i int, cfg *node.Config) {
		cfg.DataGroups, cfg.ExpectNodes = 2, 3
	}})
	waitReadiness := func(what string, ready bool) readiness {
		t.Helper()
		var last readiness
		c.Eventually(t, 30*time.Second, what, func() error {
			r, err := readinessOf(c, 0)
			if err != nil {
				return err
			}
			last = r
			switch {
			case ready && (r.code != http.StatusOK || r.body != "ready\n" || r.status != grpchealth.StatusServing):
				return fmt.Errorf("/readyz %d %q, health %v", r.code, r.body, r.status)
			case !ready && (r.code != http.StatusServiceUnavailable || r.status != grpchealth.StatusNotServing):
				return fmt.Errorf("/readyz %d %q, health %v", r.code, r.body, r.status)
			}
			return nil
		})
		return last
	}
	healthz := func(what string) {
		t.Helper()
		code, body, err := probe(c.HTTPClient(), c.APIURL(0)+"/healthz")
		if err != nil || code != http.StatusOK || body != "ok\n" {
			t.Errorf("%s: /healthz %d %q %v, want 200 ok", what, code, body, err)
		}
	}

	waitReadiness("node 0 ready", true)
	// Ready means every replica here has a leader: the data groups' too.
	for _, g := range c.Node(0).Status().GetGroups() {
		if g.GetLeaderId() == "" {
			t.Errorf("ready, but group %d knows no leader", g.GetId())
		}
	}
	healthz("ready")

	c.Stop(1)
	c.Stop(2)
	r := waitReadiness("node 0 not ready without quorum", false)
	if !strings.HasPrefix(r.body, "not ready: ") || !strings.Contains(r.body, "no leader") {
		t.Errorf("/readyz without quorum: %q, want the reason (no leader)", r.body)
	}
	healthz("without quorum")

	c.Start(1)
	c.Start(2)
	waitReadiness("node 0 ready again", true)
	healthz("quorum back")
	for i := 1; i < 3; i++ {
		c.Eventually(t, 30*time.Second, fmt.Sprintf("node %d ready again", i), func() error {
			r, err := readinessOf(c, i)
			if err != nil {
				return err
			}
			if r.code != http.StatusOK || r.status != grpchealth.StatusServing {
				return fmt.Errorf("/readyz %d %q, health %v", r.code, r.body, r.status)
			}
			return nil
		})
	}
}

// Reflection lists the services each port serves; the health service
// answers NotFound for a service it does not serve; the probes answer
// anything but GET as the mux does.
func TestReflectionAndProbes(t *testing.T) {
	c := nodetest.NewClusterWith(t, nodetest.Options{Nodes: 1, Configure: func(i int, cfg *node.Config) {
		cfg.AdminAddr = "127.0.0.1:0"
	}})
	hc := h2cClient(t, "")
	got, err := listServices(hc, c.APIURL(0))
	if err != nil {
		t.Fatal(err)
	}
	want := []string{"grpc.health.v1.Health", quoratev1connect.AdmissionServiceName, quoratev1connect.LeaseServiceName}
	slices.Sort(want)
	if !slices.Equal(got, want) {
		t.Errorf("API port services: %q, want %q", got, want)
	}
	if got, err = listServices(hc, c.AdminURL(0)); err != nil {
		t.Fatal(err)
	}
	want = []string{"grpc.health.v1.Health", quoratev1connect.AdminServiceName}
	slices.Sort(want)
	if !slices.Equal(got, want) {
		t.Errorf("admin port services: %q, want %q", got, want)
	}

	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	for _, tc := range []struct {
		url, service string
		code         connect.Code
	}{
		{c.APIURL(0), quoratev1connect.AdmissionServiceName, 0},
		{c.APIURL(0), "quorate.v1.Nope", connect.CodeNotFound},
		{c.AdminURL(0), quoratev1connect.AdminServiceName, 0},
		{c.AdminURL(0), quoratev1connect.AdmissionServiceName, connect.CodeNotFound},
	} {
		resp, err := grpchealth.NewClient(c.HTTPClient(), tc.url).Check(ctx, &grpchealth.CheckRequest{Service: tc.service})
		switch {
		case tc.code != 0 && connect.CodeOf(err) != tc.code:
			t.Errorf("%s %s: %v, want %v", tc.url, tc.service, err, tc.code)
		case tc.code == 0 && (err != nil || resp.Status != grpchealth.StatusServing):
			t.Errorf("%s %s: %v %v, want SERVING", tc.url, tc.service, resp, err)
		}
	}
	for _, url := range []string{c.APIURL(0), c.AdminURL(0)} {
		for path, want := range map[string]string{"/healthz": "ok\n", "/readyz": "ready\n"} {
			code, body, err := probe(c.HTTPClient(), url+path)
			if err != nil || code != http.StatusOK || body != want {
				t.Errorf("GET %s%s: %d %q %v, want 200 %q", url, path, code, body, err, want)
			}
			resp, err := c.HTTPClient().Post(url+path, "text/plain", strings.NewReader("x"))
			if err != nil {
				t.Fatal(err)
			}
			resp.Body.Close()
			if resp.StatusCode != http.StatusMethodNotAllowed {
				t.Errorf("POST %s%s: %s, want 405", url, path, resp.Status)
			}
		}
	}
}
