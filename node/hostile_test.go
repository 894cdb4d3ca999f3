package node_test

import (
	"bytes"
	"compress/gzip"
	"context"
	"encoding/binary"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"connectrpc.com/connect"
	"google.golang.org/protobuf/proto"

	"github.com/quorate/quorate/node"
	"github.com/quorate/quorate/node/nodetest"
	quoratev1 "github.com/quorate/quorate/proto/quorate/v1"
)

// A table of what hostile or careless clients send to a node's listeners,
// and what the node must answer, against a real 3-node cluster over TCP.
// Every row is sent as raw HTTP and checked for its code, for the field or
// reason its error names, and for the heap it cost the process (the nodes
// run in it). Rows for other listeners or fields live in their own files as
// functions returning []hostileRow, added to the list in TestHostileClient
// (or run against another cluster with runHostileRows).

// hostileRow is one request and the answer it must get.
type hostileRow struct {
	name string
	// send makes the request and returns what came back; it must give up
	// within ctx.
	send func(ctx context.Context, t *testing.T, h *hostileEnv) hostileReply
	// code is the Connect code the answer must carry; 0 means OK.
	code connect.Code
	// status, if set, is the HTTP status the answer must carry.
	status int
	// contains are what the error message must hold (the field or reason).
	contains []string
	// check, if set, checks more afterwards (e.g. nothing was applied).
	check func(ctx context.Context, t *testing.T, h *hostileEnv, r hostileReply)
	// heap bounds the heap the row may grow; 0 means hostileHeapGrowth.
	heap uint64
}

// hostileReply is what a node answered.
type hostileReply struct {
	status  int          // HTTP status
	code    connect.Code // 0: OK
	message string
	body    []byte // the response message of an OK Connect unary answer
	elapsed time.Duration
	err     error         // the request failed without an answer
	closed  time.Duration // when the server closed the connection (slowH1)
}

const (
	hostileHeapGrowth = 256 << 20
	hostileRowTimeout = 20 * time.Second
	// hostileBodyTimeout is the request body bound of nodes 0 and 1. Node
	// 2 keeps a long one: rows with large bodies go there (uploading them
	// may take seconds on a loaded machine), and its shutdown row shows
	// that shutdown cuts bodies rather than waiting for the bound.
	hostileBodyTimeout = time.Second
	// hostileLongWait is the max_wait of acquires that outlive the bound.
	hostileLongWait = 3 * hostileBodyTimeout / 2
	// hostileMaxBytes is the nodes' request bound: half the default, to
	// halve the work of the size rows; the largest legitimate AdmitBatch
	// in JSON (6.5 MB unescaped) still fits.
	hostileMaxBytes = 8 << 20
	// hostilePeerMaxBytes is the peer port's request bound.
	hostilePeerMaxBytes = 12 << 20
	hostileRate         = "hostile-rate"
	hostileLease        = "hostile-lease"
)

// hostileEnv is the cluster and the clients rows use.
type hostileEnv struct {
	c  *nodetest.Cluster
	h1 *http.Client // HTTP/1.1
	h2 *http.Client // HTTP/2 over cleartext, with prior knowledge
	// peer is h2 to the peer port's forwarding channel (see post).
	peer *http.Client
	// bomb is ~1 MiB of gzip inflating to 1 GiB of zeros.
	bomb []byte
}

func newHostileEnv(t *testing.T) *hostileEnv {
	c := nodetest.NewClusterWith(t, nodetest.Options{Configure: func(i int, cfg *node.Config) {
		cfg.RequestTimeout = 10 * time.Second
		cfg.RequestBodyTimeout = hostileBodyTimeout
		cfg.MaxRequestBytes = hostileMaxBytes
		cfg.MaxPeerRequestBytes = hostilePeerMaxBytes
		if i == 2 {
			cfg.RequestBodyTimeout = time.Minute
		}
	}})
	var p1, p2 http.Protocols
	p1.SetHTTP1(true)
	p2.SetUnencryptedHTTP2(true)
	h := &hostileEnv{c: c,
		h1:   &http.Client{Transport: &http.Transport{Protocols: &p1}},
		h2:   &http.Client{Transport: &http.Transport{Protocols: &p2}},
		peer: &http.Client{Transport: &http.Transport{Protocols: &p2, DialContext: dialForwarding(c)}},
		bomb: gzipBomb(t),
	}
	t.Cleanup(h.h1.CloseIdleConnections)
	t.Cleanup(h.h2.CloseIdleConnections)
	t.Cleanup(h.peer.CloseIdleConnections)
	applyPolicy(t, c, hostileRate, 1000, time.Minute, 1000)
	applyConcurrency(t, c, hostileLease, 1, time.Minute)
	return h
}

