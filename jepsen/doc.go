// Package jepsen is Quorate's black-box fault-injection harness.
//
// It builds the quorate binary, starts a real cluster of `quorate serve`
// processes on loopback ports (StartCluster), drives concurrent clients
// through the public Connect API only (never node or fsm internals), injects
// process faults on a seeded schedule (kill -9 + restart, SIGSTOP/SIGCONT),
// records a history of every attempt and checks it:
//
//   - CheckOverAdmission: per key, distinct request IDs acknowledged as
//     allowed never exceed the bucket's capacity (refill is negligible, so the
//     bound is exact).
//   - CheckAtMostOnce: every answer for one request ID agrees with the first
//     (allowed, remaining, decided_at) and later answers are duplicates.
//   - CheckDurability: after healing, a final Peek per key shows spent units
//     within [acked allowed, acked allowed + unknown outcomes].
//
// Run ties it together and writes a report directory (summary.txt,
// history.jsonl, seed, node logs).
//
// Next steps (not in this slice): cmd/quorate-jepsen; network partitions
// (netns/nftables when root, else a per-pair userspace TCP proxy); rolling
// restarts; clock faults via --debug-clock-offset; fixed-window and lease
// (fencing) workloads; a porcupine linearizability checker per key; a lease
// checker.
package jepsen
