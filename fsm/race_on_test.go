//go:build race

package fsm_test

// raceEnabled reports whether the tests run under the race detector, which
// makes the 1M-key memory benchmarks take minutes and skews heap figures.
const raceEnabled = true
