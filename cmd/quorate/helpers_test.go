package main

import (
	"fmt"
	"math/rand/v2"
	"net"
	"os"
	"strconv"
	"strings"
	"testing"

	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/proto"

	"github.com/quorate/quorate/cmd/internal/clitest"
)

// runCLI runs the command line args through run and returns what it wrote.
func runCLI(tb testing.TB, args ...string) (stdout, stderr string, err error) {
	tb.Helper()
	return clitest.Run(tb, run, args...)
}

// mustRunJSON runs args (which should include -o json) and decodes stdout
// into m, leaving out the fields the command adds to the answer (admit's
// requestId).
func mustRunJSON(tb testing.TB, m proto.Message, args ...string) {
	tb.Helper()
	out, errOut, err := runCLI(tb, args...)
	if err != nil {
		tb.Fatalf("quorate %s: %v\nstderr: %s", strings.Join(args, " "), err, errOut)
	}
	if err := (protojson.UnmarshalOptions{DiscardUnknown: true}).Unmarshal([]byte(out), m); err != nil {
		tb.Fatalf("quorate %s: output is not a %T: %v\n%s", strings.Join(args, " "), m, err, out)
	}
}

// wantErrNaming fails unless err names every one of names (the flag or
// field at fault, as the CLI promises).
func wantErrNaming(tb testing.TB, err error, names ...string) {
	tb.Helper()
	clitest.WantErrNaming(tb, err, names...)
}

// freePortRange finds n consecutive free TCP ports on 127.0.0.1, none of them
// in avoid, below the kernel's range of ephemeral ports: a port handed out
// by listening on port 0 lies in that range, where any outgoing connection
// may take it between the test's check and its use (a dev cluster stopped
// and started again on the same ports). Bases are drawn at random, so tests
// running at once rarely try the same ones; the ports are free when it
// returns.
func freePortRange(tb testing.TB, n int, avoid ...int) int {
	tb.Helper()
	lo := ephemeralLow()
	for attempt := 0; attempt < 100; attempt++ {
		base := 10000 + rand.IntN(lo-10000-n)
		var lns []net.Listener
		ok := true
		for i := 0; ok && i < n; i++ {
			ln, err := net.Listen("tcp", fmt.Sprintf("127.0.0.1:%d", base+i))
			if err != nil {
				ok = false
				break
			}
			lns = append(lns, ln)
		}
		for _, p := range avoid {
			if p >= base && p < base+n {
				ok = false
			}
		}
		for _, ln := range lns {
			ln.Close()
		}
		if ok {
			return base
		}
	}
	tb.Fatalf("no %d consecutive free ports found", n)
	return 0
}

// ephemeralLow is the lowest port of the kernel's ephemeral range (Linux:
// /proc/sys/net/ipv4/ip_local_port_range), 32768 where it cannot be read.
func ephemeralLow() int {
	b, err := os.ReadFile("/proc/sys/net/ipv4/ip_local_port_range")
	if err != nil {
		return 32768
	}
	if f := strings.Fields(string(b)); len(f) == 2 {
		if lo, err := strconv.Atoi(f[0]); err == nil && lo > 11000 {
			return lo
		}
	}
	return 32768
}
