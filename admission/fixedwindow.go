package admission

// Placeholder until fixed_window is built: Validate refuses the algorithm, so
// these are never reached with a valid policy.

func checkFixedWindow(Policy) *FieldError {
	return policyError("algorithm", "%s is not implemented yet", quote("fixed_window"))
}

func decideFixedWindow(_ Policy, s State, _, _ int64) (State, Decision) {
	return s, Decision{RetryAfter: NeverRetry}
}

func expiresFixedWindow(Policy, State) int64 { return 0 }
