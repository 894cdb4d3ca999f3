// Package dedupe is the request-ID table that makes Quorate's mutating
// operations exactly-once: (caller, request_id) → the answer the first
// attempt got, kept for a retention period of logged time.
//
// A retry of a request within its retention gets the recorded answer and
// changes nothing; a request ID reused with another payload is detected by
// comparing payload fingerprints. The table is part of a Raft group's
// replicated state: it is deterministic (no clock — every method takes the
// logged now — no randomness, no map order in results), it is bounded
// (MaxEntries unexpired entries; at the bound new entries are refused, never
// is an unexpired entry evicted), and expired entries are absent whether or
// not they have been swept yet. Sweeps go in one total order,
// (ExpiresAt, Caller, RequestID), so replicas reclaim the same entries.
//
// # Threading
//
// A Table is not safe for concurrent use; the FSM that owns it serializes
// every call.
package dedupe
