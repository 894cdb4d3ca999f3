//go:build !quorate_planted_local_read

package node

import quoratev1 "github.com/quorate/quorate/proto/quorate/v1"

// plantedLocalRead is false in every real build; see planted_on.go.
const plantedLocalRead = false

func plantedLocalDecision(*Node, *quoratev1.AdmitRequest) (*quoratev1.AdmitResponse, bool) {
	return nil, false
}
