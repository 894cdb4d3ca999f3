package admission

// Placeholder until sliding_window is built: Validate refuses the algorithm, so
// these are never reached with a valid policy.

func checkSlidingWindow(Policy) *FieldError {
	return policyError("algorithm", "%s is not implemented yet", quote("sliding_window"))
}

func decideSlidingWindow(_ Policy, s State, _, _ int64) (State, Decision) {
	return s, Decision{RetryAfter: NeverRetry}
}

func expiresSlidingWindow(Policy, State) int64 { return 0 }
