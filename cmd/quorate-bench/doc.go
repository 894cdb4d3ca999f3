// Command quorate-bench is Quorate's load generator: it loads a cluster (or
// a Redis) with admissions and reports throughput and latency, and
// compares Quorate with Redis and Gubernator on one machine. It is a binary
// of its own, so that the server binary (quorate) links neither a Redis
// nor a Gubernator client.
//
//	quorate-bench --policy P [--workers 64] [--duration 10s] [--rate N] [--keys 10000]
//	              [--dist uniform|zipf] [--batch N] [--route leader|any] [--coalesce]
//	              [--server URL,...] [--tls-ca F --tls-cert F --tls-key F] [--token-file F] [-o json]
//	    load a cluster with Admit (or AdmitBatch) calls through package client
//	quorate-bench --target redis [--redis-addr 127.0.0.1:6379] [same load flags]
//	    the same load against a Redis running a token-bucket Lua script
//	quorate-bench compare [--write docs/BENCHMARKS.md] [--gubernator BIN] [--quorate-binary BIN]
//	    Redis (plain and durable), a 3-node Gubernator cluster and a 3-node
//	    Quorate cluster (`quorate dev`, in a process of its own) one after
//	    the other with the same load; prints the table and writes it, with
//	    the machine, into docs/BENCHMARKS.md (`make bench-compare`)
//
// It owns the load generator (bench.go, bench_latency.go), the targets it
// drives (bench_quorate.go, bench_redis.go, bench_gubernator.go), the
// processes compare starts (bench_process.go) and compare's report
// (bench_compare*.go). --server defaults to $QUORATE_SERVER, the token to
// $QUORATE_TOKEN, as for quorate's commands (package apiflags).
//
// Errors are printed as "quorate-bench: <error>", with exit status 1.
package main
