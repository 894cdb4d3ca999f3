package raftmux

import (
	"bufio"
	"errors"
	"io"
	"net"
	"reflect"
	"testing"
	"time"

	"github.com/hashicorp/raft"
)

// rawConn dials h's shared listener directly.
func rawConn(t *testing.T, addr raft.ServerAddress) (net.Conn, *frameReader) {
	t.Helper()
	c, err := net.Dial("tcp", string(addr))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = c.Close() })
	_ = c.SetDeadline(time.Now().Add(30 * time.Second))
	return c, &frameReader{r: bufio.NewReader(c), max: 1 << 20}
}

// expectClosed waits for the server to close c.
func expectClosed(t *testing.T, c net.Conn) {
	t.Helper()
	if _, err := io.ReadAll(c); err != nil && !errors.Is(err, io.EOF) {
		var ne net.Error
		if errors.As(err, &ne) && ne.Timeout() {
			t.Fatal("connection still open")
		}
	}
}

func TestRefusesOversizedFrame(t *testing.T) {
	n := newTestNet(t)
	h, addr := n.newHub(Options{MaxFrame: 1024})
	c, _ := rawConn(t, addr)
	// Claims 1 GiB: closed at the header, nothing of it allocated.
	hdr := []byte{0x40, 0, 0, 0, 0, 0, 0, 1, byte(kindRequestVote), 0, 0, 0, 0, 0, 0, 0, 1}
	if _, err := c.Write(hdr); err != nil {
		t.Fatal(err)
	}
	expectClosed(t, c)
	waitFor(t, 10*time.Second, "the refusal counted", func() bool { return h.Stats().Refused > 0 })
}

func TestRefusesGarbage(t *testing.T) {
	n := newTestNet(t)
	_, addr := n.newHub(Options{})
	for _, junk := range [][]byte{
		[]byte("GET / HTTP/1.1\r\nHost: x\r\n\r\n"),             // a huge length
		{0, 0, 0, 3, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13}, // shorter than a header
		appendFrame(nil, 1, kindResponse, 7, nil),               // a response sent to a server
		appendFrame(nil, 1, kind(0x42), 7, []byte{1}),           // an unknown kind
	} {
		c, _ := rawConn(t, addr)
		_ = c.SetDeadline(time.Now().Add(5 * time.Second))
		if _, err := c.Write(junk); err != nil {
			t.Fatal(err)
		}
		expectClosed(t, c)
	}
}

func TestUnknownGroupAndMalformedPayload(t *testing.T) {
	n := newTestNet(t)
	h, addr := n.newHub(Options{})
	tr, err := h.Transport(5, addr)
	if err != nil {
		t.Fatal(err)
	}
	defer tr.Close()
	c, fr := rawConn(t, addr)
	cs := newCodecs()
	good, err := cs.encodeFrame(99, kindRequestVote, 11, &raft.RequestVoteRequest{Term: 3})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := c.Write(good); err != nil {
		t.Fatal(err)
	}
	f, err := fr.next()
	if err != nil || f.kind != kindError || f.id != 11 || f.group != 99 {
		t.Fatalf("unknown group answered %+v, %v; want an error frame for request 11", f, err)
	}
	// Group 5 exists; the payload is not a RequestVoteRequest.
	if _, err := c.Write(appendFrame(nil, 5, kindRequestVote, 12, []byte{0xc1, 0xff, 0x00})); err != nil {
		t.Fatal(err)
	}
	f, err = fr.next()
	if err != nil || f.kind != kindError || f.id != 12 {
		t.Fatalf("malformed payload answered %+v, %v; want an error frame for request 12", f, err)
	}
	t.Logf("answers: %q", f.payload)
	// The connection still serves a good request.
	go func() {
		rpc := <-tr.Consumer()
		rpc.Respond(&raft.RequestVoteResponse{Term: 3, Granted: true}, nil)
	}()
	good, _ = cs.encodeFrame(5, kindRequestVote, 13, &raft.RequestVoteRequest{Term: 3})
	if _, err := c.Write(good); err != nil {
		t.Fatal(err)
	}
	f, err = fr.next()
	if err != nil || f.kind != kindResponse || f.id != 13 {
		t.Fatalf("good request answered %+v, %v", f, err)
	}
	var resp raft.RequestVoteResponse
	if err := cs.decodeResult(&call{kind: f.kind, payload: f.payload}, &resp); err != nil || !resp.Granted {
		t.Fatalf("response %+v, %v", resp, err)
	}
}

