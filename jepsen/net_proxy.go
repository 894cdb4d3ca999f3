package jepsen

import (
	"context"
	"errors"
	"io"
	"net"
	"os/exec"
	"slices"
	"strings"
	"sync"
	"time"
)

// proxyNet routes node-to-node traffic through userspace TCP proxies: for
// every ordered pair (i, j) and each of j's ports (API, Raft) a listener on
// 127.0.0.1 forwards to j, and node i is told to dial it instead of j
// (quorate serve --debug-dial-map). Each proxied connection carries bytes
// from i to j one way and from j to i the other; a cut direction i→j holds
// back the bytes from i to j on every connection between the two, whoever
// dialed it, without dropping them: after healing they are delivered, as
// TCP would after a partition, unless an end gave up on the connection
// meanwhile. New connections are accepted during a cut and held the same
// way. The harness's own clients dial the nodes directly.
type proxyNet struct {
	api, raft []string            // node i's real addresses
	dialMaps  []map[string]string // node i's: peer address → proxy address
	links     map[[2]int]*link    // by (from, to)
	lns       []net.Listener
	ctx       context.Context // ends with close
	cancel    context.CancelFunc
	wg        sync.WaitGroup // accept loops, connections and pumps

	mu     sync.Mutex
	conns  map[net.Conn]struct{}
	closed bool
}

// link is one direction between two nodes: open or cut.
type link struct {
	mu   sync.Mutex
	gate chan struct{} // closed while the link delivers
}

func newLink() *link {
	g := make(chan struct{})
	close(g)
	return &link{gate: g}
}

func (l *link) set(cut bool) {
	l.mu.Lock()
	defer l.mu.Unlock()
	select {
	case <-l.gate: // open
		if cut {
			l.gate = make(chan struct{})
		}
	default:
		if !cut {
			close(l.gate)
		}
	}
}

// wait blocks while the link is cut; false when ctx ended first.
func (l *link) wait(ctx context.Context) bool {
	l.mu.Lock()
	g := l.gate
	l.mu.Unlock()
	select {
	case <-g:
		return ctx.Err() == nil
	case <-ctx.Done():
		return false
	}
}

// newProxyNet picks the nodes' addresses and starts the proxies.
func newProxyNet(nodes int) (_ *proxyNet, err error) {
	p := &proxyNet{links: map[[2]int]*link{}, conns: map[net.Conn]struct{}{}}
	p.ctx, p.cancel = context.WithCancel(context.Background())
	defer func() {
		if err != nil {
			p.close()
		}
	}()
	// The nodes' ports stay reserved until the proxies have their own
	// ports, so that no proxy gets a port a node is to listen on.
	var reserved []net.Listener
	defer func() {
		for _, ln := range reserved {
			ln.Close()
		}
	}()
	for range nodes {
		for _, addrs := range []*[]string{&p.api, &p.raft} {
			ln, err := reservePort()
			if err != nil {
				return nil, err
			}
			reserved = append(reserved, ln)
			*addrs = append(*addrs, ln.Addr().String())
		}
	}
	for from := range nodes {
		for to := range nodes {
			if from != to {
				p.links[[2]int{from, to}] = newLink()
			}
		}
	}
	for from := range nodes {
		p.dialMaps = append(p.dialMaps, map[string]string{})
		for to := range nodes {
			if from == to {
				continue
			}
			there, back := p.links[[2]int{from, to}], p.links[[2]int{to, from}]
			for _, target := range []string{p.api[to], p.raft[to]} {
				ln, err := net.Listen("tcp", "127.0.0.1:0")
				if err != nil {
					return nil, err
				}
				p.lns = append(p.lns, ln)
				p.dialMaps[from][target] = ln.Addr().String()
				p.wg.Add(1)
				go p.serve(ln, target, there, back)
			}
		}
	}
	return p, nil
}

func (p *proxyNet) addrs(i int) (api, raft string) { return p.api[i], p.raft[i] }

