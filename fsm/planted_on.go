//go:build quorate_planted_bug

package fsm

// plantedBug, set only with -tags quorate_planted_bug, makes Admit ignore
// request IDs: a retry spends again and is answered as a new request. The
// fault-injection harness builds this binary to prove that its at-most-once
// checker fails when dedupe is broken. Never ship it.
const plantedBug = true
