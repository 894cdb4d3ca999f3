package replica

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"os"
	"strings"
	"sync/atomic"
	"syscall"
	"testing"

	"github.com/hashicorp/go-hclog"
	"github.com/hashicorp/raft"
)

// raftLogger writes hclog calls as slog records: levels mapped, the name in
// front of the message, implied arguments kept, hclog's formatting types
// printed, and the handler's level obeyed.
func TestRaftLoggerWritesSlog(t *testing.T) {
	var buf bytes.Buffer
	base := slog.New(slog.NewTextHandler(&buf, &slog.HandlerOptions{Level: slog.LevelInfo})).With("node", "n1")
	var stopping atomic.Bool
	l := NewRaftLogger(base, "raft", &stopping).With("group", uint32(3))

	l.Info("entering follower state", "leader-id", raft.ServerID("n2"))
	l.Warn("formatted", "v", hclog.Fmt("%d-%s", 7, "x"), "h", hclog.Hex(255))
	l.Error("failed to append to logs", "error", errors.New("disk full"))
	l.Debug("below the level")
	l.Named("snap").Info("named")

	out := buf.String()
	for _, want := range []string{
		`level=INFO msg="raft: entering follower state" node=n1 group=3 leader-id=n2`,
		`level=WARN msg="raft: formatted" node=n1 group=3 v=7-x h=0xff`,
		`level=ERROR msg="raft: failed to append to logs" node=n1 group=3 error="disk full"`,
		`level=INFO msg="raft.snap: named" node=n1 group=3`,
	} {
		if !strings.Contains(out, want) {
			t.Errorf("log lacks %q:\n%s", want, out)
		}
	}
	if strings.Contains(out, "below the level") {
		t.Errorf("a debug line was written at info level:\n%s", out)
	}
	if l.IsDebug() || !l.IsInfo() || l.GetLevel() != hclog.Info {
		t.Errorf("IsDebug %v, IsInfo %v, GetLevel %v: want the handler's info", l.IsDebug(), l.IsInfo(), l.GetLevel())
	}
	l.SetLevel(hclog.Error)
	if l.IsWarn() || !l.IsError() {
		t.Error("SetLevel(Error) did not raise the floor")
	}
	if got := l.ImpliedArgs(); len(got) != 2 || got[0] != "group" {
		t.Errorf("implied args %v, want [group 3]", got)
	}
}