// gzipBomb returns 1024 gzip members of 1 MiB of zeros each: a reader
// inflates them as one stream of 1 GiB. Compressing one member and
// repeating it costs a fraction of a second; compressing 1 GiB would take
// minutes under the race detector.
func gzipBomb(t *testing.T) []byte {
	var member bytes.Buffer
	zw, err := gzip.NewWriterLevel(&member, gzip.BestCompression)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := zw.Write(make([]byte, 1<<20)); err != nil {
		t.Fatal(err)
	}
	if err := zw.Close(); err != nil {
		t.Fatal(err)
	}
	return bytes.Repeat(member.Bytes(), 1024)
}

// runHostileRows runs rows one after another (each measures the heap).
func runHostileRows(t *testing.T, h *hostileEnv, rows []hostileRow) {
	for _, row := range rows {
		t.Run(row.name, func(t *testing.T) {
			ctx, cancel := context.WithTimeout(context.Background(), hostileRowTimeout)
			defer cancel()
			stop := watchHeap()
			r := row.send(ctx, t, h)
			growth := stop()
			if r.err != nil {
				t.Fatalf("no answer after %v: %v", r.elapsed.Round(time.Millisecond), r.err)
			}
			if r.code != row.code {
				t.Errorf("answer %s (HTTP %d, %q), want %s", codeName(r.code), r.status, r.message, codeName(row.code))
			}
			if row.status != 0 && r.status != row.status {
				t.Errorf("HTTP status %d, want %d", r.status, row.status)
			}
			for _, s := range row.contains {
				if !strings.Contains(r.message, s) {
					t.Errorf("error %q does not name %q", r.message, s)
				}
			}
			limit := row.heap
			if limit == 0 {
				limit = hostileHeapGrowth
			}
			t.Logf("answered %s in %v; heap grew by at most %d MiB", codeName(r.code), r.elapsed.Round(time.Millisecond), growth>>20)
			if growth > limit {
				t.Errorf("heap grew by %d MiB while serving it (at most %d MiB)", growth>>20, limit>>20)
			}
			if row.check != nil && !t.Failed() {
				row.check(ctx, t, h, r)
			}
		})
	}
}

func codeName(c connect.Code) string {
	if c == 0 {
		return "ok"
	}
	return c.String()
}

// watchHeap samples the heap until the returned function is called, which
// returns the peak growth over the live heap at the start.
func watchHeap() func() uint64 {
	runtime.GC()
	var ms runtime.MemStats
	runtime.ReadMemStats(&ms)
	base, peak := ms.HeapAlloc, ms.HeapAlloc
	done := make(chan struct{})
	var wg sync.WaitGroup
	wg.Go(func() {
		tick := time.NewTicker(20 * time.Millisecond)
		defer tick.Stop()
		for {
			var ms runtime.MemStats
			runtime.ReadMemStats(&ms)
			peak = max(peak, ms.HeapAlloc)
			select {
			case <-done:
				return
			case <-tick.C:
			}
		}
	})
	return func() uint64 {
		close(done)
		wg.Wait()
		return peak - base
	}
}

const (
	admitPath      = "quorate.v1.AdmissionService/Admit"
	admitBatchPath = "quorate.v1.AdmissionService/AdmitBatch"
	applyPath      = "quorate.v1.AdminService/ApplyPolicies"
	acquirePath    = "quorate.v1.LeaseService/AcquireLease"
)

func TestHostileClient(t *testing.T) {
	h := newHostileEnv(t)
	var rows []hostileRow
	rows = append(rows, sizeRows()...)
	rows = append(rows, strictJSONRows()...)
	rows = append(rows, bodyTimeRows()...) // its last row stops and restarts node 2
	runHostileRows(t, h, rows)
}

