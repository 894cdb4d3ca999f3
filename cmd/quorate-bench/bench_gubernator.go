package main

// Gubernator beside Quorate and Redis in `quorate-bench compare`: a 3-node
// cluster of the gubernator binary on loopback, driven through its gRPC API
// (GetRateLimits) by the same load generator.

import (
	"context"
	"debug/buildinfo"
	"errors"
	"fmt"
	"net"
	"net/http"
	"os"
	"slices"
	"strconv"
	"strings"
	"time"

	"connectrpc.com/connect"

	gubernatorpb "github.com/quorate/quorate/proto/third_party/gubernator"
	"github.com/quorate/quorate/proto/third_party/gubernator/gubernatorpbconnect"
)

const (
	// gubernatorDefaultBin is where `make bench-compare` installs gubernator.
	gubernatorDefaultBin = ".cache/bin/gubernator"
	// gubernatorNotInstalled is what the table says when there is none.
	gubernatorNotInstalled = "not installed: make bench-compare installs it"
	// gubernatorNodes is the size of the cluster compare starts.
	gubernatorNodes = 3
	// gubernatorRateLimit is the rate limit's name in every request.
	gubernatorRateLimit = comparePolicy
)

// gubernatorCluster is a Gubernator cluster this program started: one
// process per node, each with its gRPC API on a loopback port.
type gubernatorCluster struct {
	nodes []*serverProcess
	addrs []string // host:port of each node's gRPC API
}

// startGubernatorCluster starts n gubernator processes from bin on free
// loopback addresses, joined by memberlist gossip through the first, and waits
// until every node answers HealthCheck healthy and knows all n peers.
func startGubernatorCluster(ctx context.Context, bin string, n int) (*gubernatorCluster, error) {
	if _, err := os.Stat(bin); err != nil { // before /bin/sh would say it less clearly
		return nil, err
	}
	var lastErr error
	for attempt := 0; attempt < 3; attempt++ { // another process may take a free port first
		c, err := tryGubernatorCluster(ctx, bin, n)
		if err == nil {
			return c, nil
		}
		lastErr = err
		if ctx.Err() != nil || !strings.Contains(err.Error(), "in use") {
			break
		}
	}
	return nil, lastErr
}

func tryGubernatorCluster(ctx context.Context, bin string, n int) (*gubernatorCluster, error) {
	// Gubernator's memberlist discovery tells peers apart by IP address and
	// by host name, so each node gets an address of its own (127.0.0.1,
	// 127.0.0.2, ...: all loopback on Linux), with its gRPC, HTTP and gossip
	// ports, and a host name of its own (withHostname).
	type nodeAddrs struct{ grpc, http, gossip string }
	nodes := make([]nodeAddrs, n)
	for i := range nodes {
		ip := fmt.Sprintf("127.0.0.%d", i+1)
		var ports []int
		for len(ports) < 3 {
			p, err := freePortOn(ip)
			if err != nil {
				return nil, err
			}
			if !slices.Contains(ports, p) {
				ports = append(ports, p)
			}
		}
		at := func(p int) string { return net.JoinHostPort(ip, strconv.Itoa(p)) }
		nodes[i] = nodeAddrs{at(ports[0]), at(ports[1]), at(ports[2])}
	}
	var base []string // this environment without its GUBER_ settings
	for _, kv := range os.Environ() {
		if !strings.HasPrefix(kv, "GUBER_") {
			base = append(base, kv)
		}
	}
	c := &gubernatorCluster{}
	for i, a := range nodes {
		env := append(slices.Clip(base),
			"GUBER_GRPC_ADDRESS="+a.grpc,
			"GUBER_HTTP_ADDRESS="+a.http,
			"GUBER_ADVERTISE_ADDRESS="+a.grpc,
			fmt.Sprintf("GUBER_INSTANCE_ID=bench-%d", i),
			"GUBER_PEER_DISCOVERY_TYPE=member-list",
			"GUBER_MEMBERLIST_ADDRESS="+a.gossip,
			"GUBER_MEMBERLIST_BIND_ADDRESS="+a.gossip,
			"GUBER_MEMBERLIST_ADVERTISE_ADDRESS="+a.grpc,
			"GUBER_MEMBERLIST_KNOWN_NODES="+nodes[0].gossip,
			"GUBER_LOG_LEVEL=warn",
			"OTEL_TRACES_EXPORTER=none",
		)
		sh, args, configure := withHostname(fmt.Sprintf("gubernator-bench-%d", i), bin, nil)
		p, err := startServerProcess(ctx, "gubernator on "+a.grpc, sh, args, env, configure)
		if err != nil {
			return nil, errors.Join(err, c.stop())
		}
		c.nodes, c.addrs = append(c.nodes, p), append(c.addrs, a.grpc)
	}
	hc := &http.Client{Transport: h2cTransport(1)}
	defer hc.CloseIdleConnections()
	deadline := time.Now().Add(30 * time.Second)
	for i, addr := range c.addrs {
		client := gubernatorpbconnect.NewV1Client(hc, "http://"+addr, connect.WithGRPC())
		err := pollUntil(ctx, deadline, c.nodes[i].exited, func(ctx context.Context) (bool, error) {
			resp, err := client.HealthCheck(ctx, connect.NewRequest(&gubernatorpb.HealthCheckReq{}))
			if err != nil {
				return false, err
			}
			if m := resp.Msg; m.GetStatus() != "healthy" || int(m.GetPeerCount()) != n {
				return false, fmt.Errorf("HealthCheck: %s with %d peers (%s)", m.GetStatus(), m.GetPeerCount(), m.GetMessage())
			}
			return true, nil
		})
		if err != nil {
			return nil, errors.Join(fmt.Errorf("%s: not healthy with %d peers: %w: %s", c.nodes[i].name, n, err,
				lastLines(c.nodes[i].log.String(), 5)), c.stop())
		}
	}
	return c, nil
}

