package main

import (
	"context"
	"errors"
	"fmt"
	"math"
	"net"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/spf13/cobra"
)

// redisTokenBucketScript is the token bucket users run in Redis: the seed's
// "Redis Token Bucket Script", line for line, with one guard added so that a
// bucket that never refills (refill 0, used by tests) answers retry_after -1
// instead of dividing by zero. KEYS[1] is the bucket; ARGV are capacity,
// refill_per_second, cost and ttl_ms; time is Redis's TIME. It answers
// {allowed (1|0), whole tokens left, retry_after_ms, now_ms}.
const redisTokenBucketScript = `
local key = KEYS[1]
local capacity = tonumber(ARGV[1])
local refill_per_second = tonumber(ARGV[2])
local cost = tonumber(ARGV[3])
local ttl_ms = tonumber(ARGV[4])

local redis_time = redis.call("TIME")
local now_ms = redis_time[1] * 1000 + math.floor(redis_time[2] / 1000)

local bucket = redis.call("HMGET", key, "tokens", "updated_at_ms")
local tokens = tonumber(bucket[1])
local updated_at_ms = tonumber(bucket[2])
if tokens == nil then
  tokens = capacity
  updated_at_ms = now_ms
end
if now_ms < updated_at_ms then
  updated_at_ms = now_ms
end

local elapsed_ms = now_ms - updated_at_ms
local refill_per_ms = refill_per_second / 1000
tokens = math.min(capacity, tokens + elapsed_ms * refill_per_ms)

local allowed = 0
local retry_after_ms = 0
if tokens >= cost then
  tokens = tokens - cost
  allowed = 1
elseif refill_per_ms > 0 then
  retry_after_ms = math.ceil((cost - tokens) / refill_per_ms)
else
  retry_after_ms = -1
end

redis.call("HSET", key, "tokens", tostring(tokens), "updated_at_ms", tostring(now_ms))
redis.call("PEXPIRE", key, ttl_ms)
return {allowed, math.floor(tokens), retry_after_ms, now_ms}
`

// Defaults of the Redis bucket: those of the policy `quorate-bench compare`
// applies to Quorate (burst defaultBenchCapacity, one token per
// benchRefillPeriod) — a capacity no run exhausts and a slow refill, so that
// every request is allowed and a bucket once touched stays live for the
// whole run on both sides (a bucket that refilled completely is state
// Quorate deletes). Quorate's policy validation bounds capacity × refill
// period to 3660 days.
const (
	defaultBenchCapacity = 3_000_000
	benchRefillPeriod    = 100 * time.Second
	defaultBenchRefill   = float64(time.Second) / float64(benchRefillPeriod) // tokens per second
	// maxRedisTTL caps the buckets' PEXPIRE (ten years).
	maxRedisTTL = 10 * 365 * 24 * time.Hour
)

// redisOptions are the --redis-* flags of `quorate-bench --target redis`.
type redisOptions struct {
	addr     string
	capacity int64
	refill   float64 // tokens per second
}

// addRedisFlags registers the --redis-* flags on cmd.
func addRedisFlags(cmd *cobra.Command, o *redisOptions) {
	fs := cmd.Flags()
	fs.StringVar(&o.addr, "redis-addr", "127.0.0.1:6379", "with --target redis: host:port of the Redis")
	fs.Int64Var(&o.capacity, "redis-capacity", defaultBenchCapacity, "with --target redis: the buckets' capacity (tokens)")
	fs.Float64Var(&o.refill, "redis-refill", defaultBenchRefill, "with --target redis: tokens added to a bucket per second (0: never)")
}

// validate checks the --redis-* flags; errors name the flag.
func (o redisOptions) validate() error {
	if _, _, err := net.SplitHostPort(o.addr); err != nil {
		return fmt.Errorf("--redis-addr: must be host:port (got %q): %w", o.addr, err)
	}
	if o.capacity < 1 || o.capacity > 1<<53 {
		return fmt.Errorf("--redis-capacity: must be between 1 and 2^53 (got %d)", o.capacity)
	}
	if math.IsNaN(o.refill) || math.IsInf(o.refill, 0) || o.refill < 0 {
		return fmt.Errorf("--redis-refill: must be 0 or a positive number of tokens per second (got %v)", o.refill)
	}
	return nil
}

// ttl is the buckets' PEXPIRE: the time an empty bucket takes to refill
// (after which its state equals a fresh bucket's), at least a second and at
// most maxRedisTTL.
func (o redisOptions) ttl() time.Duration {
	if o.refill == 0 {
		return maxRedisTTL
	}
	secs := math.Ceil(float64(o.capacity) / o.refill)
	if secs >= maxRedisTTL.Seconds() {
		return maxRedisTTL
	}
	return max(time.Second, time.Duration(secs)*time.Second)
}