// sizeRows: requests larger than the API port accepts are refused while
// they are read, whatever the protocol and compression.
func sizeRows() []hostileRow {
	tooLarge := []string{"larger than", strconv.Itoa(hostileMaxBytes)}
	gzipBomb := func(contentType string) func(context.Context, *testing.T, *hostileEnv) hostileReply {
		return func(ctx context.Context, _ *testing.T, h *hostileEnv) hostileReply {
			return h.post(ctx, h.h1, 0, admitPath, headers("Content-Type", contentType, "Content-Encoding", "gzip"),
				bytes.NewReader(h.bomb), int64(len(h.bomb)))
		}
	}
	grpcBomb := func(client func(*hostileEnv) *http.Client, contentType string) func(context.Context, *testing.T, *hostileEnv) hostileReply {
		return func(ctx context.Context, _ *testing.T, h *hostileEnv) hostileReply {
			frame := grpcFrame(true, h.bomb)
			return h.post(ctx, client(h), 1, admitPath, headers("Content-Type", contentType, "Grpc-Encoding", "gzip", "Te", "trailers"),
				bytes.NewReader(frame), int64(len(frame)))
		}
	}
	h2 := func(h *hostileEnv) *http.Client { return h.h2 }
	return []hostileRow{
		{name: "gzip bomb, Connect JSON", send: gzipBomb("application/json"), code: connect.CodeResourceExhausted,
			contains: append(tooLarge, "decompression")},
		{name: "gzip bomb, Connect proto", send: gzipBomb("application/proto"), code: connect.CodeResourceExhausted,
			contains: append(tooLarge, "decompression")},
		{name: "gzip bomb, gRPC", send: grpcBomb(h2, "application/grpc+proto"), code: connect.CodeResourceExhausted,
			contains: append(tooLarge, "decompression")},
		{name: "gzip bomb, peer port, gRPC", send: grpcBomb(func(h *hostileEnv) *http.Client { return h.peer }, "application/grpc+proto"),
			code: connect.CodeResourceExhausted, contains: []string{"larger than", strconv.Itoa(hostilePeerMaxBytes), "--max-peer-request-bytes"}},
		{name: "50 MB JSON body", code: connect.CodeResourceExhausted, contains: tooLarge,
			send: func(ctx context.Context, _ *testing.T, h *hostileEnv) hostileReply {
				const size = 50 << 20
				head, tail := `{"policy":"`+hostileRate+`","key":"`, `"}`
				body := io.MultiReader(strings.NewReader(head), io.LimitReader(repeatReader('k'), size), strings.NewReader(tail))
				return h.post(ctx, h.h2, 2, admitPath, headers("Content-Type", "application/json"), body, int64(len(head)+size+len(tail)))
			}},
		{name: "endless chunked body", code: connect.CodeResourceExhausted, contains: []string{"larger than"},
			send: func(ctx context.Context, _ *testing.T, h *hostileEnv) hostileReply {
				return h.post(ctx, h.h2, 2, admitPath, headers("Content-Type", "application/json"), repeatReader(' '), -1)
			}},
		{name: "gRPC frame declaring 50 MB", code: connect.CodeResourceExhausted, contains: tooLarge,
			send: func(ctx context.Context, _ *testing.T, h *hostileEnv) hostileReply {
				frame := grpcFrame(false, nil)
				binary.BigEndian.PutUint32(frame[1:], 50<<20)
				return h.post(ctx, h.h2, 2, admitPath, headers("Content-Type", "application/grpc", "Te", "trailers"),
					bytes.NewReader(frame), int64(len(frame)))
			}},
		{name: "millions of empty batch items, proto", code: connect.CodeInvalidArgument, contains: []string{"more than", "messages"},
			send: func(ctx context.Context, _ *testing.T, h *hostileEnv) hostileReply {
				body := bytes.Repeat([]byte{0x0a, 0x00}, 3<<20) // field 1 (requests), empty: 6 MiB
				return h.post(ctx, h.h2, 2, admitBatchPath, headers("Content-Type", "application/proto"), bytes.NewReader(body), int64(len(body)))
			}},
		{name: "millions of empty batch items, JSON", code: connect.CodeInvalidArgument, contains: []string{"more than", "messages"},
			send: func(ctx context.Context, _ *testing.T, h *hostileEnv) hostileReply {
				body := `{"requests":[` + strings.Repeat(`{},`, 2<<20) + `{}]}`
				return h.post(ctx, h.h2, 2, admitBatchPath, headers("Content-Type", "application/json"), strings.NewReader(body), int64(len(body)))
			}},
		{name: "largest legitimate AdmitBatch, JSON", code: 0, send: largestBatch,
			check: func(_ context.Context, t *testing.T, _ *hostileEnv, r hostileReply) {
				var resp struct {
					Results []struct {
						Error struct{ Field string } `json:"error"`
					} `json:"results"`
				}
				if err := json.Unmarshal(r.body, &resp); err != nil || len(resp.Results) != node.MaxAdmitBatch {
					t.Fatalf("answer holds %d results (%v), want %d", len(resp.Results), err, node.MaxAdmitBatch)
				}
				if f := resp.Results[node.MaxAdmitBatch-1].Error.Field; f != "cost" {
					t.Errorf("last result's error names field %q, want cost", f)
				}
			}},
		{name: "2 MiB of headers", code: connect.CodeUnknown, status: http.StatusRequestHeaderFieldsTooLarge,
			send: func(ctx context.Context, _ *testing.T, h *hostileEnv) hostileReply {
				return h.post(ctx, h.h1, 0, admitPath, headers("Content-Type", "application/json", "X-Pad", strings.Repeat("p", 2<<20)),
					strings.NewReader("{}"), 2)
			}},
	}
}

