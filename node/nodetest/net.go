package nodetest

import (
	"bytes"
	"fmt"
	"io"
	"math/rand/v2"
	"net"
	"net/http"
	"os"
	"strconv"
	"strings"
)

// Get reads url with client and returns the body of a 200 response; any
// other status is an error naming it and quoting the body.
func Get(client *http.Client, url string) (string, error) {
	resp, err := client.Get(url)
	if err != nil {
		return "", err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		return "", err
	}
	if resp.StatusCode != http.StatusOK {
		return "", fmt.Errorf("GET %s: %s: %s", url, resp.Status, bytes.TrimSpace(b))
	}
	return string(b), nil
}

// FreePorts returns the first of n consecutive free ports on 127.0.0.1,
// for tests that start `quorate serve` processes, which take fixed
// addresses. The ports are drawn at random, so that tests running at once
// rarely try the same ones, from below the kernel's ephemeral range (where
// an outgoing connection could take one between this check and its use).
func FreePorts(n int) (int, error) {
	lo := 32768
	if b, err := os.ReadFile("/proc/sys/net/ipv4/ip_local_port_range"); err == nil {
		if f := strings.Fields(string(b)); len(f) == 2 {
			if v, err := strconv.Atoi(f[0]); err == nil && v > 11000 {
				lo = v
			}
		}
	}
	for range 100 {
		base := 10000 + rand.IntN(lo-10000-n)
		var lns []net.Listener
		for i := range n {
			ln, err := net.Listen("tcp", fmt.Sprintf("127.0.0.1:%d", base+i))
			if err != nil {
				break
			}
			lns = append(lns, ln)
		}
		for _, ln := range lns {
			ln.Close()
		}
		if len(lns) == n {
			return base, nil
		}
	}
	return 0, fmt.Errorf("no %d consecutive free ports found", n)
}
