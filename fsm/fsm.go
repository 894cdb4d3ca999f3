package fsm

import (
	"fmt"
	"io"
	"math"
	"sync"
	"time"

	"github.com/hashicorp/raft"
	"google.golang.org/protobuf/proto"

	"github.com/quorate/quorate/admission"
	"github.com/quorate/quorate/dedupe"
	"github.com/quorate/quorate/fsm/internal/table"
	raftcmdv1 "github.com/quorate/quorate/proto/quorate/raftcmd/v1"
)

// EnvelopeVersion is the only raftcmdv1.Envelope version this binary writes
// and reads.
const EnvelopeVersion = 1

// SweepPerApply is the most expired states one Apply deletes from each of
// the group's tables: buckets, semaphores, reservations, grants and
// request-ID entries.
const SweepPerApply = 32

// ExpireBatch is the most expired states an Expire entry deletes from each
// table (buckets, semaphores, reservations, request-ID entries), on top of
// the SweepPerApply every entry reclaims.
const ExpireBatch = 4096

// DefaultMaxBuckets is the default bound on a group's live buckets and,
// apart, on its live semaphores (Options.MaxBuckets).
const DefaultMaxBuckets = 10_000_000

// DefaultMaxDedupeEntries is the default bound on unexpired request-ID
// entries per group. An entry takes about 180 bytes of heap (measured by
// dedupe's TestMemoryPerEntry with a 12-byte caller, a 32-character request
// ID and a 29-byte result; about 215 with an Admit's record, measured by
// TestMemoryFigures), so a full table holds about 400 MB; it covers 10
// minutes of 3,300 decisions/s that all carry request IDs.
const DefaultMaxDedupeEntries = 2_000_000

// Options configure an FSM. They must be identical on every replica of a
// group, so nodes set them from constants, never from per-node flags.
type Options struct {
	// MaxBuckets bounds the live states of the group's rate and
	// concurrency keys: its buckets and, apart, its semaphores (a
	// reservation holds units of a bucket, which must fit). 0 means
	// DefaultMaxBuckets. It is at most 2^30−1.
	MaxBuckets int

	// MaxDedupeEntries bounds the unexpired request-ID entries of the
	// group; 0 means DefaultMaxDedupeEntries.
	MaxDedupeEntries int

	// DataGroup marks the FSM of a data group: it refuses every data
	// command until its first SetOwnership says which slots it owns, and
	// every meta-group command (ErrNotMetaGroup). The meta group (and a
	// single-group cluster) leaves it false.
	DataGroup bool

	_ struct{}
}

// AdmitResult is the Apply result of an Admit command that was decided
// (allowed or denied). Rejected commands return an error instead.
type AdmitResult struct {
	// Decision, PolicyVersion and ShadowDenied are those of the first check
	// that denied or, when the request was allowed, of the first check.
	Decision      admission.Decision
	PolicyVersion uint64
	ShadowDenied  bool
	// DecidedAt is the FSM's now for this decision, Unix nanoseconds.
	DecidedAt int64
	// Wait is how long the caller waits before proceeding (pacing).
	Wait time.Duration
	// Duplicate is true when this is the recorded result of an earlier
	// command with the same caller and request ID; nothing was spent now.
	Duplicate bool
	// Multi is true for a request with more than one check; Checks holds
	// every check's result in request order either way.
	Multi  bool
	Checks []CheckResult
	// DeniedCheck is the index of the first check that denied, or -1.
	DeniedCheck int
}

// CheckResult is one check of an Admit. For a request that was denied
// because of another check, Decision says what this check alone would have
// decided (Remaining as if charged) but nothing was spent.
type CheckResult struct {
	Policy, Key   string
	Cost          int64
	Decision      admission.Decision
	PolicyVersion uint64
	ShadowDenied  bool
	// Spent is what the check took from its state: Cost when the request
	// was allowed and the check not shadow-denied, else 0.
	Spent int64
	// Shifted is the key's admission.State.Shifted right after the spend
	// (what a Refund of it corrects its end by).
	Shifted int64
	// Window and Quota are those of the check's policy, of the version
	// decided with, at the decision's log time (DecidedAt + Wait):
	// admission.Policy.Window and Policy.Limit, read from the group's table
	// when the result is made, so an answer needs no other read. A recorded
	// answer (Duplicate) gets them from the table at answer time, since
	// records do not keep them: both are zero when the table no longer holds
	// that version.
	Window time.Duration
	Quota  int64
}

// PeekResult is the Apply result of a Peek.
type PeekResult struct {
	Decision      admission.Decision
	PolicyVersion uint64
	At            int64
}

// RefundResult is the Apply result of a Refund.
type RefundResult struct {
	// Refunded is false when an earlier Refund already gave the units back.
	Refunded bool
	Cost     int64
	// RefundedAt is when the units were given back (now, or the earlier
	// refund's time).
	RefundedAt int64
}