// TestFieldsSurviveAndHeartbeats sends raft's requests between two hubs
// and checks every field arrives, responses too, and that heartbeats take
// the heartbeat handler.
func TestFieldsSurviveAndHeartbeats(t *testing.T) {
	n := newTestNet(t)
	ha, aa := n.newHub(Options{})
	hb, ab := n.newHub(Options{})
	ta, err := ha.Transport(1, aa)
	if err != nil {
		t.Fatal(err)
	}
	tb, err := hb.Transport(1, ab)
	if err != nil {
		t.Fatal(err)
	}
	hbCalls := make(chan raft.RPC, 1)
	tb.SetHeartbeatHandler(func(rpc raft.RPC) { hbCalls <- rpc })

	at := time.Date(2026, 1, 2, 3, 4, 5, 6000, time.UTC)
	req := &raft.AppendEntriesRequest{
		RPCHeader: raft.RPCHeader{ProtocolVersion: 3, ID: []byte("n0"), Addr: []byte(aa)},
		Term:      7, PrevLogEntry: 40, PrevLogTerm: 6, LeaderCommitIndex: 39,
		Entries: []*raft.Log{
			{Index: 41, Term: 7, Type: raft.LogCommand, Data: []byte("data"), Extensions: []byte("ext"), AppendedAt: at},
			{Index: 42, Term: 7, Type: raft.LogConfiguration, Data: []byte{1, 2}, AppendedAt: at},
		},
	}
	want := &raft.AppendEntriesResponse{
		RPCHeader: raft.RPCHeader{ProtocolVersion: 3, ID: []byte("n1"), Addr: []byte(ab)},
		Term:      7, LastLog: 42, Success: true, NoRetryBackoff: true,
	}
	go func() {
		rpc := <-tb.Consumer()
		got := rpc.Command.(*raft.AppendEntriesRequest)
		if !reflect.DeepEqual(got, req) {
			t.Errorf("request arrived as %+v, want %+v", got, req)
		}
		rpc.Respond(want, nil)
	}()
	var resp raft.AppendEntriesResponse
	if err := ta.AppendEntries("n1", ab, req, &resp); err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(&resp, want) {
		t.Errorf("response arrived as %+v, want %+v", &resp, want)
	}

	// A heartbeat goes to the handler, not the consumer.
	go func() {
		rpc := <-hbCalls
		rpc.Respond(&raft.AppendEntriesResponse{Term: 8, Success: true}, nil)
	}()
	beat := &raft.AppendEntriesRequest{RPCHeader: raft.RPCHeader{Addr: []byte(aa)}, Term: 8}
	resp = raft.AppendEntriesResponse{}
	if err := ta.AppendEntries("n1", ab, beat, &resp); err != nil || resp.Term != 8 {
		t.Fatalf("heartbeat: %+v, %v", resp, err)
	}

	// The responder's error comes back as the call's error.
	go func() {
		rpc := <-tb.Consumer()
		rpc.Respond(&raft.TimeoutNowResponse{}, errors.New("not now"))
	}()
	var tresp raft.TimeoutNowResponse
	if err := ta.TimeoutNow("n1", ab, &raft.TimeoutNowRequest{}, &tresp); err == nil || err.Error() != "not now" {
		t.Fatalf("TimeoutNow error %v, want \"not now\"", err)
	}

	// PreVote and vote round trips.
	go func() {
		for range 2 {
			rpc := <-tb.Consumer()
			switch cmd := rpc.Command.(type) {
			case *raft.RequestPreVoteRequest:
				rpc.Respond(&raft.RequestPreVoteResponse{Term: cmd.Term, Granted: true}, nil)
			case *raft.RequestVoteRequest:
				rpc.Respond(&raft.RequestVoteResponse{Term: cmd.Term, Granted: true}, nil)
			}
		}
	}()
	var pv raft.RequestPreVoteResponse
	if err := ta.RequestPreVote("n1", ab, &raft.RequestPreVoteRequest{Term: 10, LastLogIndex: 4}, &pv); err != nil || !pv.Granted {
		t.Fatalf("prevote %+v, %v", pv, err)
	}
	var v raft.RequestVoteResponse
	if err := ta.RequestVote("n1", ab, &raft.RequestVoteRequest{Term: 11}, &v); err != nil || !v.Granted || v.Term != 11 {
		t.Fatalf("vote %+v, %v", v, err)
	}
}

