// Package policyfile owns the policy file format that `quorate policy
// apply -f`, `policy validate` and `quorate dev --policies` read and that
// `policy get`/`list -o yaml` write: parsing and validating a file (Read,
// Parse), writing policies as a file (Write), and what applying a file
// would change (Plan, WritePlan, Planned: `policy apply --dry-run`).
//
// A policy file is YAML:
//
//	policies:
//	  - name: api-free
//	    algorithm: token_bucket  # or fixed_window, sliding_window, sliding_log, quota, concurrency
//	    limit: 60
//	    period: 1m          # a Go duration: 500ms, 1s, 15m, 24h; unset for quota
//	    burst: 20           # optional, default limit (0 is refused: leave it out)
//	    max_cost: 10        # optional, default burst (0 is refused: leave it out)
//	    on_unavailable: allow  # optional: allow, deny (default) or local
//	    dedupe_retention: 30m  # optional, a Go duration, 1s..24h; default 10m (not 0s)
//	    shadow: false       # optional: true decides and counts but never denies
//	  - name: reports-monthly
//	    algorithm: quota
//	    limit: 1000
//	    calendar: month     # quota only, required there: day, week, month or year (UTC)
//	  - name: reports-active
//	    algorithm: concurrency  # a semaphore of `limit` leases per key (quorate lease)
//	    limit: 2
//	    lease_ttl: 2m       # concurrency only, optional: a Go duration, 1s..24h; default 1m
//	  - name: search-api
//	    algorithm: token_bucket
//	    limit: 10000
//	    period: 1s
//	    local:              # optional: clients decide in memory from budget leases
//	      mode: grant     # exact: units are spent in the log before a client spends them
//	      max_grant: 500    # optional, most units one client holds; default a tenth of the burst
//	      ttl: 10s          # optional, how long a grant lives unless renewed, 100ms..1h; default 10s
//
// It is read strictly: an unknown or repeated field, a value of the wrong
// type or a policy that admission.Policy.Validate refuses is an error naming
// the file, line, policy and field, so a bad file fails before any RPC.
//
// What Write prints, Read accepts unchanged and applying it is a no-op: the
// same field names as the file, durations as Go durations, the fields
// equal to their defaults left out, and each policy's version as a comment
// (a version is the cluster's to give, not the file's).
//
// Errors keep the form file:line: policy "name": field: reason (Error,
// yamllist's error type); they unwrap to an *admission.FieldError for a
// value admission.Policy.Validate refused.
package policyfile
