package engine

import (
	"google.golang.org/protobuf/proto"

	"github.com/quorate/quorate/dedupe"
	raftcmdv1 "github.com/quorate/quorate/proto/quorate/raftcmd/v1"
)

// A request is identified by its caller, its request_id and its key (an
// Admit's first check's key; a Commit's reservation ID): the same
// request_id with another key is another request, in whichever group the
// keys live. The FSM deduplicates by (caller, request ID) only, so nodes
// write the key into the request ID of each command they propose:
// dedupe.KeyedRequestID(id, key); errors show the caller the ID it sent
// (dedupe.SentRequestID). Refund names the request the same way. Every
// node does, always: the name depends on the request alone, never on what
// a replica has applied (a leader elected after a restart has applied
// none of its log until its first commit), so every attempt of a request,
// on any leader, finds the record of the first.

// requestKey returns the command's caller, request ID and the key its
// identity includes, and whether it carries a request ID.
func requestKey(env *raftcmdv1.Envelope) (caller, requestID, key string, ok bool) {
	switch b := env.GetBody().(type) {
	case *raftcmdv1.Envelope_Admit:
		caller, requestID, key = b.Admit.GetCaller(), b.Admit.GetRequestId(), b.Admit.GetKey()
	case *raftcmdv1.Envelope_Reserve:
		caller, requestID, key = b.Reserve.GetCaller(), b.Reserve.GetRequestId(), b.Reserve.GetKey()
	case *raftcmdv1.Envelope_Commit:
		caller, requestID, key = b.Commit.GetCaller(), b.Commit.GetRequestId(), b.Commit.GetReservationId()
	case *raftcmdv1.Envelope_Lease:
		caller, requestID, key = b.Lease.GetCaller(), b.Lease.GetRequestId(), b.Lease.GetKey()
	case *raftcmdv1.Envelope_Refund:
		caller, requestID, key = b.Refund.GetCaller(), b.Refund.GetRequestId(), b.Refund.GetKey()
	}
	return caller, requestID, key, requestID != ""
}

// setRequestID sets the request ID of env's command.
func setRequestID(env *raftcmdv1.Envelope, id string) {
	switch b := env.GetBody().(type) {
	case *raftcmdv1.Envelope_Admit:
		b.Admit.RequestId = id
	case *raftcmdv1.Envelope_Reserve:
		b.Reserve.RequestId = id
	case *raftcmdv1.Envelope_Commit:
		b.Commit.RequestId = id
	case *raftcmdv1.Envelope_Lease:
		b.Lease.RequestId = id
	case *raftcmdv1.Envelope_Refund:
		b.Refund.RequestId = id
	}
}

// keyRequestID returns env as it is proposed: a copy with the key folded
// into its request ID, or env itself when it carries none. env itself is
// never changed: a caller may propose it again. An Admit, the command of
// almost every request, is copied field by field (a shallow copy sharing
// its checks, which nothing changes): proto.Clone's reflection was 2.8% of
// a leader's CPU under unary load. TestKeyRequestIDCopiesEveryField fills
// every field, so a field added to either message and not copied here
// fails it.
func keyRequestID(env *raftcmdv1.Envelope) *raftcmdv1.Envelope {
	_, id, key, ok := requestKey(env)
	if !ok {
		return env
	}
	keyed := dedupe.KeyedRequestID(id, key)
	if b, ok := env.GetBody().(*raftcmdv1.Envelope_Admit); ok {
		a := b.Admit
		return &raftcmdv1.Envelope{
			Version:     env.GetVersion(),
			NowUnixNano: env.GetNowUnixNano(),
			MapEpoch:    env.GetMapEpoch(),
			Actor:       env.GetActor(),
			Body: &raftcmdv1.Envelope_Admit{Admit: &raftcmdv1.Admit{
				Policy:       a.GetPolicy(),
				Key:          a.GetKey(),
				Cost:         a.GetCost(),
				RequestId:    keyed,
				Caller:       a.GetCaller(),
				Also:         a.GetAlso(),
				MaxWaitNanos: a.GetMaxWaitNanos(),
			}},
		}
	}
	out := proto.Clone(env).(*raftcmdv1.Envelope)
	setRequestID(out, keyed)
	return out
}