// redisTarget runs the token-bucket script with EVALSHA: one command per
// call, or a pipeline of them.
type redisTarget struct {
	rdb   *redis.Client
	keys  []string
	args  []any // capacity, refill_per_second, cost, ttl_ms
	batch int

	mu  sync.Mutex
	sha string
}

// newRedisTarget connects to o.addr with a connection per worker and loads
// the script. The client never retries by itself: a failed command counts
// as an error, and a retried EVALSHA could spend twice.
func newRedisTarget(ctx context.Context, o redisOptions, load loadOptions) (*redisTarget, error) {
	rdb := redis.NewClient(&redis.Options{
		Addr:                  o.addr,
		Protocol:              2, // like redis-benchmark and most clients; no HELLO, no push notifications
		DisableIdentity:       true,
		MaxRetries:            -1,
		PoolSize:              load.workers,
		ContextTimeoutEnabled: true,
		ReadTimeout:           benchCallTimeout,
		WriteTimeout:          benchCallTimeout,
	})
	t := &redisTarget{
		rdb:   rdb,
		keys:  benchKeyNames(load.keyPrefix, load.keys),
		args:  []any{o.capacity, strconv.FormatFloat(o.refill, 'f', -1, 64), 1, o.ttl().Milliseconds()},
		batch: load.batch,
	}
	lctx, cancel := context.WithTimeout(ctx, benchCallTimeout)
	defer cancel()
	if _, err := t.loadScript(lctx); err != nil {
		rdb.Close()
		return nil, fmt.Errorf("--redis-addr: %s: SCRIPT LOAD: %w", o.addr, err)
	}
	return t, nil
}

// loadScript (re)loads the script and returns its SHA1.
func (t *redisTarget) loadScript(ctx context.Context) (string, error) {
	sha, err := t.rdb.ScriptLoad(ctx, redisTokenBucketScript).Result()
	if err != nil {
		return "", err
	}
	t.mu.Lock()
	t.sha = sha
	t.mu.Unlock()
	return sha, nil
}

func (t *redisTarget) scriptSHA() string {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.sha
}

func (t *redisTarget) name() string { return targetRedis }

func (t *redisTarget) call(ctx context.Context, _ int, keys []int) (benchResult, error) {
	var r benchResult
	if t.batch == 1 {
		v, err := t.evalSHA(ctx, t.rdb, keys[0]).Result()
		if isNoScript(err) { // the script cache was flushed: reload, run again
			if _, err = t.loadScript(ctx); err == nil {
				v, err = t.evalSHA(ctx, t.rdb, keys[0]).Result()
			}
		}
		if err != nil {
			if code, ok := redisReplyCode(err); ok {
				r.itemErrors = append(r.itemErrors, code)
				return r, nil
			}
			return r, redisCallError{err}
		}
		if err := r.addReply(v); err != nil {
			r.itemErrors = append(r.itemErrors, "bad_reply")
		}
		return r, nil
	}
	cmds, err := t.pipeline(ctx, keys)
	if err != nil {
		return r, err
	}
	// Requests refused with NOSCRIPT were not run: reload and run them again.
	var again []int
	for i, c := range cmds {
		if isNoScript(c.Err()) {
			again = append(again, keys[i])
		}
	}
	if len(again) > 0 {
		if _, err := t.loadScript(ctx); err != nil {
			return r, redisCallError{err}
		}
		retried, err := t.pipeline(ctx, again)
		if err != nil {
			return r, err
		}
		for i, j := 0, 0; i < len(cmds); i++ {
			if isNoScript(cmds[i].Err()) {
				cmds[i] = retried[j]
				j++
			}
		}
	}
	for _, c := range cmds {
		v, err := c.Result()
		if err == nil {
			err = r.addReply(v)
		}
		if err != nil {
			code, ok := redisReplyCode(err)
			if !ok {
				code = "bad_reply"
			}
			r.itemErrors = append(r.itemErrors, code)
		}
	}
	return r, nil
}

// pipeline sends one EVALSHA per key in one round trip. It fails as a whole
// only when the connection does; replies that are errors stay in the
// commands.
func (t *redisTarget) pipeline(ctx context.Context, keys []int) ([]*redis.Cmd, error) {
	cmds := make([]*redis.Cmd, len(keys))
	_, err := t.rdb.Pipelined(ctx, func(p redis.Pipeliner) error {
		for i, k := range keys {
			cmds[i] = t.evalSHA(ctx, p, k)
		}
		return nil
	})
	if err != nil {
		if _, ok := redisReplyCode(err); !ok {
			return nil, redisCallError{err}
		}
	}
	return cmds, nil
}

