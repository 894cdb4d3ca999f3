package fsm

import (
	"fmt"

	raftcmdv1 "github.com/quorate/quorate/proto/quorate/raftcmd/v1"
)

// MaxBatchOps is the most ops one Batch entry may carry; a longer batch is
// refused whole (nothing applied).
const MaxBatchOps = 4096

// BatchResult is the Apply result of a Batch entry: each op's own result (an
// Apply result or an error), in op order.
type BatchResult struct {
	Results []any
}

// Batchable reports whether a command of env's kind may ride in a Batch.
func Batchable(env *raftcmdv1.Envelope) bool {
	switch env.GetBody().(type) {
	case *raftcmdv1.Envelope_Admit, *raftcmdv1.Envelope_Peek, *raftcmdv1.Envelope_Refund,
		*raftcmdv1.Envelope_Lease, *raftcmdv1.Envelope_Commit:
		return true
	}
	return false
}

// applyBatch applies a batch's ops in order, each at the index and time of
// entry (the Batch command itself); f.mu is held. Each op is routed (slot
// ownership, epoch) on its own.
func (f *FSM) applyBatch(entry op, b *raftcmdv1.Batch) interface{} {
	ops := b.GetOps()
	if len(ops) > MaxBatchOps {
		return fmt.Errorf("a batch of %d ops, more than %d", len(ops), MaxBatchOps)
	}
	out := &BatchResult{Results: make([]any, len(ops))}
	for i, env := range ops {
		if !Batchable(env) {
			out.Results[i] = fmt.Errorf("%w: op %d", ErrNotBatchable, i)
			continue
		}
		o := entry
		o.env = env
		out.Results[i] = f.applyOp(o)
	}
	return out
}
