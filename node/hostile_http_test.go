package node_test

import (
	"bufio"
	"context"
	"encoding/base64"
	"encoding/binary"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"time"

	"connectrpc.com/connect"
	"google.golang.org/protobuf/proto"

	"github.com/quorate/quorate/node"
	"github.com/quorate/quorate/node/nodetest"
	quoratev1 "github.com/quorate/quorate/proto/quorate/v1"
)

// The raw HTTP of TestHostileClient's rows: requests of every protocol the
// API port speaks, and their answers read without a Connect client.

// post sends one request with client to node i and reads the answer of any
// protocol. With h.peer, it goes to node i's peer port.
func (h *hostileEnv) post(ctx context.Context, client *http.Client, i int, procedure string, header http.Header,
	body io.Reader, size int64) hostileReply {
	start := time.Now()
	base := h.c.APIURL(i)
	if client == h.peer {
		base = "http://" + h.c.Config(i).RaftAddr
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, base+"/"+procedure, body)
	if err != nil {
		return hostileReply{err: err}
	}
	req.Header = header
	req.ContentLength = size
	resp, err := client.Do(req)
	if err != nil {
		return hostileReply{err: err, elapsed: time.Since(start)}
	}
	return readReply(resp, start)
}

// readReply reads the answer of any protocol.
func readReply(resp *http.Response, start time.Time) hostileReply {
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	r := hostileReply{status: resp.StatusCode, elapsed: time.Since(start)}
	if err != nil {
		r.err = err
		return r
	}
	ct := resp.Header.Get("Content-Type")
	switch {
	case strings.HasPrefix(ct, "application/grpc-web"):
		r.code, r.message = grpcStatus(resp.Header, grpcWebTrailers(b))
	case strings.HasPrefix(ct, "application/grpc"):
		r.code, r.message = grpcStatus(resp.Header, resp.Trailer)
	case resp.StatusCode == http.StatusOK:
		r.body = b
	case strings.HasPrefix(ct, "application/json"):
		r.code, r.message = connectError(b)
	default: // not from Connect
		r.code, r.message = connect.CodeUnknown, string(b)
	}
	return r
}

// connectError decodes a Connect unary error body; the message also lists
// the fields of its FieldViolation details.
func connectError(b []byte) (connect.Code, string) {
	var e struct {
		Code    string `json:"code"`
		Message string `json:"message"`
		Details []struct {
			Type  string `json:"type"`
			Value string `json:"value"`
		} `json:"details"`
	}
	if err := json.Unmarshal(b, &e); err != nil {
		return connect.CodeUnknown, fmt.Sprintf("not a Connect error: %q", b)
	}
	var code connect.Code
	if err := code.UnmarshalText([]byte(e.Code)); err != nil {
		return connect.CodeUnknown, fmt.Sprintf("unknown code %q: %s", e.Code, e.Message)
	}
	msg := e.Message
	for _, d := range e.Details {
		raw, err := base64.RawStdEncoding.DecodeString(strings.TrimRight(d.Value, "="))
		fv := new(quoratev1.FieldViolation)
		if err == nil && d.Type == "quorate.v1.FieldViolation" && proto.Unmarshal(raw, fv) == nil {
			msg += " [field " + fv.GetField() + "]"
		}
	}
	return code, msg
}

func grpcStatus(header, trailer http.Header) (connect.Code, string) {
	status, msg := trailer.Get("Grpc-Status"), trailer.Get("Grpc-Message")
	if status == "" { // trailers-only answer
		status, msg = header.Get("Grpc-Status"), header.Get("Grpc-Message")
	}
	n, err := strconv.Atoi(status)
	if err != nil {
		return connect.CodeUnknown, fmt.Sprintf("no grpc-status (%q)", status)
	}
	if m, err := url.PathUnescape(msg); err == nil {
		msg = m
	}
	return connect.Code(n), msg
}

// grpcWebTrailers reads the trailers frame of a gRPC-Web body.
func grpcWebTrailers(b []byte) http.Header {
	h := http.Header{}
	for len(b) >= 5 {
		flags, n := b[0], int(binary.BigEndian.Uint32(b[1:5]))
		if len(b) < 5+n {
			break
		}
		if flags&0x80 != 0 {
			for line := range strings.SplitSeq(string(b[5:5+n]), "\r\n") {
				if k, v, ok := strings.Cut(line, ":"); ok {
					h.Add(strings.TrimSpace(k), strings.TrimSpace(v))
				}
			}
		}
		b = b[5+n:]
	}
	return h
}

