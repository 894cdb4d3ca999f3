package admission

// Placeholder until sliding_log is built: Validate refuses the algorithm, so
// these are never reached with a valid policy.

func checkSlidingLog(Policy) *FieldError {
	return policyError("algorithm", "%s is not implemented yet", quote("sliding_log"))
}

func decideSlidingLog(_ Policy, s State, _, _ int64) (State, Decision) {
	return s, Decision{RetryAfter: NeverRetry}
}

func expiresSlidingLog(Policy, State) int64 { return 0 }