// evalSHA queues or runs the script on key k.
func (t *redisTarget) evalSHA(ctx context.Context, c redis.Scripter, k int) *redis.Cmd {
	return c.EvalSha(ctx, t.scriptSHA(), []string{t.keys[k]}, t.args...)
}

// addReply counts one script reply: {allowed, tokens, retry_after_ms, now_ms}.
func (r *benchResult) addReply(v any) error {
	vals, ok := v.([]any)
	if !ok || len(vals) != 4 {
		return fmt.Errorf("script answered %#v, want 4 integers", v)
	}
	allowed, ok := vals[0].(int64)
	if !ok {
		return fmt.Errorf("script answered allowed=%#v, want an integer", vals[0])
	}
	if allowed == 1 {
		r.allowed++
	} else {
		r.denied++
	}
	return nil
}

func (t *redisTarget) close() error { return t.rdb.Close() }

// isNoScript reports whether err is Redis's NOSCRIPT reply.
func isNoScript(err error) bool { return err != nil && redis.HasErrorPrefix(err, "NOSCRIPT") }

// redisReplyCode returns "redis_" and the lower-cased prefix of an error
// reply of the server (e.g. "redis_err", "redis_busy"); ok is false for
// other errors (connection, timeout).
func redisReplyCode(err error) (code string, ok bool) {
	var re redis.Error
	if !errors.As(err, &re) {
		return "", false
	}
	prefix, _, _ := strings.Cut(re.Error(), " ")
	return "redis_" + strings.ToLower(prefix), true
}

// redisCallError is a call to Redis that failed as a whole.
type redisCallError struct{ err error }

func (e redisCallError) Error() string { return "redis: " + e.err.Error() }
func (e redisCallError) Unwrap() error { return e.err }

// benchCode classes the failure like a Connect code would.
func (e redisCallError) benchCode() string {
	var ne net.Error
	switch {
	case errors.Is(e.err, context.DeadlineExceeded) || errors.As(e.err, &ne) && ne.Timeout():
		return "deadline_exceeded"
	case errors.Is(e.err, context.Canceled):
		return "canceled"
	}
	return "unavailable"
}

// redisServer is a redis-server process this program started, listening on
// a loopback port.
type redisServer struct {
	addr string
	*serverProcess
}

// startRedisServer starts bin (redis-server) on a free loopback port with
// its files in dir: no RDB snapshots, and the append-only file off, or, when
// durable, on with an fsync per write (appendfsync always). It returns once
// the server answers PING, or an error with the server's output. The server
// ends with ctx or stop.
func startRedisServer(ctx context.Context, bin, dir string, durable bool) (*redisServer, error) {
	var lastErr error
	for attempt := 0; attempt < 5; attempt++ { // another process may take the free port first
		port, err := freeLoopbackPort()
		if err != nil {
			return nil, err
		}
		s, err := tryRedisServer(ctx, bin, dir, port, durable)
		if err == nil {
			return s, nil
		}
		lastErr = err
		if ctx.Err() != nil || !strings.Contains(err.Error(), "in use") {
			break
		}
	}
	return nil, lastErr
}

func tryRedisServer(ctx context.Context, bin, dir string, port int, durable bool) (*redisServer, error) {
	args := []string{"--port", strconv.Itoa(port), "--bind", "127.0.0.1", "--dir", dir,
		"--save", "", "--daemonize", "no", "--protected-mode", "no", "--logfile", "", "--loglevel", "warning"}
	if durable {
		args = append(args, "--appendonly", "yes", "--appendfsync", "always")
	} else {
		args = append(args, "--appendonly", "no")
	}
	addr := fmt.Sprintf("127.0.0.1:%d", port)
	p, err := startServerProcess(ctx, "redis-server on "+addr, bin, args, nil)
	if err != nil {
		return nil, err
	}
	s := &redisServer{addr: addr, serverProcess: p}
	rdb := redis.NewClient(&redis.Options{Addr: s.addr, Protocol: 2, DisableIdentity: true, MaxRetries: -1})
	defer rdb.Close()
	err = pollUntil(ctx, time.Now().Add(10*time.Second), s.exited, func(ctx context.Context) (bool, error) {
		err := rdb.Ping(ctx).Err()
		return err == nil, err
	})
	if err != nil {
		return nil, errors.Join(fmt.Errorf("%s %s: no answer to PING: %w: %s", bin, strings.Join(args, " "), err, lastLines(s.log.String(), 5)), s.stop())
	}
	return s, nil
}
