package node

import (
	"github.com/hashicorp/go-hclog"

	"github.com/quorate/quorate/node/internal/replica"
)

// Recovery from a lost majority (quorate admin recover): see
// node/internal/replica's recover.go and docs/operating.md "Recovery".
type (
	// RecoveryPlan is what Recover finds in a stopped node's data
	// directory before it changes anything.
	RecoveryPlan = replica.RecoveryPlan
	// RecoveryGroup is what Recover finds of one group's replica.
	RecoveryGroup = replica.RecoveryGroup
)

var (
	// ErrNodeRunning refuses to recover the data directory of a running node.
	ErrNodeRunning = replica.ErrNodeRunning
	// ErrNotNodeDir refuses to recover a directory that is not a node's.
	ErrNotNodeDir = replica.ErrNotNodeDir
	// ErrRecoveryDeclined: the plan was not confirmed, nothing changed.
	ErrRecoveryDeclined = replica.ErrRecoveryDeclined
)

// Recover rewrites, offline, the Raft membership of the meta group and of
// every data group whose replica the stopped node's dataDir holds to that
// node alone, once confirm accepted the plan. Started again on dataDir
// (without --bootstrap or --join), the node is the only voter of each of
// those groups; new nodes join it. Entries the node never received are
// lost; entries it received but were never committed become committed.
func Recover(dataDir string, confirm func(*RecoveryPlan) bool) (*RecoveryPlan, error) {
	return replica.Recover(dataDir, hclog.NewNullLogger(), confirm)
}