// PoliciesResult is the Apply result of a PutPolicies command: the stored
// policies with their versions, in the command's order.
type PoliciesResult struct {
	Policies []PolicyVersion
}

// PolicyVersion is a stored policy and its version.
type PolicyVersion struct {
	Policy  admission.Policy
	Version uint64
}

// Node is a registered member's addresses.
type Node struct {
	ID       string
	RaftAddr string
	APIAddr  string
	// FeatureLevel is the highest log feature level the node's binary
	// applies, as it registered (features.go).
	FeatureLevel uint32
}

// FSM is the state machine of one Raft group. See the package doc for the
// threading and determinism contract.
//
// Its state is in two parts by what it serves (DESIGN.md, "State
// ownership"): meta, the meta group's registry of nodes, shard map, plans
// and cluster ID; data, the keys' state and a data group's ownership and
// slot migrations. A single-group cluster's meta group holds both; a data
// group's meta part stays empty, as it refuses the meta group's commands
// (ErrNotMetaGroup). What both parts read stays here: the
// time, the term, the applied index and the policy table.
type FSM struct {
	opts Options

	mu       sync.RWMutex
	lastNow  int64
	lastTerm uint64 // Raft term of the last applied command
	// appliedIndex is the log index of the last applied command (0 after a
	// restore until the next one). It decides nothing: it only dates reads
	// such as PoliciesAt.
	appliedIndex uint64
	policies     policyTable

	meta metaState
	data dataState
}

var _ raft.BatchingFSM = (*FSM)(nil)

// New returns an empty FSM.
func New(opts Options) *FSM {
	if opts.MaxBuckets <= 0 {
		opts.MaxBuckets = DefaultMaxBuckets
	}
	opts.MaxBuckets = min(opts.MaxBuckets, table.MaxEntries)
	if opts.MaxDedupeEntries <= 0 {
		opts.MaxDedupeEntries = DefaultMaxDedupeEntries
	}
	f := &FSM{opts: opts, policies: policyTable{byName: make(map[string]PolicyVersion)}}
	f.meta = newMetaState(&f.policies)
	f.data.init(&f.policies, opts)
	return f
}

// Encode marshals an envelope for raft.Apply, stamping the envelope version.
func Encode(env *raftcmdv1.Envelope) ([]byte, error) {
	env.Version = EnvelopeVersion
	return proto.MarshalOptions{Deterministic: true}.Marshal(env)
}

// Apply applies one committed entry. Its result is *AdmitResult,
// *PoliciesResult, *BatchResult, nil, or an error describing why the command
// was refused (state unchanged). It panics on an entry it cannot decode.
func (f *FSM) Apply(l *raft.Log) interface{} {
	if l.Type != raft.LogCommand {
		return nil
	}
	env := decodeEntry(l)
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.applyLocked(l, env)
}

// ApplyBatch applies entries committed together (raft.BatchingFSM): decoded
// before the lock is taken, then applied in order under one lock.
func (f *FSM) ApplyBatch(logs []*raft.Log) []interface{} {
	envs := make([]*raftcmdv1.Envelope, len(logs))
	for i, l := range logs {
		if l.Type == raft.LogCommand {
			envs[i] = decodeEntry(l)
		}
	}
	out := make([]interface{}, len(logs))
	f.mu.Lock()
	defer f.mu.Unlock()
	for i, l := range logs {
		if envs[i] != nil {
			out[i] = f.applyLocked(l, envs[i])
		}
	}
	return out
}

// decodeEntry decodes a command entry, panicking on one this binary cannot
// read (DESIGN.md §2 rule 3).
func decodeEntry(l *raft.Log) *raftcmdv1.Envelope {
	env := new(raftcmdv1.Envelope)
	if err := proto.Unmarshal(l.Data, env); err != nil {
		panic(fmt.Sprintf("fsm: cannot decode entry %d: %v", l.Index, err))
	}
	if env.GetVersion() != EnvelopeVersion {
		panic(fmt.Sprintf("fsm: entry %d has envelope version %d; this binary knows only %d: upgrade it",
			l.Index, env.GetVersion(), EnvelopeVersion))
	}
	return env
}

// applyLocked applies one decoded entry; f.mu is held.
//
// Time: the entry decides at max(lastNow, its leader's stamp). Only an
// ImportSlots moves lastNow further, to its source's time, and by at most
// MaxClockSkew past the stamp (migrate.go): no command moves a group's time
// far past its leaders' clocks, where no bucket would refill until they
// caught up.
func (f *FSM) applyLocked(l *raft.Log, env *raftcmdv1.Envelope) interface{} {
	f.appliedIndex = l.Index
	if f.meta.policiesChangeUnknown {
		f.meta.policiesChangedAt, f.meta.policiesChangeUnknown = l.Index, false
	}
	prev := f.lastNow
	now := max(prev, env.GetNowUnixNano())
	f.lastNow = now
	if l.Term > f.lastTerm {
		if f.lastTerm != 0 {
			f.data.shiftLeases(now - prev)
		}
		f.lastTerm = l.Term
	}
	f.data.sweep(now, SweepPerApply)

	o := op{env: env, index: l.Index, now: now, slot: dedupe.NoSlot}
	if b, ok := env.GetBody().(*raftcmdv1.Envelope_Batch); ok {
		return f.applyBatch(o, b.Batch)
	}
	return f.applyOp(o)
}

