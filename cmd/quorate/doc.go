// Command quorate runs and operates Quorate, a Raft-replicated strict rate
// limiter.
//
// Server commands:
//
//	quorate serve --id ID --data-dir DIR (--bootstrap | --join API_ADDR) [flags]
//	    run one node of a cluster until SIGINT/SIGTERM.
//	quorate serve --config FILE [flags] [--print-config]
//	    the same with its flags in a YAML file (keys: the flags' names; flags
//	    on the command line win); --print-config prints the effective
//	    settings as such a file and exits.
//	quorate dev [--dir data/dev] [--nodes 3] [--groups auto] [--policies examples/policies.yaml]
//	    run a whole cluster on 127.0.0.1 in one process, load the example
//	    policies and print how to reach it; state (and the data groups)
//	    survive a restart.
//
// Client commands (each takes --server URL[,URL...], default $QUORATE_SERVER
// or http://127.0.0.1:7070, and --timeout, default 5s; -v reports each
// retried attempt on stderr). The data commands (admit, peek, refund,
// reserve, commit, lease) go through package client, their attempts rotating
// through the list; the others talk to the first server of the list that
// accepts a connection:
//
//	quorate admit --policy P --key K [--cost N] [--also P:K[:N]]... [--max-wait D]
//	              [--caller NAME] [--request-id ID] [-o text|json]
//	    ask for one admission decision; a denial prints "denied" and exits 2.
//	    --also adds checks decided atomically with the first (all charged or
//	    none; keys share a hash tag); --max-wait paces a token bucket instead
//	    of denying. --server may list several nodes (a,b,c). Unavailable
//	    answers and connection failures are retried until --timeout with the
//	    same request ID, rotating through the servers: exactly-once, a retry of
//	    an applied request gets the recorded answer, marked "duplicate".
//	quorate peek --policy P --key K  a key's state, spending nothing (retried)
//	quorate refund --key K --request-id ID [--caller NAME]
//	    give back what an admitted request spent, at most once (retried with
//	    the same request ID, like admit; a repeat says "already refunded")
//	quorate reserve --policy P --key K --estimate N [--ttl D] [--caller NAME] [--request-id ID]
//	    hold an estimate of a rate or quota policy for work whose cost is
//	    known only afterwards; prints the reservation ID (retried like admit)
//	quorate commit --reservation-id ID --actual N [--caller NAME] [--request-id ID]
//	    charge a reservation's real cost and give back the rest of its estimate
//	quorate lease acquire --policy P --key K [--ttl D] [--max-wait D] [--reserve-policy P --reserve-estimate N]
//	    take a slot of a concurrency policy: prints the lease ID, the fencing
//	    token (strictly increasing per key) and when the lease expires; when
//	    every slot is held (for --max-wait), "denied" with retry_after (exit
//	    2). Retried with the same request ID like admit: a retry gets the
//	    same lease.
//	quorate lease renew --lease-id ID --fencing-token N [--ttl D] [--request-id ID]
//	quorate lease release --lease-id ID --fencing-token N [--request-id ID]
//	    extend a live lease, or free its slot (both retried with the same
//	    request ID); a stale token is failed_precondition (exit 1)
//	quorate lease check --lease-id ID --fencing-token N
//	    whether a token still holds a slot: held=true (exit 0) or held=false
//	    (exit 2, as a denial)
//	quorate policy apply -f FILE [--dry-run]
//	                                create or replace the policies of a YAML file;
//	                                --dry-run shows the difference, changing nothing
//	quorate policy list             list the stored policies with their versions
//	quorate policy get NAME         show one stored policy (-o yaml: a policy file)
//	quorate policy delete NAME...   delete policies, all or none
//	quorate policy validate -f FILE check a policy file locally, without a server
//	quorate admin status            every member's role, term and indexes, the
//	                                cluster ID, groups, frozen slots, storage errors
//	quorate admin replica move --group G --from NODE --to NODE [--wait]
//	quorate admin node add ID --raft-addr HOST:PORT --api-addr HOST:PORT
//	quorate admin node drain ID [--wait] [--remove]
//	quorate admin node uncordon ID
//	quorate admin node remove ID [--force]
//	quorate admin recover --data-dir DIR [--yes]
//	                                offline, on a stopped survivor of a lost majority:
//	                                it becomes the only voter of its groups
//	quorate admin snapshot save FILE
//	                                the policies and every group's state, each group
//	                                at one applied index, to FILE (atomically)
//	quorate admin snapshot restore FILE [--overwrite]
//	                                a backup into a new cluster, checked whole first
//	quorate admin rebalance [--dry-run]
//	    shard map changes that each data group's leader carries out
//	quorate admin slots move --from G --to G (--count N | --range A-B) [--wait]
//	quorate admin group add [--replicas n1,n2,n3] [--wait]
//	quorate admin group split ID [--wait]
//	    plans kept in the meta group and driven by its leader
//	quorate admin plan list | watch [ID] | cancel ID
//	    list, follow or roll back those plans
//	(every --wait gives up at --timeout, 10m by default with --wait)
//
// Access control (README, "Access control"):
//
//	quorate token create --caller NAME
//	    a new bearer token and its --token-file entry; client commands send
//	    the one in --token-file or $QUORATE_TOKEN; a token is never an
//	    argument (--token is refused)
//
// Benchmarks are another binary's: quorate-bench (cmd/quorate-bench) loads
// a cluster and compares it with Redis and Gubernator, so that this one
// links neither client.
//
// Other commands:
//
//	quorate version [-o json|yaml]  the version, commit and commit time of this build
//	quorate completion bash|zsh|fish|powershell   a shell completion script
//
// Every command with -o json also takes -o yaml (the same fields); policy
// get, list, apply and delete print -o yaml as a policy file.
//
// Errors are printed as "quorate: <error>". Exit status: 0 success (allowed),
// 1 an error, 2 denied (admit, reserve, lease acquire; lease check: not
// held), 3 outcome unknown
// (the request may or may not have been applied; retry with its request ID).
package main
