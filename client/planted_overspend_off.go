//go:build !quorate_planted_overspend

package client

// plantedOverspend is false in every real build; see planted_overspend_on.go.
const plantedOverspend = false

func plantedOverdraw(*grantState, int64) bool { return false }
