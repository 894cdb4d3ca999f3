package jepsen

import (
	"errors"
	"io"
	"net"
	"os"
	"runtime"
	"strings"
	"testing"
	"time"
)

// pipeEnds dials node from's proxy to node to's API address and returns
// both ends: what node from holds and what node to accepted.
func pipeEnds(t *testing.T, p *proxyNet, ln net.Listener, from, to int) (fromEnd, toEnd net.Conn) {
	t.Helper()
	accepted := make(chan net.Conn, 1)
	go func() {
		c, err := ln.Accept()
		if err != nil {
			close(accepted)
			return
		}
		accepted <- c
	}()
	fromEnd, err := net.Dial("tcp", p.dialMaps[from][p.api[to]])
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { fromEnd.Close() })
	select {
	case toEnd = <-accepted:
	case <-time.After(10 * time.Second):
		t.Fatal("the proxy did not connect to the target")
	}
	if toEnd == nil {
		t.Fatal("accept failed")
	}
	t.Cleanup(func() { toEnd.Close() })
	return fromEnd, toEnd
}

func send(t *testing.T, c net.Conn, s string) {
	t.Helper()
	if _, err := c.Write([]byte(s)); err != nil {
		t.Fatal(err)
	}
}

// receive reads exactly len(want) bytes within d.
func receive(t *testing.T, c net.Conn, want string, d time.Duration) {
	t.Helper()
	c.SetReadDeadline(time.Now().Add(d))
	buf := make([]byte, len(want))
	if _, err := io.ReadFull(c, buf); err != nil || string(buf) != want {
		t.Fatalf("read %q, %v; want %q", buf, err, want)
	}
}

// held checks nothing arrives on c for a while: a cut direction holds bytes.
func held(t *testing.T, c net.Conn) {
	t.Helper()
	c.SetReadDeadline(time.Now().Add(300 * time.Millisecond))
	var buf [1]byte
	n, err := c.Read(buf[:])
	var ne net.Error
	if !errors.As(err, &ne) || !ne.Timeout() {
		t.Fatalf("read %q, %v across a cut direction; want nothing", buf[:n], err)
	}
}

func TestProxyHoldsACutDirectionUntilHealed(t *testing.T) {
	p, err := newProxyNet(2)
	if err != nil {
		t.Fatal(err)
	}
	defer p.close()
	// Stand-ins for the nodes' APIs, on the addresses the proxy targets.
	var lns [2]net.Listener
	for i := range lns {
		if lns[i], err = net.Listen("tcp", p.api[i]); err != nil {
			t.Skipf("port of node %d taken meanwhile: %v", i, err)
		}
		defer lns[i].Close()
	}

	a0, a1 := pipeEnds(t, p, lns[1], 0, 1) // a connection node 0 dialed
	b1, b0 := pipeEnds(t, p, lns[0], 1, 0) // and one node 1 dialed
	send(t, a0, "a")
	receive(t, a1, "a", 5*time.Second)

	if err := p.partition(OneWayGrudge(0, 1)); err != nil {
		t.Fatal(err)
	}
	send(t, a0, "held-a") // 0→1 on 0's connection
	send(t, b0, "held-b") // 0→1 on 1's connection
	held(t, a1)
	held(t, b1)
	send(t, a1, "back-a") // 1→0 still flows, both connections
	receive(t, a0, "back-a", 5*time.Second)
	send(t, b1, "back-b")
	receive(t, b0, "back-b", 5*time.Second)
	c0, c1 := pipeEnds(t, p, lns[1], 0, 1) // accepted during the cut, and held the same way
	send(t, c0, "held-c")
	held(t, c1)

	if err := p.partition(nil); err != nil {
		t.Fatal(err)
	}
	receive(t, a1, "held-a", 5*time.Second) // delivered late, not lost
	receive(t, b1, "held-b", 5*time.Second)
	receive(t, c1, "held-c", 5*time.Second)

	// An end of stream is held too, and then delivered.
	if err := p.partition(OneWayGrudge(0, 1)); err != nil {
		t.Fatal(err)
	}
	a0.(*net.TCPConn).CloseWrite()
	held(t, a1)
	p.partition(nil)
	a1.SetReadDeadline(time.Now().Add(5 * time.Second))
	if n, err := a1.Read(make([]byte, 1)); n != 0 || err != io.EOF {
		t.Fatalf("after heal, read %d bytes, %v; want EOF", n, err)
	}
}

// Closing the network ends every proxy goroutine, even those holding bytes
// of a cut direction.
func TestProxyCloseLeavesNoGoroutines(t *testing.T) {
	p, err := newProxyNet(3)
	if err != nil {
		t.Fatal(err)
	}
	ln, err := net.Listen("tcp", p.api[1])
	if err != nil {
		p.close()
		t.Skipf("port of node 1 taken meanwhile: %v", err)
	}
	defer ln.Close()
	a0, _ := pipeEnds(t, p, ln, 0, 1)
	if err := p.partition(IsolateGrudge(3, 1)); err != nil {
		t.Fatal(err)
	}
	send(t, a0, "held")
	if cmd := p.command(0, "quorate", []string{"serve"}); !strings.Contains(strings.Join(cmd.Args, " "), p.api[1]+"=") {
		t.Errorf("node 0's command does not map node 1's API: %v", cmd.Args)
	}
	if err := p.close(); err != nil {
		t.Fatal(err)
	}
	if err := p.partition(nil); err == nil {
		t.Error("partition after close succeeded")
	}
	deadline := time.Now().Add(5 * time.Second)
	for {
		buf := make([]byte, 1<<20)
		stacks := string(buf[:runtime.Stack(buf, true)])
		if !strings.Contains(stacks, "jepsen.(*proxyNet)") {
			return
		}
		if time.Now().After(deadline) {
			os.Stderr.WriteString(stacks)
			t.Fatal("proxy goroutines still running after close")
		}
		runtime.Gosched()
	}
}
