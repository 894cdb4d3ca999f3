package main

import (
	"context"
	"encoding/json"
	"fmt"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/quorate/quorate/cmd/internal/clitest"
)

// startTestRedis starts a redis-server from PATH for the test (stopped at
// its end), or skips the test when there is none.
func startTestRedis(tb testing.TB, durable bool) *redisServer {
	tb.Helper()
	bin, err := exec.LookPath("redis-server")
	if err != nil {
		tb.Skip("redis-server is not on PATH (apt-get install redis-server, or make bench-compare, installs it); skipping the Redis target test")
	}
	// The server lives until stop: its context is never cancelled.
	s, err := startRedisServer(context.Background(), bin, tb.TempDir(), durable)
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() {
		if err := s.stop(); err != nil {
			tb.Error(err)
		}
	})
	return s
}

// redisBench runs `quorate bench --target redis` against addr with args
// and returns its summary.
func redisBench(tb testing.TB, addr string, args ...string) BenchSummary {
	tb.Helper()
	args = append([]string{"--target", "redis", "--redis-addr", addr, "-o", "json"}, args...)
	out, stderr, err := clitest.Run(tb, run, args...)
	if err != nil {
		tb.Fatalf("quorate %s: %v\n%s", strings.Join(args, " "), err, stderr)
	}
	var s BenchSummary
	if err := json.Unmarshal([]byte(out), &s); err != nil {
		tb.Fatalf("quorate %s: %v\n%s", strings.Join(args, " "), err, out)
	}
	if s.Target != "redis" || s.Calls == 0 || len(s.Errors) != 0 || len(s.ItemErrors) != 0 ||
		s.Decisions != int64(s.Batch)*s.Calls || s.Allowed+s.Denied != s.Decisions || s.LatencyMs["p50"] <= 0 {
		tb.Fatalf("quorate %s: implausible summary %+v", strings.Join(args, " "), s)
	}
	return s
}

func flushRedis(tb testing.TB, addr string) {
	tb.Helper()
	rdb := redis.NewClient(&redis.Options{Addr: addr, Protocol: 2, DisableIdentity: true})
	defer rdb.Close()
	if err := rdb.FlushAll(context.Background()).Err(); err != nil {
		tb.Fatal(err)
	}
}

// TestBenchRedisTokenBucket checks the script's decisions: a bucket of 5
// that never refills admits exactly 5, unpipelined or pipelined, however
// many clients ask.
func TestBenchRedisTokenBucket(t *testing.T) {
	srv := startTestRedis(t, false)
	small := []string{"--keys", "1", "--redis-capacity", "5", "--redis-refill", "0", "--duration", "1s"}

	s := redisBench(t, srv.addr, append(small, "--workers", "4")...)
	if s.Allowed != 5 || s.Denied != s.Calls-5 || s.Batch != 1 {
		t.Fatalf("unpipelined, capacity 5, refill 0, one key: %d allowed, %d denied of %d calls; want exactly 5 allowed", s.Allowed, s.Denied, s.Calls)
	}

	flushRedis(t, srv.addr)
	s = redisBench(t, srv.addr, append(small, "--workers", "3", "--batch", "7")...)
	if s.Allowed != 5 || s.Decisions != 7*s.Calls || s.Batch != 7 {
		t.Fatalf("pipelined 7 deep, capacity 5, refill 0, one key: %d allowed of %d decisions in %d calls; want exactly 5 allowed",
			s.Allowed, s.Decisions, s.Calls)
	}

	// A large bucket allows everything, over many keys and both
	// distributions; open loop works as for Quorate.
	flushRedis(t, srv.addr)
	s = redisBench(t, srv.addr, "--workers", "4", "--duration", "1s", "--keys", "100", "--dist", "zipf")
	if s.Denied != 0 {
		t.Fatalf("default bucket (capacity %d) denied %d", defaultBenchCapacity, s.Denied)
	}
	s = redisBench(t, srv.addr, "--rate", "50", "--duration", "1s", "--batch", "3")
	if s.Mode != "open" || s.Denied != 0 || s.Calls > 51 {
		t.Fatalf("open loop at 50/s for 1s: %+v", s)
	}
}

// TestBenchRedisReloadsScript checks that a flushed script cache (NOSCRIPT)
// is met by loading the script again, unpipelined and pipelined, without a
// request failing or running twice.
func TestBenchRedisReloadsScript(t *testing.T) {
	srv := startTestRedis(t, false)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	rdb := redis.NewClient(&redis.Options{Addr: srv.addr, Protocol: 2, DisableIdentity: true})
	defer rdb.Close()
	for _, batch := range []int{1, 4} {
		t.Run(fmt.Sprintf("batch=%d", batch), func(t *testing.T) {
			if err := rdb.FlushAll(ctx).Err(); err != nil {
				t.Fatal(err)
			}
			target, err := newRedisTarget(ctx, redisOptions{addr: srv.addr, capacity: 3, refill: 0}, loadOptions{workers: 1, keys: 2, batch: batch})
			if err != nil {
				t.Fatal(err)
			}
			defer target.close()
			keys := make([]int, batch) // every request on key 0
			allowed, denied := 0, 0
			for range 2 {
				if err := rdb.ScriptFlush(ctx).Err(); err != nil {
					t.Fatal(err)
				}
				r, err := target.call(ctx, 0, keys)
				if err != nil || len(r.itemErrors) != 0 {
					t.Fatalf("call after SCRIPT FLUSH: %+v, %v", r, err)
				}
				allowed, denied = allowed+r.allowed, denied+r.denied
			}
			if want := min(3, 2*batch); allowed != want || allowed+denied != 2*batch {
				t.Fatalf("two calls of %d on a bucket of 3: %d allowed, %d denied; want %d allowed", batch, allowed, denied, want)
			}
		})
	}
}

// TestBenchRedisDurable runs the target against a Redis with
// appendfsync always, as bench compare does.
func TestBenchRedisDurable(t *testing.T) {
	srv := startTestRedis(t, true)
	s := redisBench(t, srv.addr, "--workers", "2", "--duration", "1s", "--keys", "10")
	if s.Denied != 0 {
		t.Fatalf("durable Redis denied %d", s.Denied)
	}
}

// TestBenchRedisUnreachable names the flag when no Redis answers.
func TestBenchRedisUnreachable(t *testing.T) {
	port, err := freeLoopbackPort()
	if err != nil {
		t.Fatal(err)
	}
	_, _, err = clitest.Run(t, run, "--target", "redis", "--redis-addr", fmt.Sprintf("127.0.0.1:%d", port), "--duration", "1s")
	clitest.WantErrNaming(t, err, "--redis-addr", "SCRIPT LOAD")
}

func TestRedisTTL(t *testing.T) {
	for _, tc := range []struct {
		o    redisOptions
		want time.Duration
	}{
		{redisOptions{capacity: 100, refill: 10}, 10 * time.Second},
		{redisOptions{capacity: 1, refill: 1000}, time.Second},
		{redisOptions{capacity: 5, refill: 0}, maxRedisTTL},
		{redisOptions{capacity: defaultBenchCapacity, refill: defaultBenchRefill}, defaultBenchCapacity * benchRefillPeriod},
		{redisOptions{capacity: 1 << 53, refill: 0.001}, maxRedisTTL},
	} {
		if got := tc.o.ttl(); got != tc.want {
			t.Errorf("%+v: ttl %v, want %v", tc.o, got, tc.want)
		}
	}
}
