package fsm

import (
	"errors"
	"fmt"

	"github.com/quorate/quorate/admission"
)

// The FSM's sentinel errors. Each is an Apply result (or the error of a
// read) that says why nothing was applied; callers match them with
// errors.Is, and node/errors.go maps them to Connect codes.

// Admission errors.
var (
	// ErrUnknownPolicy is returned (as an Apply result) when a command names
	// a policy the group does not have.
	ErrUnknownPolicy = errors.New("unknown policy")
	// ErrGroupFull is returned when a command would create a bucket, or a
	// semaphore, beyond Options.MaxBuckets. Nothing existing is evicted.
	ErrGroupFull = errors.New("group bucket limit reached")
	// ErrDedupeFull is returned when a command with a request ID would
	// record one more unexpired entry than Options.MaxDedupeEntries. Nothing
	// is spent and no entry is evicted.
	ErrDedupeFull = errors.New("group request-ID table full")
	// ErrRequestIDReused is returned for a request ID (of the same caller)
	// already used, within its retention, by a request that asked something
	// else. It wraps admission.ErrInvalidRequest and comes inside an
	// *admission.FieldError for field "request_id".
	ErrRequestIDReused = fmt.Errorf("%w: request_id reused", admission.ErrInvalidRequest)
	// ErrNothingToRefund is returned by Refund when no admit is recorded
	// under the caller and request ID (never seen, or past its retention).
	ErrNothingToRefund = errors.New("no admitted request recorded under that request_id")
	// ErrNotAdmitted is returned by Refund for a recorded admit that was
	// denied: it spent nothing.
	ErrNotAdmitted = errors.New("the recorded request was not admitted")
	// ErrNoReservation is returned by Commit for a reservation that is unknown,
	// already committed or expired (an expired one has given its units back),
	// and for one that is not the caller's or named with another secret:
	// the same answer, so that it does not confirm the reservation exists.
	ErrNoReservation = errors.New("no such outstanding reservation")
)

// ErrGrantSeq is returned by a Grant whose seq is below the one its grant
// recorded: an older call, overtaken. Nothing changes.
var ErrGrantSeq = errors.New("grant call out of order")

// ErrTooManyGrants is returned by a Grant that would start a grant beyond
// MaxGrantsPerCaller holders of its caller on its key, MaxGrantsPerKey
// holders of its key, or MaxGrants in the group; the error names the bound.
// Nothing changes.
var ErrTooManyGrants = errors.New("budget lease refused")

// ErrNotBatchable is returned (as the result of that op) when a batch op's
// kind may not be batched (anything but Admit, Peek, Refund, LeaseOp and
// Commit, a nested Batch included). The other ops of the batch are applied.
var ErrNotBatchable = errors.New("command kind may not be batched")

// ErrTooManyPolicies is returned by PutPolicies when the command carries
// more than MaxPolicies policies or would leave the registry with more than
// MaxPolicies (Connect ResourceExhausted, naming "policies"). Nothing is
// stored.
var ErrTooManyPolicies = errors.New("too many policies")

// ErrBadRegistration is returned when a RegisterNode entry does not fit the
// registry: no node ID, or no feature level.
var ErrBadRegistration = errors.New("node registration refused")

// ErrClusterID is returned when a SetClusterID entry is refused: not a
// cluster ID, or another ID than the one the cluster already has. (A data
// group refuses any with ErrNotMetaGroup.)
var ErrClusterID = errors.New("cluster ID refused")

// ErrNotMetaGroup is returned when a data group (Options.DataGroup) is
// given one of the meta group's commands: RegisterNode, RemoveNode,
// SetClusterID, SetShardMap, PutPolicies, DeletePolicies, CreatePlan,
// UpdatePlan or CancelPlan. The message names the command. Nothing is
// applied: a data group's meta part stays empty.
var ErrNotMetaGroup = errors.New("command for the meta group only")

// ErrBadSnapshot is returned by Restore for a snapshot it cannot read.
var ErrBadSnapshot = errors.New("bad snapshot")

// Routing errors: a data command reached a group that must not apply it.
// Nothing was applied; the router refreshes its shard map and retries.
var (
	// ErrWrongGroup is returned for a data command whose slot this group
	// does not own (it moved away, or the router's map is wrong).
	ErrWrongGroup = errors.New("slot not owned by this group")
	// ErrStaleEpoch is returned for a data command stamped with a shard-map
	// epoch older than the one at which its slot got its current owner.
	ErrStaleEpoch = errors.New("command routed with a stale shard map")
	// ErrMapConflict is returned by SetShardMap when the meta group's map
	// is no longer at the expected epoch (someone else changed it).
	ErrMapConflict = errors.New("shard map changed concurrently")
)

// Slot migration errors. Each is an Apply result: nothing was applied.
var (
	// ErrSlotMoving is returned (inside a *RouteError) for a data command
	// whose slot is frozen by a migration out of this group: retry, the
	// slot soon belongs to the target.
	ErrSlotMoving = errors.New("slot is moving to another group")
	// ErrNotOwnedYet is returned by FreezeSlots for slots this group does
	// not own (yet: its ownership may lag the map), and by ImportSlots
	// before the group applied ownership at the import's map epoch.
	ErrNotOwnedYet = errors.New("group ownership not at the migration's map epoch yet")
	// ErrImportRefused is returned by ImportSlots for a chunk of an older
	// attempt, of a dropped migration, out of order, or into slots the
	// group owns; and by DropImport for slots it owns.
	ErrImportRefused = errors.New("import refused")
	// ErrNotFrozen is returned by ExportSlots when this replica has not
	// applied the migration's freeze.
	ErrNotFrozen = errors.New("slots not frozen by that migration here")
	// ErrClockSkew is returned (inside an *admission.FieldError for field
	// "source_now_unix_nano") by ImportSlots for a chunk whose source time
	// is more than MaxClockSkew ahead of the entry's own: the group's time
	// would jump past its leaders' clocks.
	ErrClockSkew = fmt.Errorf("%w: clock skew", admission.ErrInvalidRequest)
)

// Plan errors, returned by the meta group's plan commands.
var (
	// ErrPlanRunning is returned by CreatePlan while another plan runs.
	ErrPlanRunning = errors.New("another plan is running")
	// ErrNoPlan is returned for a plan ID the meta group does not keep.
	ErrNoPlan = errors.New("no such plan")
	// ErrPlanConflict is returned by UpdatePlan when the plan is not where
	// the update expects it (a stale coordinator, or a repeated update).
	ErrPlanConflict = errors.New("plan changed concurrently")
	// ErrPlanNotCancellable is returned by CancelPlan once the current
	// step changed the map, or when the plan is not running.
	ErrPlanNotCancellable = errors.New("plan cannot be cancelled now")
)
