package admission

// Placeholder until quota is built: Validate refuses the algorithm, so
// these are never reached with a valid policy.

func checkQuota(Policy) *FieldError {
	return policyError("algorithm", "%s is not implemented yet", quote("quota"))
}

func decideQuota(_ Policy, s State, _, _ int64) (State, Decision) {
	return s, Decision{RetryAfter: NeverRetry}
}

func expiresQuota(Policy, State) int64 { return 0 }
