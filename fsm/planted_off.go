//go:build !quorate_planted_bug

package fsm

// plantedBug is false in every real build. The fault-injection harness
// builds a binary with -tags quorate_planted_bug to check that its checkers
// catch a broken server (see planted_on.go).
const plantedBug = false