// largestBatch sends MaxAdmitBatch requests with every field at its
// longest, 8 more checks each, in JSON: it must be decoded, not refused for
// its size. Each request's cost is 0, so each is refused alone, before any
// decision.
func largestBatch(ctx context.Context, _ *testing.T, h *hostileEnv) hostileReply {
	key := func(i, j int) string {
		p := fmt.Sprintf("{tenant-%d}:%d:", i, j)
		return p + strings.Repeat("k", 512-len(p))
	}
	var b strings.Builder
	b.WriteString(`{"requests":[`)
	for i := range node.MaxAdmitBatch {
		if i > 0 {
			b.WriteByte(',')
		}
		fmt.Fprintf(&b, `{"policy":%q,"key":%q,"cost":"0","request_id":%q,"caller":%q,"max_wait":"60s","also":[`,
			strings.Repeat("p", 64), key(i, 0), strings.Repeat("r", 128), strings.Repeat("c", 128))
		for j := 1; j <= 8; j++ {
			if j > 1 {
				b.WriteByte(',')
			}
			fmt.Fprintf(&b, `{"policy":%q,"key":%q,"cost":"1"}`, strings.Repeat("p", 64), key(i, j))
		}
		b.WriteString(`]}`)
	}
	b.WriteString(`]}`)
	return h.jsonCall(ctx, 2, admitBatchPath, b.String())
}