// command starts node i with its dial map.
func (p *proxyNet) command(i int, binary string, args []string) *exec.Cmd {
	var pairs []string
	for target, via := range p.dialMaps[i] {
		pairs = append(pairs, target+"="+via)
	}
	slices.Sort(pairs)
	return exec.Command(binary, append(slices.Clone(args), "--debug-dial-map", strings.Join(pairs, ","))...)
}

func (p *proxyNet) partition(g Grudge) error {
	p.mu.Lock()
	closed := p.closed
	p.mu.Unlock()
	if closed {
		return errors.New("jepsen: network closed")
	}
	for pair, l := range p.links {
		l.set(slices.Contains(g[pair[0]], pair[1]))
	}
	return nil
}

func (p *proxyNet) dialContext(ctx context.Context, network, addr string) (net.Conn, error) {
	return (&net.Dialer{Timeout: time.Second}).DialContext(ctx, network, addr)
}

// serve accepts one node's connections to another's target address; there
// carries their bytes to it, back the answers.
func (p *proxyNet) serve(ln net.Listener, target string, there, back *link) {
	defer p.wg.Done()
	for {
		c, err := ln.Accept()
		if err != nil {
			return // closed
		}
		p.wg.Add(1)
		go p.forward(c.(*net.TCPConn), target, there, back)
	}
}

// forward connects c to target and pumps both ways until both directions
// have ended.
func (p *proxyNet) forward(c *net.TCPConn, target string, there, back *link) {
	defer p.wg.Done()
	if !p.track(c) {
		return
	}
	defer p.untrack(c)
	ctx, cancel := context.WithTimeout(p.ctx, 5*time.Second)
	s, err := (&net.Dialer{}).DialContext(ctx, "tcp", target)
	cancel()
	if err != nil {
		return // as a refused connection
	}
	if !p.track(s) {
		return
	}
	defer p.untrack(s)
	done := make(chan struct{})
	p.wg.Add(1)
	go func() {
		defer p.wg.Done()
		p.pump(s.(*net.TCPConn), c, there)
		close(done)
	}()
	p.pump(c, s.(*net.TCPConn), back)
	<-done
}

// pump copies src to dst, holding each chunk — and the end of the stream —
// while l is cut. It returns when src has ended or failed, or on close.
func (p *proxyNet) pump(dst, src *net.TCPConn, l *link) {
	buf := make([]byte, 32<<10)
	for {
		n, err := src.Read(buf)
		if n > 0 {
			if !l.wait(p.ctx) {
				return
			}
			if _, werr := dst.Write(buf[:n]); werr != nil {
				src.Close() // the receiver is gone: so is the connection
				return
			}
		}
		if err != nil {
			if !l.wait(p.ctx) {
				return
			}
			if errors.Is(err, io.EOF) {
				dst.CloseWrite()
			} else {
				dst.Close()
			}
			return
		}
	}
}

// track registers c to be closed by close; false (and c closed) when the
// network is already closed.
func (p *proxyNet) track(c net.Conn) bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.closed {
		c.Close()
		return false
	}
	p.conns[c] = struct{}{}
	return true
}

func (p *proxyNet) untrack(c net.Conn) {
	p.mu.Lock()
	delete(p.conns, c)
	p.mu.Unlock()
	c.Close()
}

// close stops the proxies, closes every proxied connection and waits for
// all their goroutines. Safe to call more than once.
func (p *proxyNet) close() error {
	p.mu.Lock()
	if p.closed {
		p.mu.Unlock()
		return nil
	}
	p.closed = true
	conns := make([]net.Conn, 0, len(p.conns))
	for c := range p.conns {
		conns = append(conns, c)
	}
	p.mu.Unlock()
	p.cancel()
	for _, ln := range p.lns {
		ln.Close()
	}
	for _, c := range conns {
		c.Close()
	}
	p.wg.Wait()
	return nil
}
