// Package jepsen is Quorate's black-box fault-injection harness.
//
// It builds the quorate binary, starts a real cluster of `quorate serve`
// processes on this machine (StartCluster), drives concurrent clients
// through the public Connect API only (never node or fsm internals), injects
// faults on a seeded schedule, records a history of every call and checks
// it. The command quorate-jepsen and `make jepsen` run it.
//
// Workloads (Run drives the selected ones at once, each on its own policy):
//   - token-bucket: Admit on buckets that never refill within a run, so the
//     bound is exact: admitted ≤ capacity per key (RunWorkload);
//   - fixed-window: Admit on fixed windows: admitted ≤ limit per key and
//     window of log time (RunWorkload);
//   - lease: AcquireLease, RenewLease, CheckFence, ReleaseLease, abandoned
//     leases that expire, and late calls with released tokens
//     (RunLeaseWorkload);
//   - grant: budget leases under faults (RunGrantWorkload): a fixed-window
//     policy in local grant mode (GrantPolicy: Options.GrantLimit per 1 s
//     window, grants of at most a fifth of it living at most 2 s) on three
//     keys, admitted by three leasing clients — each its own client.Client
//     with its own HTTP client, deciding in memory from its grants — beside
//     two strict ones (client.Config.DisableGrants), offering several times
//     the limit so that the windows fill. The workload kills and pauses its
//     leasing clients itself, one fault every ~1.5 s, recorded as faults of
//     the families client-kill and client-pause: a kill stops the client's
//     workers at once and makes its transport (cutTransport) fail every call
//     from then on, so it never renews nor releases and its grants expire in
//     the cluster with their unspent units (a kill -9 of a gateway, as the
//     cluster sees it), and a fresh client (a new holder) takes its place; a
//     pause blocks its workers and every call of its transport, renewals
//     included, for 0.3–1.5 s. Every admit is an op, sent without a request
//     ID of its own (one that carries one is never decided from a grant): a
//     strict one records the ID the client named it by, a local one the
//     workload's. One decided from a grant
//     (Outcome client.LocalGrant) is allowed and marked Local, its DecidedAt
//     the log time its units were granted (which names the window the
//     cluster spent them in). The nemesis hits the servers as for the other
//     workloads.
//   - grant-sync: the same clients and faults on a fixed window in local
//     sync mode (local-plus-global, sync_interval 100 ms): clients admit from
//     allowances and report every interval, so a key may go over its limit
//     by the policy's bound (a tenth of the limit here), and no further.
//   - grant-bucket: the same clients and faults on token buckets of the
//     grant limit that never refill within a run, in local grant mode; as
//     in token-bucket a fresh key opens every Duration/Keys, so buckets
//     drain through grants throughout the run. Admitted, local and strict
//     together, never exceed the capacity per key.
//
// Every workload and the final read call the cluster through package
// client, as an application does (Cluster.NewClient, one client per
// workload): it sends each call to its key's group leader, retries it with
// its request ID across nodes until the call's deadline (1.5 s) and
// coalesces the Admits bound for one leader into AdmitBatch calls. Every
// Admit sets Request.NoFallback, so an on_unavailable fallback never stands
// in for the cluster's decision. Each call is one op, whose invoke and
// complete are its Start and End: allowed or denied (answered), fail (the
// request was certainly never applied: client.ErrNotSent, a refused dial of
// every attempt, an InvalidArgument answer, a call out of time whose every
// attempt was certainly not applied) or unknown (*client.OutcomeUnknownError,
// or any other error: it may have been applied). The harness has no retry
// loop of its own; it re-sends a few answered requests with the same ID on
// purpose (they must come back as duplicates), and about 30% of admits are
// sent together with up to two fresh requests for other keys, so that the
// client coalesces them.
//
// The lease workload acquires with client.LeaseOptions.ManualRenew and its
// own request IDs, renews with Lease.RenewWithID, releases with
// Lease.ReleaseWith, leaves leases to expire with Lease.Abandon and
// checks fences with Lease.CheckFence: each answer carries the log times
// (decided_at, expires_at) and duplicate flag its checker needs. A
// FailedPrecondition answer (the token holds no slot) is a denial, marked
// Stale. Half of the acquires whose outcome is unknown are sent once more
// with the same request ID to learn it (a duplicate answer if the first was
// applied); the same-ID retries across nodes that exercise the lease calls'
// dedupe under faults are the client's.
//
// Faults (Nemesis, one at a time, on the leader half of the time): kill -9
// and restart from the same data dir; SIGSTOP/SIGCONT; clock jumps of
// ±1..5 s while the node runs (--debug-clock-file) or across a restart;
// network partitions between node pairs — isolate the leader,
// majority/minority split, majorities ring, bridge, one-way loss — and
// heal; rolling restarts; and, named only (NamedFamilies, never in
// "mixed"), replica moves of data groups (FamilyMove) and slot moves
// (FamilySlots): a run of 8–256 slots of a random group — two times in
// three one holding a workload key, so its state moves — goes to another
// group through AdminService.MoveSlots (freeze, copy through the target's
// log, flip the shard map, delete at the source); every fourth fault
// cancels its move shortly after it starts, every fourth splits a group
// (SplitGroup) while there are fewer than 12, and with FamilyKill every
// fourth kills the meta leader (the plan's coordinator) while its move
// runs; each fault waits for its plan to end and records it (Fault.Plan:
// state, slots, records, bytes, chunks, copy attempt); a failed plan is
// the fault's error. ClusterStatus
// gives only each group's slot count, so the nemesis keeps the slot ranges
// itself — the first map's even split plus every plan's moves — and falls
// back to moving a group's last N slots (MoveSlots.count) when its copy
// disagrees with the counts.
//
// The scale scenario (Options.Scale, Nemesis.Scale; quorate-jepsen
// --scale) grows and shrinks the cluster under the workloads, beside any
// faults: N → N+2 → N nodes. The cluster starts with two spare node slots
// (ClusterOptions.Spare), whose addresses and network paths exist from the
// start; Cluster.AddNode starts one with `quorate serve --join` and makes
// it a member once the cluster lists it. A group splits onto the new nodes
// and a replica moves to one; then n1 and another original node are each
// drained (DrainNode), taken out of the members the clients use
// (Cluster.Withdraw), removed (RemoveNode) while still running, and, once
// they host no data group replica, stopped (Cluster.Retire). Clients,
// faults and Heal use only the members (Cluster.Live). The workloads run
// at least until 2 s after the scenario.
//
// The rolling upgrade scenario (Options.Upgrade, Nemesis.Upgrade) starts
// the cluster on one binary (Options.Binary) and moves each node to
// another (UpgradeOptions.Binary; Cluster.SetNodeBinary gives a node its
// own binary and serve flags) under the workloads, the meta leader last,
// as docs/operating.md's "Rolling upgrade" says: stop it with SIGTERM
// (Cluster.StopNode), start it on the new binary with the same data dir,
// ports and flags — with --max-feature-level at the level the old nodes
// register when UpgradeOptions.HoldLevel, then a second pass restarts each
// without it — and wait until it reports the new version on /metrics
// (quorate_build_info, Cluster.BuildVersion), has applied in every group
// what the group's leader had committed when it came back, and the
// cluster is whole. The "upgrade" verdict checks that every member runs
// the new version at one feature level. TestRollingUpgrade builds the
// previous commit (ResolveRevision, BuildRevision: git archive into a
// temporary directory, built with the same go toolchain; another revision
// with QUORATE_UPGRADE_FROM) and the checkout (BuildStamped), and is
// skipped, saying why, without git history.
//
// The recovery scenario (Options.Recovery, Nemesis.Recover; quorate-jepsen
// --recovery --faults none) loses two of three nodes for good under the
// workloads — killed, withdrawn, data directories deleted — stops the
// survivor, runs `quorate admin recover --data-dir DIR --yes` on it as a
// process, starts it again, joins two spare nodes to it and removes the
// lost ones with force. What a recovery may lose is the entries the
// survivor never received; the scenario kills the second node only once
// the survivor holds every committed entry (recovery.go says how it
// knows), so every checker applies unchanged: nothing acknowledged may be
// lost. The "recovery" verdict checks that the members end as the
// survivor and the two new nodes, each group with exactly them as voters
// under one leader.
//
// Network faults (Cluster.Partition with a Grudge; ClusterOptions.Net): as
// root, nodes run in a private network namespace on 127.0.0.11, .12, … and
// nftables drops packets per ordered pair, so a one-way cut also breaks TCP
// the other way once a reply is needed; otherwise a userspace TCP proxy per
// pair holds back the bytes of a cut direction until healed (truly one-way).
// Only node-to-node traffic is cut, never the harness's clients.
// LogDir/network.log records the mode and every partition.
//
// Checkers:
//   - CheckOverAdmission / CheckFixedWindow: acknowledged admits per key
//     (and window) never exceed the bound;
//   - CheckGrants (the grant workload): CheckFixedWindow over its strict
//     and local admits together against the policy's limit, and a
//     grant/decisions verdict summing up local, strict allowed and denied
//     decisions, the key-windows that reached the limit, client kills and
//     pauses and the clients' grant counts (it fails only when no admit was
//     local); CheckGrantSync the same for grant-sync against limit + bound
//     per window, its summary giving the most a window went over;
//     CheckGrantBucket CheckOverAdmission over grant-bucket's admits and
//     its decisions, with the keys drained to capacity;
//   - CheckAtMostOnce: every answer for one request ID equals the first;
//   - CheckLinearizable: per-key histories linearize against a sequential
//     model with porcupine (unknown outcomes stay open-ended);
//   - CheckLeases: fencing tokens unique and increasing in real-time order,
//     never more than limit certain holders, stale tokens refused;
//   - CheckDurability: after healing, a final Peek per key lies within
//     [acknowledged, acknowledged + unknown];
//   - CheckGroupReplicas (with data groups): after healing, every data
//     group has three replicas in the shard map, all on members, each
//     serving it under one leader among them;
//   - the scale verdict (with Options.Scale): the scenario completed and
//     the members are N nodes, exactly those running, all answering, with
//     a full set of meta voters;
//   - the upgrade and recovery verdicts (with Options.Upgrade,
//     Options.Recovery), as above.
//
// TLS clusters (Options.TLS, ClusterOptions.TLS; quorate-jepsen --tls):
// StartCluster makes a throwaway CA in the work directory with package
// certs (NewDevCA) — a certificate per node slot, spares included, naming
// the node and the hosts of its addresses — and starts every node with
// --tls-cert, --tls-key and --tls-ca. The nodes' own traffic is TLS end to
// end through either network mode (the proxy relays the bytes). The
// harness's one HTTP client (newHTTPClient) verifies each node against the
// CA and presents the CA's admin certificate; without an access file a
// loopback node stays open, so it needs none. CheckTLS, the "tls" verdict,
// checks at the end that every member answers over TLS with its own
// certificate, refuses a plaintext call, and serves its peer port in TLS
// 1.3. The full matrix and the short one each have a TLS row.
//
// Options.Groups runs the nodes with data groups (quorate serve --groups), so
// the same faults hit the multi-Raft path: routing by slot, forwarding over
// the peer mux, many groups electing at once.
//
// Run writes a report directory: summary.txt, index.html, porcupine
// timelines (with a nemesis row), history.jsonl, node logs, the seed.
// summary.txt's first line is PASS or FAIL with a one-line reason
// (Report.Outcome: every checker passed and the run completed), its second
// the command that replays the schedule (ReproduceCommand: built from the
// run's options, defaults filled in, so a run driven from a test gets the
// equivalent quorate-jepsen command); it counts the fault families that
// ran from the recorded faults (FaultFamilies), then lists every fault and
// verdict. index.html (Report.WriteHTML, self-contained: no script, no
// external asset) shows a green PASS or red FAIL banner, the reproduce
// command, the run's facts, each checker's verdict, a table of the fault
// families that ran with their counts, errors, time under fault and
// kinds, and two inline SVG charts over time (ReportCharts): ops completed
// per second by outcome (ok, fail, unknown) and p50/p99 latency per bin on
// a log scale, with each fault's interval shaded in its family's colour,
// labelled, with its kind, nodes and error on hover. Binaries built with a
// planted bug (PlantedBugs) must make checkers fail: the self-test (the
// overspend bug: nodes that spend past the grants they hold for the grant
// workload's plain callers — binary, JSON and Envoy — must fail
// grant/no-over-admission-per-window). The same bug is planted in the Go
// clients through the harness itself (its clients run in its own
// process): cmd/quorate-jepsen built with -tags quorate_planted_overspend
// (PlantedClientOverspend), whose leasing clients spend up to 5 units past
// their grants after each answer, must fail a short grant run on
// grant/no-over-admission-per-window (exit 1), where the normal build
// passes the same run (TestPlantedOverspendIsCaught, TestGrantWorkload).
// The short matrix runs the grant workload in its kill+pause row
// (MatrixRun.Workloads; its other rows run the other workloads).
package jepsen