// strictJSONRows: JSON requests naming fields their message does not
// declare are refused, naming the field; binary protobuf stays lenient.
func strictJSONRows() []hostileRow {
	admitJSON := func(body string) func(context.Context, *testing.T, *hostileEnv) hostileReply {
		return func(ctx context.Context, _ *testing.T, h *hostileEnv) hostileReply {
			return h.jsonCall(ctx, 0, admitPath, body)
		}
	}
	untouched := func(key string) func(context.Context, *testing.T, *hostileEnv, hostileReply) {
		return func(ctx context.Context, t *testing.T, h *hostileEnv, _ hostileReply) {
			resp, err := h.c.Admission(1).Peek(ctx, connect.NewRequest(&quoratev1.PeekRequest{Policy: hostileRate, Key: key}))
			if err != nil {
				t.Fatalf("peek: %v", err)
			}
			if got := resp.Msg.GetRemaining(); got != 1000 {
				t.Errorf("key %s has %d units left after a refused request, want 1000", key, got)
			}
		}
	}
	return []hostileRow{
		{name: "Admit with kost", code: connect.CodeInvalidArgument, contains: []string{`kost`, "unknown field"},
			send:  admitJSON(`{"policy":"` + hostileRate + `","key":"kost","kost":5}`),
			check: untouched("kost")},
		{name: "Admit with also[1].kost", code: connect.CodeInvalidArgument, contains: []string{"also[1].kost"},
			send: admitJSON(`{"policy":"` + hostileRate + `","key":"{t}:a","also":[{"policy":"` + hostileRate +
				`","key":"{t}:b"},{"policy":"` + hostileRate + `","key":"{t}:c","kost":5}]}`),
			check: untouched("{t}:a")},
		{name: "Admit with kost, charset utf-8", code: connect.CodeInvalidArgument, contains: []string{"kost"},
			send: func(ctx context.Context, _ *testing.T, h *hostileEnv) hostileReply {
				body := `{"policy":"` + hostileRate + `","key":"k","kost":5}`
				return h.post(ctx, h.h1, 1, admitPath, headers("Content-Type", "application/json; charset=utf-8"),
					strings.NewReader(body), int64(len(body)))
			}},
		{name: "Admit with kost, gRPC JSON", code: connect.CodeInvalidArgument, contains: []string{"kost"},
			send: func(ctx context.Context, _ *testing.T, h *hostileEnv) hostileReply {
				frame := grpcFrame(false, []byte(`{"policy":"`+hostileRate+`","key":"k","kost":5}`))
				return h.post(ctx, h.h2, 2, admitPath, headers("Content-Type", "application/grpc+json", "Te", "trailers"),
					bytes.NewReader(frame), int64(len(frame)))
			}},
		{name: "Admit with kost, gRPC-Web JSON", code: connect.CodeInvalidArgument, contains: []string{"kost"},
			send: func(ctx context.Context, _ *testing.T, h *hostileEnv) hostileReply {
				frame := grpcFrame(false, []byte(`{"policy":"`+hostileRate+`","key":"k","kost":5}`))
				return h.post(ctx, h.h1, 0, admitPath, headers("Content-Type", "application/grpc-web+json"),
					bytes.NewReader(frame), int64(len(frame)))
			}},
		{name: "policy with brust", code: connect.CodeInvalidArgument, contains: []string{"policies[0].brust"},
			send: func(ctx context.Context, _ *testing.T, h *hostileEnv) hostileReply {
				return h.jsonCall(ctx, 1, applyPath, `{"policies":[{"name":"hostile-brust","algorithm":"token_bucket",`+
					`"limit":"10","period":"1s","brust":"50"}]}`)
			},
			check: func(ctx context.Context, t *testing.T, h *hostileEnv, _ hostileReply) {
				_, err := h.c.Admin(0).GetPolicy(ctx, connect.NewRequest(&quoratev1.GetPolicyRequest{Name: "hostile-brust"}))
				if connect.CodeOf(err) != connect.CodeNotFound {
					t.Errorf("policy hostile-brust after a refused apply: %v, want not_found", err)
				}
			}},
		{name: "Admit in proto with an unknown field", code: 0,
			send: func(ctx context.Context, t *testing.T, h *hostileEnv) hostileReply {
				b, err := proto.Marshal(&quoratev1.AdmitRequest{Policy: hostileRate, Key: "proto-unknown"})
				if err != nil {
					t.Fatal(err)
				}
				b = append(b, 0xf8, 0x06, 0x05) // field 111, varint 5
				return h.post(ctx, h.h1, 2, admitPath, headers("Content-Type", "application/proto"), bytes.NewReader(b), int64(len(b)))
			}},
	}
}

