// Command quorate-jepsen runs Quorate's fault-injection harness against a
// real cluster of `quorate serve` processes on this machine: concurrent
// clients drive token-bucket admits, fixed-window admits, fenced leases and
// budget-leasing clients beside strict ones (the grant workload, which
// kills and pauses its own clients; grant-sync the same with
// local-plus-global clients; grant-bucket on token buckets) through the
// public API while a seeded
// nemesis partitions the network,
// kills (-9), pauses (SIGSTOP), jumps clocks and restarts nodes — and, named
// only, moves data group replicas (move) or slots with their state between
// data groups (slots); checkers then verify no over-admission, at-most-once
// answers per request ID, linearizability per key (porcupine), lease
// fencing and durability, and with data groups that every group ends with
// its replicas serving on live nodes. It writes a report directory
// (summary.txt, whose first line is PASS or FAIL and second the command
// that reproduces the run; index.html with a PASS/FAIL banner, the
// reproduce command, the fault families that ran with their counts,
// throughput and latency over time with the faults shaded, and porcupine
// timelines; history.jsonl, node logs, seed) and exits 1 when a checker
// fails.
//
//	quorate-jepsen [--report DIR] [--seed N] [--duration 60s] [--nodes 3]
//	               [--workload all|token-bucket,fixed-window,lease,grant,grant-sync,grant-bucket] [--grant-limit 200]
//	               [--faults mixed|none|kill,pause,clock,partition,restart,move,slots]
//	               [--groups N] [--scale] [--recovery] [--interval 2s]
//	               [--net auto|nftables|proxy] [--tls] [--planted-bug dedupe|local-read]
//	quorate-jepsen --matrix full|short [--duration 60s] [--report DIR] [--tls]
//
// Slot moves under kills, on 4 data groups:
//
//	quorate-jepsen --faults slots,kill --nodes 3 --groups 4 --duration 60s
//
// The scale scenario, 3 → 5 → 3 nodes under the workloads (two nodes join,
// a group splits onto them, two original nodes are drained, removed and
// stopped), alone or beside faults:
//
//	quorate-jepsen --scale --faults none --nodes 3 --groups 4 --duration 30s
//
// The recovery scenario: two of three nodes lost for good under the
// workloads, the survivor recovered with `quorate admin recover`, two new
// nodes joined (never beside faults):
//
//	quorate-jepsen --recovery --faults none --groups 2 --duration 20s
//
// Kills and partitions on a cluster serving TLS on both ports of every node
// (a throwaway CA; a "tls" verdict checks that the nodes refuse plaintext):
//
//	quorate-jepsen --tls --faults kill,partition --duration 30s
//
// Re-running with the same --seed and options replays the same fault
// schedule; every report starts with the command line that does so.
package main