// stop stops every node and returns their errors.
func (c *gubernatorCluster) stop() error {
	var errs []error
	for _, p := range c.nodes {
		errs = append(errs, p.stop())
	}
	return errors.Join(errs...)
}

// h2cTransport speaks HTTP/2 without TLS (gRPC on a plaintext port), up to
// conns connections per host.
func h2cTransport(conns int) *http.Transport {
	var protocols http.Protocols
	protocols.SetUnencryptedHTTP2(true)
	return &http.Transport{Protocols: &protocols, MaxIdleConnsPerHost: conns, MaxConnsPerHost: conns}
}

// gubernatorVersion names the Gubernator release bin was built from (the
// module version go install recorded in it), or says why it cannot.
func gubernatorVersion(bin string) string {
	info, err := buildinfo.ReadFile(bin)
	if err != nil {
		return fmt.Sprintf("%s: %v", bin, err)
	}
	return fmt.Sprintf("%s %s (built with %s)", info.Main.Path, info.Main.Version, info.GoVersion)
}

// gubernatorTarget sends GetRateLimits calls, one request per key, rotating
// through the cluster's nodes. Every request is the token bucket of the
// Redis script's defaults: limit capacity, duration the time it takes to
// refill completely.
type gubernatorTarget struct {
	hc      *http.Client
	clients []gubernatorpbconnect.V1Client
	keys    []string
	next    []int                          // per worker: the node of its next call
	scratch [][]*gubernatorpb.RateLimitReq // per worker, reused between its calls
}

// newGubernatorTarget returns a target for the nodes at addrs (host:port),
// up to load.workers connections per node, with the bucket of o.
func newGubernatorTarget(addrs []string, o redisOptions, load loadOptions) *gubernatorTarget {
	t := &gubernatorTarget{
		hc:      &http.Client{Transport: h2cTransport(load.workers)},
		keys:    benchKeyNames(load.keyPrefix, load.keys),
		next:    make([]int, load.workers),
		scratch: make([][]*gubernatorpb.RateLimitReq, load.workers),
	}
	for _, a := range addrs {
		t.clients = append(t.clients, gubernatorpbconnect.NewV1Client(t.hc, "http://"+a, connect.WithGRPC()))
	}
	for w := range t.scratch {
		t.next[w] = w % len(addrs)
		t.scratch[w] = make([]*gubernatorpb.RateLimitReq, load.batch)
		for i := range t.scratch[w] {
			t.scratch[w][i] = &gubernatorpb.RateLimitReq{Name: gubernatorRateLimit, Hits: 1, Limit: o.capacity,
				Duration: o.ttl().Milliseconds(), Algorithm: gubernatorpb.Algorithm_TOKEN_BUCKET}
		}
	}
	return t
}

func (t *gubernatorTarget) name() string { return targetGubernator }

func (t *gubernatorTarget) call(ctx context.Context, worker int, keys []int) (benchResult, error) {
	reqs := t.scratch[worker][:len(keys)]
	for i, k := range keys {
		reqs[i].UniqueKey = t.keys[k]
	}
	client := t.clients[t.next[worker]]
	t.next[worker] = (t.next[worker] + 1) % len(t.clients)
	var r benchResult
	resp, err := client.GetRateLimits(ctx, connect.NewRequest(&gubernatorpb.GetRateLimitsReq{Requests: reqs}))
	if err != nil {
		return r, err
	}
	results := resp.Msg.GetResponses()
	if len(results) != len(reqs) {
		return r, fmt.Errorf("GetRateLimits answered %d responses for %d requests", len(results), len(reqs))
	}
	for _, res := range results {
		switch {
		case res.GetError() != "":
			r.itemErrors = append(r.itemErrors, "gubernator_error")
		case res.GetStatus() == gubernatorpb.Status_UNDER_LIMIT:
			r.allowed++
		default:
			r.denied++
		}
	}
	return r, nil
}

func (t *gubernatorTarget) close() error {
	t.hc.CloseIdleConnections()
	return nil
}