// bodyTimeRows: a body that arrives too slowly is cut after the bound
// (hostileBodyTimeout on nodes 0 and 1), a call that runs long after its
// body arrived is not, and shutdown cuts bodies still arriving at once.
func bodyTimeRows() []hostileRow {
	cutInTime := func(_ context.Context, t *testing.T, _ *hostileEnv, r hostileReply) {
		if r.elapsed < hostileBodyTimeout || r.elapsed > hostileBodyTimeout+5*time.Second {
			t.Errorf("cut after %v, want about %v", r.elapsed, hostileBodyTimeout)
		}
	}
	longAcquire := func(client func(*hostileEnv) *http.Client, i int) func(context.Context, *testing.T, *hostileEnv) hostileReply {
		return func(ctx context.Context, t *testing.T, h *hostileEnv) hostileReply {
			key := fmt.Sprintf("long-%d", i)
			if resp, err := acquire(ctx, h.c, i, hostileLease, key, key+"-holder"); err != nil || !resp.GetAllowed() {
				t.Fatalf("first acquire: %v %v", resp, err)
			}
			body := fmt.Sprintf(`{"policy":%q,"key":%q,"max_wait":"%gs"}`, hostileLease, key, hostileLongWait.Seconds())
			return h.post(ctx, client(h), i, acquirePath, headers("Content-Type", "application/json"), strings.NewReader(body), int64(len(body)))
		}
	}
	waitedFull := func(_ context.Context, t *testing.T, _ *hostileEnv, r hostileReply) {
		var resp struct {
			Allowed bool   `json:"allowed"`
			Waited  string `json:"waited"`
		}
		if err := json.Unmarshal(r.body, &resp); err != nil {
			t.Fatalf("answer %q: %v", r.body, err)
		}
		waited, err := time.ParseDuration(resp.Waited)
		if err != nil || resp.Allowed || waited < hostileLongWait {
			t.Errorf("acquire answered allowed=%v after waiting %q, want a denial after %v", resp.Allowed, resp.Waited, hostileLongWait)
		}
	}
	return []hostileRow{
		{name: "slow body, HTTP/1.1", code: connect.CodeDeadlineExceeded, contains: []string{"--request-body-timeout"}, check: cutInTime,
			send: func(ctx context.Context, t *testing.T, h *hostileEnv) hostileReply {
				return h.slowH1(ctx, 0, admitPath, nil, false)
			}},
		{name: "slow body to an unknown path, HTTP/1.1", code: connect.CodeUnknown, status: http.StatusNotFound,
			send: func(ctx context.Context, t *testing.T, h *hostileEnv) hostileReply {
				return h.slowH1(ctx, 0, "nowhere", nil, true)
			},
			check: func(_ context.Context, t *testing.T, _ *hostileEnv, r hostileReply) {
				// After answering, the server reads what is left of the
				// body (up to 256 KiB): within the bound too.
				if r.closed > hostileBodyTimeout+5*time.Second {
					t.Errorf("connection closed after %v, want about %v", r.closed, hostileBodyTimeout)
				}
			}},
		{name: "slow body, peer port", code: connect.CodeDeadlineExceeded, contains: []string{"--request-body-timeout"}, check: cutInTime,
			send: func(ctx context.Context, _ *testing.T, h *hostileEnv) hostileReply {
				return h.post(ctx, h.peer, 0, admitPath, headers("Content-Type", "application/proto"),
					slowReader{ctx: ctx, interval: 100 * time.Millisecond}, -1)
			}},
		{name: "slow body, HTTP/2", code: connect.CodeDeadlineExceeded, contains: []string{"--request-body-timeout"}, check: cutInTime,
			send: func(ctx context.Context, _ *testing.T, h *hostileEnv) hostileReply {
				return h.post(ctx, h.h2, 1, admitPath, headers("Content-Type", "application/json"),
					slowReader{ctx: ctx, interval: 100 * time.Millisecond}, -1)
			}},
		{name: "acquire waiting past the body bound, HTTP/1.1", code: 0, check: waitedFull,
			send: longAcquire(func(h *hostileEnv) *http.Client { return h.h1 }, 0)},
		{name: "acquire waiting past the body bound, HTTP/2", code: 0, check: waitedFull,
			send: longAcquire(func(h *hostileEnv) *http.Client { return h.h2 }, 1)},
		{name: "slow body during shutdown", code: connect.CodeUnavailable, contains: []string{"shutting down"},
			send: func(ctx context.Context, t *testing.T, h *hostileEnv) hostileReply {
				// Node 2's body bound is a minute: only the shutdown cuts.
				stopped := make(chan time.Duration, 1)
				r := h.slowH1(ctx, 2, admitPath, func() {
					go func() {
						start := time.Now()
						h.c.Stop(2)
						stopped <- time.Since(start)
					}()
				}, false)
				select {
				case d := <-stopped:
					// Without the cut, shutdown waits RequestTimeout+1s (11s).
					if d > 8*time.Second {
						t.Errorf("node 2 took %v to stop", d)
					}
				case <-ctx.Done():
					t.Errorf("node 2 did not stop within %v", hostileRowTimeout)
				}
				h.c.Start(2)
				h.c.WaitReady(t)
				return r
			}},
	}
}
