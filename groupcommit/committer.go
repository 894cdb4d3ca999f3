package groupcommit

import (
	"github.com/quorate/quorate/fsm"
	raftcmdv1 "github.com/quorate/quorate/proto/quorate/raftcmd/v1"
)

// Group commit settings: ops per entry and entries in flight per group.
// One entry in flight, measured against two and three (BenchmarkAdmit3Nodes,
// 64 clients, 2 cores): with 1, 11.4 ops/entry and 3,200 admits/s on one
// group; with 2, 7.8 and 2,300/s; with 3, 6.2 and 2,200/s. Every entry costs
// each replica a bbolt commit (two fdatasyncs) and the CPU to replicate and
// apply it, so fewer, fuller entries win; a lone caller still goes at once.
const (
	maxOpsPerEntry     = 512
	maxEntriesInFlight = 1
)

// Log is the Raft group a Committer writes to, as its leader on this node
// sees it. Its methods are called on the Committer's goroutines.
type Log interface {
	// Append stamps env with the leader's time, appends it to the group's
	// log and waits until it is applied on this replica, returning the
	// FSM's response (a *fsm.BatchResult for a Batch). Its error says
	// whether the entry was certainly not applied or its outcome is
	// unknown; the Committer hands it to every op of the entry. cmds are
	// the commands env carries (env itself, or the Batch's ops), for
	// Append to report once raft has the entry.
	Append(env *raftcmdv1.Envelope, cmds []*raftcmdv1.Envelope) (any, error)
	// Applied is called for each command applied without error, after
	// Append returned and before the command's caller is answered.
	Applied(cmd *raftcmdv1.Envelope)
}

// Result is what an Op's caller gets: the FSM's result for its command, or
// the error of its entry or the FSM's refusal (a result that is an error).
type Result struct {
	Res any
	Err error
}

// Op is one command waiting for its group's next entry.
type Op struct {
	Item[Result]
	env *raftcmdv1.Envelope
}

// NewOp returns an op for env, a command fsm.Batchable accepts.
func NewOp(env *raftcmdv1.Envelope) *Op {
	return &Op{Item: NewItem[Result](), env: env}
}

// Committer is the group commit of one Raft group's commands while this
// node leads it (see the package doc).
type Committer struct {
	q   *Queue[*Op]
	log Log
}

// New returns a Committer writing to log.
func New(log Log) *Committer {
	c := &Committer{log: log}
	c.q = NewQueue(maxOpsPerEntry, maxEntriesInFlight, c.sendEntry)
	return c
}

// Add queues ops for the group's next entries; each op's caller waits on
// it (Op.Wait).
func (c *Committer) Add(ops ...*Op) { c.q.Add(ops...) }

// Hold stops writing entries (ops queue up) and returns a channel closed
// once no entry is in flight. Release undoes it.
func (c *Committer) Hold() <-chan struct{} { return c.q.Hold() }

// Release writes again what queued while held.
func (c *Committer) Release() { c.q.Release() }

// sendEntry writes the ops still wanted into one entry (the op itself when
// alone, else a Batch), waits for it to be applied here and answers each op.
func (c *Committer) sendEntry(ops []*Op) {
	live := ops[:0]
	for _, op := range ops {
		if op.Claim() {
			live = append(live, op)
		}
	}
	if len(live) == 0 {
		return
	}
	env := live[0].env
	cmds := make([]*raftcmdv1.Envelope, len(live))
	for i, op := range live {
		cmds[i] = op.env
	}
	if len(live) > 1 {
		b := &raftcmdv1.Batch{Ops: cmds}
		env = &raftcmdv1.Envelope{Body: &raftcmdv1.Envelope_Batch{Batch: b}}
	}
	res, err := c.log.Append(env, cmds)
	for i, op := range live {
		r := Result{Res: res, Err: err}
		if b, ok := res.(*fsm.BatchResult); ok && err == nil && len(live) > 1 {
			r.Res = b.Results[i]
		}
		if e, ok := r.Res.(error); ok {
			r.Res, r.Err = nil, e
		}
		if r.Err == nil {
			c.log.Applied(op.env)
		}
		op.Answer(r)
	}
	if b, ok := res.(*fsm.BatchResult); ok {
		// Raft's log cache keeps the entry's future, and with it this
		// result, for its last 1,024 entries: let the ops' results go.
		b.Results = nil
	}
}