// op is one command being applied: an entry's own, or one op of a batch
// (which shares its entry's index and time). It lives for one command
// only; nothing of it stays in the FSM.
type op struct {
	env   *raftcmdv1.Envelope
	index uint64 // the entry's log index
	now   int64  // the time the command decides at
	// slot is the slot of a data command in a data group with ownership
	// (checkRoute), dedupe.NoSlot otherwise: the command touches only
	// keys of that slot, and its request ID is recorded with it.
	slot uint16
}

// applyOp applies one command at o.now: the meta group's commands to
// f.meta (refused in a data group; metaState.apply, which also keeps the
// audit trail), the keys' and slots' to f.data.
func (f *FSM) applyOp(o op) interface{} {
	env, now := o.env, o.now
	if err := refuseMetaCommand(env, f.opts.DataGroup); err != nil {
		return err
	}
	slot, err := f.data.checkRoute(env, f.opts.DataGroup)
	if err != nil {
		return err
	}
	o.slot = slot
	if _, ok := metaCommand(env); ok {
		return f.meta.apply(o)
	}
	d := &f.data
	switch body := env.GetBody().(type) {
	case *raftcmdv1.Envelope_SetOwnership:
		return d.applySetOwnership(body.SetOwnership)
	case *raftcmdv1.Envelope_SetPolicies:
		return d.applySetPolicies(body.SetPolicies)
	case *raftcmdv1.Envelope_Admit:
		return d.applyAdmit(body.Admit, o)
	case *raftcmdv1.Envelope_Peek:
		return d.applyPeek(body.Peek, now)
	case *raftcmdv1.Envelope_Refund:
		return d.applyRefund(body.Refund, o)
	case *raftcmdv1.Envelope_Lease:
		return d.applyLease(body.Lease, o)
	case *raftcmdv1.Envelope_Reserve:
		return d.applyReserve(body.Reserve, o)
	case *raftcmdv1.Envelope_Commit:
		return d.applyCommit(body.Commit, o)
	case *raftcmdv1.Envelope_Grant:
		return d.applyGrant(body.Grant, o)
	case *raftcmdv1.Envelope_FreezeSlots:
		return d.applyFreeze(body.FreezeSlots)
	case *raftcmdv1.Envelope_UnfreezeSlots:
		return d.applyUnfreeze(body.UnfreezeSlots)
	case *raftcmdv1.Envelope_ImportSlots:
		return f.applyImport(body.ImportSlots, env.GetNowUnixNano())
	case *raftcmdv1.Envelope_DropImport:
		return d.applyDropImport(body.DropImport)
	case *raftcmdv1.Envelope_RestoreSlots:
		return f.applyRestore(body.RestoreSlots, env.GetNowUnixNano())
	case *raftcmdv1.Envelope_Expire:
		d.sweep(now, ExpireBatch)
		return nil
	default:
		panic(fmt.Sprintf("fsm: entry %d has an empty or unknown body (written by a newer binary?): upgrade this one", o.index))
	}
}

// addSaturating returns a+b for b ≥ 0, capped at math.MaxInt64.
func addSaturating(a, b int64) int64 {
	if a > math.MaxInt64-b {
		return math.MaxInt64
	}
	return a + b
}

// BucketKey is the state key of (policy, key): "policy/key", the key of
// its bucket or its semaphore.
func BucketKey(policy, key string) string { return policy + "/" + key }

// Snapshot copies the state; Persist encodes the copy concurrently with later
// Applies.
func (f *FSM) Snapshot() (raft.FSMSnapshot, error) {
	f.mu.RLock()
	defer f.mu.RUnlock()
	return &snapshot{
		lastNow:  f.lastNow,
		lastTerm: f.lastTerm,
		policies: sortedPolicies(f.policies.byName),
		meta:     f.meta.snapshot(),
		data:     f.data.snapshot(),
	}, nil
}

// Restore replaces the state with a snapshot written by Persist. The new
// state is built before the lock is taken, so reads wait only for the swap.
func (f *FSM) Restore(rc io.ReadCloser) error {
	defer rc.Close()
	s, err := readSnapshot(rc)
	if err != nil {
		return err
	}
	policies := make(map[string]PolicyVersion, len(s.policies))
	for _, p := range s.policies {
		policies[p.Policy.Name] = p
	}
	meta := restoredMeta(&f.policies, s.meta)
	data := f.data.restored(&s.data)
	f.mu.Lock()
	defer f.mu.Unlock()
	f.lastNow, f.lastTerm, f.policies.byName = s.lastNow, s.lastTerm, policies
	f.meta = meta
	f.data.install(data)
	return nil
}
