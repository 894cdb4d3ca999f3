package fsm_test

import (
	"errors"
	"math/rand/v2"
	"testing"
	"time"

	"github.com/quorate/quorate/admission"
	"github.com/quorate/quorate/fsm"
	raftcmdv1 "github.com/quorate/quorate/proto/quorate/raftcmd/v1"
)

func reserveEnv(now int64, policy, key string, estimate int64, ttl time.Duration, rid string) *raftcmdv1.Envelope {
	return &raftcmdv1.Envelope{NowUnixNano: now, Body: &raftcmdv1.Envelope_Reserve{Reserve: &raftcmdv1.Reserve{
		Policy: policy, Key: key, Estimate: estimate, TtlNanos: int64(ttl), RequestId: rid, Caller: "llm", Secret: testSecret}}}
}

func commitEnv(now int64, id string, actual int64, rid string) *raftcmdv1.Envelope {
	return &raftcmdv1.Envelope{NowUnixNano: now, Body: &raftcmdv1.Envelope_Commit{Commit: &raftcmdv1.Commit{
		ReservationId: id, Actual: actual, RequestId: rid, Caller: "llm"}}}
}

func (a *applier) reserve(tb testing.TB, env *raftcmdv1.Envelope) *fsm.ReserveResult {
	tb.Helper()
	res := a.apply(env)
	r, ok := res.(*fsm.ReserveResult)
	if !ok {
		tb.Fatalf("reserve/commit: %v", res)
	}
	return r
}

// Reserve/Commit never lets the sum of what was charged (commits and
// ordinary admits) and what outstanding reservations hold exceed the limit;
// an uncommitted reservation gives its units back when it expires.
func TestReserveCommitNeverExceedsTheLimit(t *testing.T) {
	const limit = 1000
	quota := admission.Policy{Name: "tokens", Algorithm: admission.AlgorithmQuota, Limit: limit, MaxCost: 200, Calendar: admission.CalendarYear}
	for seed := range uint64(20) {
		rng := rand.New(rand.NewPCG(seed, 7))
		a := newApplier(t, fsm.Options{})
		now := t0
		a.putPolicies(now, quota)
		type outstanding struct {
			id       string
			estimate int64
			expires  int64
		}
		var open []outstanding
		var charged int64
		for range 400 {
			now += rng.Int64N(int64(2 * time.Second))
			// Reservations that expired gave their units back.
			kept := open[:0]
			for _, o := range open {
				if o.expires > now {
					kept = append(kept, o)
				}
			}
			open = kept
			switch rng.IntN(3) {
			case 0:
				est := 1 + rng.Int64N(200)
				r := a.reserve(t, reserveEnv(now, "tokens", "team", est, time.Duration(1+rng.IntN(30))*time.Second, ""))
				if r.Allowed {
					open = append(open, outstanding{r.ReservationID, est, r.ExpiresAt})
				}
			case 1:
				if len(open) == 0 {
					continue
				}
				i := rng.IntN(len(open))
				o := open[i]
				actual := rng.Int64N(2*o.estimate + 1)
				r := a.reserve(t, commitEnv(now, o.id, actual, ""))
				if r.Charged+r.Over != actual || r.Released != max(0, o.estimate-actual) {
					t.Fatalf("seed %d: commit of %d against %d: %+v", seed, actual, o.estimate, r)
				}
				charged += r.Charged
				open = append(open[:i], open[i+1:]...)
			default:
				cost := 1 + rng.Int64N(20)
				if res, ok := a.admit(now, "tokens", "team", cost).(*fsm.AdmitResult); ok && res.Decision.Allowed {
					charged += cost
				}
			}
			var held int64
			for _, o := range open {
				held += o.estimate
			}
			if charged+held > limit {
				t.Fatalf("seed %d: charged %d + reserved %d > limit %d", seed, charged, held, limit)
			}
			// The quota's own count agrees exactly.
			peek := a.peek(now, "tokens", "team")
			if got := limit - peek.Decision.Remaining; got != charged+held {
				t.Fatalf("seed %d: the quota counts %d spent, the model %d (charged %d, reserved %d)", seed, got, charged+held, charged, held)
			}
		}
	}
}

func TestReservationExpiresRetriesAndSurvivesRestore(t *testing.T) {
	p := admission.Policy{Name: "tokens", Algorithm: admission.AlgorithmQuota, Limit: 100, Calendar: admission.CalendarYear}
	a := newApplier(t, fsm.Options{})
	a.putPolicies(t0, p)
	r := a.reserve(t, reserveEnv(t0, "tokens", "k", 60, 5*time.Second, "r-1"))
	if !r.Allowed || r.Decision.Remaining != 40 {
		t.Fatalf("reserve: %+v", r)
	}
	if again := a.reserve(t, reserveEnv(t0+1, "tokens", "k", 60, 5*time.Second, "r-1")); !again.Duplicate || again.ReservationID != r.ReservationID {
		t.Fatalf("retried reserve: %+v", again)
	}
	if denied := a.reserve(t, reserveEnv(t0+2, "tokens", "k", 50, 5*time.Second, "")); denied.Allowed {
		t.Fatalf("50 more than the 40 left: %+v", denied)
	}
	// Survives a snapshot and restore.
	b := newApplier(t, fsm.Options{})
	restoreFrom(t, b.f, snapshotBytes(t, a.f))
	if b.f.ReservationCount() != 1 {
		t.Fatalf("restored %d reservations", b.f.ReservationCount())
	}
	c := b.reserve(t, commitEnv(t0+int64(time.Second), r.ReservationID, 25, "c-1"))
	if c.Charged != 25 || c.Released != 35 || c.Over != 0 {
		t.Fatalf("commit: %+v", c)
	}
	if got := b.peek(t0+int64(time.Second), "tokens", "k").Decision.Remaining; got != 75 {
		t.Fatalf("after commit %d remain, want 75", got)
	}
	if dup := b.reserve(t, commitEnv(t0+int64(2*time.Second), r.ReservationID, 25, "c-1")); !dup.Duplicate || dup.Charged != 25 {
		t.Fatalf("retried commit: %+v", dup)
	}
	if err := b.applyErr(commitEnv(t0+int64(2*time.Second), r.ReservationID, 25, "")); !errors.Is(err, fsm.ErrNoReservation) {
		t.Fatalf("second commit: %v, want ErrNoReservation", err)
	}
	// On the original replica the reservation is never committed: at its
	// expiry its units come back.
	a.expire(t0 + int64(5*time.Second) - 1)
	if got := a.peek(t0+int64(5*time.Second)-1, "tokens", "k").Decision.Remaining; got != 40 {
		t.Fatalf("before expiry %d remain, want 40", got)
	}
	a.expire(t0 + int64(5*time.Second))
	if got := a.peek(t0+int64(5*time.Second), "tokens", "k").Decision.Remaining; got != 100 || a.f.ReservationCount() != 0 {
		t.Fatalf("after expiry %d remain (want 100), %d reservations", got, a.f.ReservationCount())
	}
	if err := a.applyErr(commitEnv(t0+int64(6*time.Second), r.ReservationID, 10, "")); !errors.Is(err, fsm.ErrNoReservation) {
		t.Fatalf("commit after expiry: %v, want ErrNoReservation", err)
	}
}