// TestTimeoutClosesSilentConnection: a peer that never answers makes the
// call time out and the connection close, and the next call redials.
func TestTimeoutClosesSilentConnection(t *testing.T) {
	n := newTestNet(t)
	ha, aa := n.newHub(Options{Timeout: 200 * time.Millisecond})
	_, ab := n.newHub(Options{})
	ta, err := ha.Transport(1, aa)
	if err != nil {
		t.Fatal(err)
	}
	peerHub := n.hubAt(t, ab) // its group 1's consumer is never read
	if _, err := peerHub.Transport(1, ab); err != nil {
		t.Fatal(err)
	}
	var resp raft.RequestVoteResponse
	if err := ta.RequestVote("n1", ab, &raft.RequestVoteRequest{Term: 1}, &resp); err == nil {
		t.Fatal("a call nobody answers succeeded")
	}
	// The connection was closed; a call after the redial backoff redials.
	waitFor(t, 10*time.Second, "a redial", func() bool {
		_ = ta.RequestVote("n1", ab, &raft.RequestVoteRequest{Term: 1}, &resp)
		return ha.Stats().Dials == 2
	})
}

// TestAppendTrimmedToMaxFrame: an AppendEntries larger than the maximum
// frame goes out as a prefix of its entries, which the request then holds;
// one entry larger than the maximum is refused.
func TestAppendTrimmedToMaxFrame(t *testing.T) {
	cs := newCodecs()
	req := &raft.AppendEntriesRequest{Term: 2, PrevLogEntry: 9, PrevLogTerm: 2}
	for i := range 10 {
		req.Entries = append(req.Entries, &raft.Log{Index: uint64(10 + i), Term: 2, Data: make([]byte, 1024)})
	}
	const max = 4096
	b, err := cs.encodeAppend(1, kindAppendEntries, req, max)
	if err != nil {
		t.Fatal(err)
	}
	if len(b)-frameFullHeader > max || len(req.Entries) == 0 || len(req.Entries) >= 10 {
		t.Fatalf("frame of %d bytes with %d entries, want at most %d bytes and a prefix", len(b), len(req.Entries), max)
	}
	got, err := cs.decodeRequest(kindAppendEntries, b[frameFullHeader:])
	if err != nil {
		t.Fatal(err)
	}
	if n := len(got.(*raft.AppendEntriesRequest).Entries); n != len(req.Entries) || req.Entries[0].Index != 10 {
		t.Fatalf("sent %d entries, the request holds %d from index %d", n, len(req.Entries), req.Entries[0].Index)
	}
	big := &raft.AppendEntriesRequest{Term: 2, Entries: []*raft.Log{{Index: 1, Data: make([]byte, 2*max)}}}
	if _, err := cs.encodeAppend(1, kindAppendEntries, big, max); !errors.Is(err, errFrameTooLarge) {
		t.Fatalf("one oversized entry: %v, want errFrameTooLarge", err)
	}
}
