//go:build linux

package jepsen

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/google/nftables"
	"github.com/google/nftables/expr"
	"golang.org/x/sys/unix"
)

// nftNet runs the nodes in a private network namespace: node i listens on
// 127.0.0.(11+i) (nftNodeIP) for both its API and Raft and dials its peers
// from that address (quorate serve binds outgoing connections to the
// listener's IP), so a drop rule per ordered pair — ip saddr A ip daddr B —
// cuts exactly A→B. The harness reaches the APIs from inside the namespace
// with source 127.0.0.1, which no rule matches. Nothing outside the
// namespace is touched, and it disappears with close.
type nftNet struct {
	name  string   // ip netns name
	ns    *os.File // /run/netns/<name>
	conn  *nftables.Conn
	table *nftables.Table
	chain *nftables.Chain

	mu     sync.Mutex // serializes rule changes and close
	closed bool
}

var netnsSeq atomic.Int64

// Fixed ports are fine: the namespace is private.
const (
	nftAPIPort  = 7000
	nftRaftPort = 7100
	nftMaxNodes = 200
)

// nftNodeIP is node i's address in the namespace.
func nftNodeIP(i int) net.IP { return net.IPv4(127, 0, 0, byte(11+i)).To4() }

// harnessIP is the source of the harness's own connections.
var harnessIP = net.IPv4(127, 0, 0, 1)

// newNftNet creates the namespace and an empty rule chain in it.
func newNftNet(nodes int) (_ *nftNet, err error) {
	if os.Geteuid() != 0 {
		return nil, errors.New("jepsen: nftables mode needs root")
	}
	if nodes > nftMaxNodes {
		return nil, fmt.Errorf("jepsen: nftables mode supports up to %d nodes", nftMaxNodes)
	}
	removeStaleNetns()
	n := &nftNet{name: fmt.Sprintf("%s%d-%d", netnsPrefix, os.Getpid(), netnsSeq.Add(1))}
	if err := runIP("netns", "add", n.name); err != nil {
		return nil, err
	}
	defer func() {
		if err != nil {
			n.close()
		}
	}()
	if err := runIP("-n", n.name, "link", "set", "lo", "up"); err != nil {
		return nil, err
	}
	if n.ns, err = os.Open("/run/netns/" + n.name); err != nil {
		return nil, fmt.Errorf("jepsen: opening the network namespace: %w", err)
	}
	if n.conn, err = nftables.New(nftables.WithNetNSFd(int(n.ns.Fd()))); err != nil {
		return nil, fmt.Errorf("jepsen: nftables: %w", err)
	}
	accept := nftables.ChainPolicyAccept
	n.table = n.conn.AddTable(&nftables.Table{Family: nftables.TableFamilyIPv4, Name: "quorate_jepsen"})
	n.chain = n.conn.AddChain(&nftables.Chain{Name: "grudge", Table: n.table, Type: nftables.ChainTypeFilter,
		Hooknum: nftables.ChainHookInput, Priority: nftables.ChainPriorityFilter, Policy: &accept})
	if err := n.conn.Flush(); err != nil {
		return nil, fmt.Errorf("jepsen: nftables: creating the table: %w", err)
	}
	return n, nil
}

const netnsPrefix = "quorate-jepsen-"

// removeStaleNetns deletes the namespaces of harness processes that died
// without cleaning up (their names carry the creator's PID).
func removeStaleNetns() {
	entries, _ := os.ReadDir("/run/netns")
	for _, e := range entries {
		rest, ok := strings.CutPrefix(e.Name(), netnsPrefix)
		pid, _, ok2 := strings.Cut(rest, "-")
		p, err := strconv.Atoi(pid)
		if !ok || !ok2 || err != nil || p == os.Getpid() {
			continue
		}
		if err := unix.Kill(p, 0); errors.Is(err, unix.ESRCH) {
			_ = runIP("netns", "del", e.Name())
		}
	}
}

func runIP(args ...string) error {
	if b, err := exec.Command("ip", args...).CombinedOutput(); err != nil {
		return fmt.Errorf("jepsen: ip %s: %v: %s", strings.Join(args, " "), err, strings.TrimSpace(string(b)))
	}
	return nil
}