// raftNoise lowers what is expected and nothing about the node's storage.
func TestRaftNoise(t *testing.T) {
	noGroup := errors.New("raftmux: no group 4 on this node")
	reset := &net.OpError{Op: "read", Net: "tcp", Err: os.NewSyscallError("read", syscall.ECONNRESET)}
	for _, tc := range []struct {
		stopping bool
		level    hclog.Level
		msg      string
		args     []any
		want     hclog.Level
	}{
		{false, hclog.Warn, "no known peers, aborting election", nil, hclog.Debug},
		{false, hclog.Warn, "appendEntries rejected, sending older logs", []any{"peer", "x", "next", 1}, hclog.Debug},
		{false, hclog.Warn, "failed to get previous log", []any{"previous-index", 4, "last-index", 0, "error", raft.ErrLogNotFound}, hclog.Debug},
		{false, hclog.Warn, "failed to get previous log", []any{"error", errors.New("checksum mismatch")}, hclog.Warn},
		{false, hclog.Warn, "heartbeat timeout reached, starting election", []any{"last-leader-addr", raft.ServerAddress(""), "last-leader-id", raft.ServerID("")}, hclog.Info},
		{false, hclog.Warn, "heartbeat timeout reached, starting election", []any{"last-leader-addr", raft.ServerAddress("a:1"), "last-leader-id", raft.ServerID("n2")}, hclog.Warn},
		{true, hclog.Warn, "heartbeat timeout reached, starting election", []any{"last-leader-id", raft.ServerID("n2")}, hclog.Debug},
		{false, hclog.Error, "failed to make requestVote RPC", []any{"target", "x", "error", noGroup, "term", 2}, hclog.Debug},
		{false, hclog.Error, "failed to make requestVote RPC", []any{"target", "x", "error", errors.New("vote refused: bad term"), "term", 2}, hclog.Warn},
		{false, hclog.Warn, "rejecting vote request since our last term is greater", []any{"candidate", "x"}, hclog.Info},
		{false, hclog.Warn, "rejecting pre-vote request since our last term is greater", []any{"candidate", "x"}, hclog.Info},
		{false, hclog.Error, "failed to heartbeat to", []any{"peer", "x", "backoff time", 10, "error", reset}, hclog.Debug},
		{false, hclog.Error, "failed to heartbeat to", []any{"peer", "x", "backoff time", 10, "error", syscall.ECONNREFUSED}, hclog.Warn},
		{true, hclog.Error, "failed to heartbeat to", []any{"peer", "x", "backoff time", 10, "error", reset}, hclog.Debug},
		{false, hclog.Error, "failed to decode incoming command", []any{"error", fmt.Errorf("read: %w", net.ErrClosed)}, hclog.Debug},
		{false, hclog.Error, "peer has newer term, stopping replication", []any{"peer", "x"}, hclog.Info},
		{false, hclog.Warn, "failed to contact quorum of nodes, stepping down", nil, hclog.Warn},
		{true, hclog.Warn, "failed to contact quorum of nodes, stepping down", nil, hclog.Debug},
		{false, hclog.Warn, "Election timeout reached, restarting election", nil, hclog.Info},
		// Storage errors stay, stopping or not.
		{true, hclog.Error, "failed to append to logs", []any{"error", errors.New("fsync: input/output error")}, hclog.Error},
		{true, hclog.Error, "failed to take snapshot", []any{"error", errors.New("no space left on device")}, hclog.Error},
		{false, hclog.Error, "failed to get log", []any{"index", 7, "error", errors.New("damaged entry")}, hclog.Error},
	} {
		if got := raftNoise(tc.stopping, tc.level, tc.msg, tc.args); got != tc.want {
			t.Errorf("stopping %v, %v %q %v: %v, want %v", tc.stopping, tc.level, tc.msg, tc.args, got, tc.want)
		}
	}
}

// A call to a peer that is restarting fails as raft's transport sees it —
// a read whose connection the peer reset, or a dial it refused — and is logged at debug, a vote request either
// way, a heartbeat on the reset connection; a heartbeat whose dial the
// peer refused (it is down) stays a warning.
func TestRaftNoiseVoteRequestToRestartingPeer(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	dialled := make(chan struct{})
	go func() {
		c, err := ln.Accept()
		if err != nil {
			return
		}
		<-dialled
		_ = c.(*net.TCPConn).SetLinger(0) // close with a reset, as a process that stops does
		_ = c.Close()
	}()
	conn, err := net.Dial("tcp", ln.Addr().String())
	close(dialled)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	_, reset := io.ReadFull(conn, make([]byte, 1))
	if reset == nil || !strings.Contains(reset.Error(), "connection reset by peer") {
		t.Fatalf("decoding from a reset connection: %v, want a connection reset", reset)
	}
	addr := ln.Addr().String()
	ln.Close()
	_, refused := net.Dial("tcp", addr)
	if refused == nil {
		t.Fatal("dialling a closed listener succeeded")
	}
	for _, tc := range []struct {
		err       error
		heartbeat hclog.Level
	}{{reset, hclog.Debug}, {refused, hclog.Warn}} {
		if got := raftNoise(false, hclog.Error, "failed to make requestVote RPC", []any{"target", "x", "error", tc.err, "term", 9}); got != hclog.Debug {
			t.Errorf("vote request failing with %v: %v, want debug", tc.err, got)
		}
		if got := raftNoise(false, hclog.Error, "failed to heartbeat to", []any{"peer", "x", "error", tc.err}); got != tc.heartbeat {
			t.Errorf("heartbeat failing with %v: %v, want %v", tc.err, got, tc.heartbeat)
		}
	}
}