// grpcFrame is one gRPC message frame.
func grpcFrame(compressed bool, msg []byte) []byte {
	f := make([]byte, 5, 5+len(msg))
	if compressed {
		f[0] = 1
	}
	binary.BigEndian.PutUint32(f[1:], uint32(len(msg)))
	return append(f, msg...)
}

func headers(kv ...string) http.Header {
	h := http.Header{}
	for i := 0; i+1 < len(kv); i += 2 {
		h.Set(kv[i], kv[i+1])
	}
	return h
}

// jsonCall sends a Connect JSON unary call over HTTP/1.1.
func (h *hostileEnv) jsonCall(ctx context.Context, i int, procedure, body string) hostileReply {
	return h.post(ctx, h.h1, i, procedure, headers("Content-Type", "application/json"), strings.NewReader(body), int64(len(body)))
}

// repeatReader yields c forever.
type repeatReader byte

func (r repeatReader) Read(p []byte) (int, error) {
	for i := range p {
		p[i] = byte(r)
	}
	return len(p), nil
}

// slowReader yields one byte each interval until ctx ends.
type slowReader struct {
	ctx      context.Context
	interval time.Duration
}

func (r slowReader) Read(p []byte) (int, error) {
	select {
	case <-r.ctx.Done():
		return 0, r.ctx.Err()
	case <-time.After(r.interval):
	}
	p[0] = ' '
	return 1, nil
}

// slowH1 POSTs to path of node i, over its own HTTP/1.1 connection, a body
// that arrives one byte each 100ms, and returns the answer. With reading
// set, it asks for 100 Continue, which the server sends once the handler
// reads the body, and calls reading then. With waitClose, it then waits for
// the server to close the connection and sets the reply's closed.
func (h *hostileEnv) slowH1(ctx context.Context, i int, path string, reading func(), waitClose bool) hostileReply {
	start := time.Now()
	var d net.Dialer
	conn, err := d.DialContext(ctx, "tcp", strings.TrimPrefix(h.c.APIURL(i), "http://"))
	if err != nil {
		return hostileReply{err: err}
	}
	defer conn.Close()
	stop := context.AfterFunc(ctx, func() { conn.Close() })
	defer stop()
	expect := ""
	if reading != nil {
		expect = "Expect: 100-continue\r\n"
	}
	if _, err := fmt.Fprintf(conn, "POST /%s HTTP/1.1\r\nHost: quorate\r\nContent-Type: application/json\r\n"+
		"Content-Length: 1000\r\n%s\r\n", path, expect); err != nil {
		return hostileReply{err: err}
	}
	writing, stopWriting := context.WithCancel(ctx)
	defer stopWriting()
	go func() {
		for {
			select {
			case <-writing.Done():
				return
			case <-time.After(100 * time.Millisecond):
			}
			if _, err := conn.Write([]byte{' '}); err != nil {
				return
			}
		}
	}()
	br := bufio.NewReader(conn)
	for {
		resp, err := http.ReadResponse(br, nil)
		if err != nil {
			return hostileReply{err: err, elapsed: time.Since(start)}
		}
		if resp.StatusCode == http.StatusContinue {
			if reading != nil {
				reading()
			}
			continue
		}
		r := readReply(resp, start)
		if waitClose {
			_, err := io.Copy(io.Discard, br)
			if ctx.Err() != nil {
				r.err = fmt.Errorf("the server kept the connection open: %w", err)
			}
			r.closed = time.Since(start)
		}
		return r
	}
}

// dialForwarding returns a dialer that dials addr's peer mux and names the
// forwarding channel with the ID of c's cluster, as a node does before
// calling another's PeerService.
func dialForwarding(c *nodetest.Cluster) func(ctx context.Context, network, addr string) (net.Conn, error) {
	return func(ctx context.Context, network, addr string) (net.Conn, error) {
		return dialForwardingOf(ctx, network, addr, node.MetaClusterID(c.Node(0)))
	}
}

func dialForwardingOf(ctx context.Context, network, addr, cluster string) (net.Conn, error) {
	var d net.Dialer
	conn, err := d.DialContext(ctx, network, addr)
	if err != nil {
		return nil, err
	}
	if _, err := conn.Write(node.ForwardingHeader(cluster)); err != nil {
		conn.Close()
		return nil, err
	}
	return conn, nil
}