// probeNftables reports whether nftables mode works here, by setting up and
// tearing down a namespace with its rules.
func probeNftables() error {
	n, err := newNftNet(2)
	if err != nil {
		return err
	}
	if err := n.partition(Grudge{0: {1}}); err != nil {
		n.close()
		return err
	}
	return n.close()
}

func (n *nftNet) addrs(i int) (api, raft string) {
	ip := nftNodeIP(i).String()
	return net.JoinHostPort(ip, fmt.Sprint(nftAPIPort)), net.JoinHostPort(ip, fmt.Sprint(nftRaftPort))
}

// command runs the node inside the namespace. ip execs the binary without
// forking, so the process is the node's: signals reach it directly.
func (n *nftNet) command(_ int, binary string, args []string) *exec.Cmd {
	return exec.Command("ip", append([]string{"netns", "exec", n.name, binary}, args...)...)
}

// partition swaps the chain's rules for g's in one nftables transaction.
func (n *nftNet) partition(g Grudge) error {
	n.mu.Lock()
	defer n.mu.Unlock()
	if n.closed {
		return errors.New("jepsen: network closed")
	}
	n.conn.FlushChain(n.chain)
	for from, tos := range g {
		for _, to := range tos {
			n.conn.AddRule(&nftables.Rule{Table: n.table, Chain: n.chain, Exprs: []expr.Any{
				// ip saddr (IPv4 header offset 12) and ip daddr (offset 16)
				&expr.Payload{DestRegister: 1, Base: expr.PayloadBaseNetworkHeader, Offset: 12, Len: 4},
				&expr.Cmp{Op: expr.CmpOpEq, Register: 1, Data: nftNodeIP(from)},
				&expr.Payload{DestRegister: 1, Base: expr.PayloadBaseNetworkHeader, Offset: 16, Len: 4},
				&expr.Cmp{Op: expr.CmpOpEq, Register: 1, Data: nftNodeIP(to)},
				&expr.Counter{},
				&expr.Verdict{Kind: expr.VerdictDrop},
			}})
		}
	}
	if err := n.conn.Flush(); err != nil {
		return fmt.Errorf("jepsen: nftables: %w", err)
	}
	return nil
}

// dialContext dials addr from inside the namespace: the socket is created on
// a thread switched into it, and lives there after the thread switches back.
func (n *nftNet) dialContext(ctx context.Context, network, addr string) (net.Conn, error) {
	type result struct {
		c   net.Conn
		err error
	}
	done := make(chan result, 1)
	go func() {
		runtime.LockOSThread()
		// Unlocked only once the thread is back in its own namespace;
		// otherwise the runtime ends the thread with this goroutine.
		orig, err := os.Open(fmt.Sprintf("/proc/self/task/%d/ns/net", unix.Gettid()))
		if err != nil {
			runtime.UnlockOSThread()
			done <- result{nil, fmt.Errorf("jepsen: dial %s: %w", addr, err)}
			return
		}
		defer orig.Close()
		if err := unix.Setns(int(n.ns.Fd()), unix.CLONE_NEWNET); err != nil {
			runtime.UnlockOSThread()
			done <- result{nil, fmt.Errorf("jepsen: dial %s: setns: %w", addr, err)}
			return
		}
		d := net.Dialer{Timeout: time.Second, LocalAddr: &net.TCPAddr{IP: harnessIP}}
		c, err := d.DialContext(ctx, network, addr)
		if unix.Setns(int(orig.Fd()), unix.CLONE_NEWNET) == nil {
			runtime.UnlockOSThread()
		}
		done <- result{c, err}
	}()
	r := <-done
	return r.c, r.err
}

// close deletes the namespace (its rules go with it once the nodes have
// exited). Safe to call more than once.
func (n *nftNet) close() error {
	n.mu.Lock()
	defer n.mu.Unlock()
	if n.closed {
		return nil
	}
	n.closed = true
	if n.ns != nil {
		n.ns.Close()
	}
	return runIP("netns", "del", n.name)
}
