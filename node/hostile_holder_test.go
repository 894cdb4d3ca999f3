package node_test

import (
	"context"
	"crypto/rand"
	"encoding/base64"
	"strconv"
	"strings"
	"testing"
	"time"

	"connectrpc.com/connect"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/durationpb"

	"github.com/quorate/quorate/fsm"
	"github.com/quorate/quorate/node/nodetest"
	quoratev1 "github.com/quorate/quorate/proto/quorate/v1"
	"github.com/quorate/quorate/proto/quorate/v1/quoratev1connect"
)

// holderSide is one caller of the takeover tests: the clients it calls
// through (one per node) and the caller its requests name ("" under an
// access file, where its token decides who it is).
type holderSide struct {
	name   string
	lease  []quoratev1connect.LeaseServiceClient
	adm    []quoratev1connect.AdmissionServiceClient
	caller string
}

const (
	holdSem   = "hold-sem"
	holdQuota = "hold-quota"
	holdKey   = "{hold}job"
	holdTTL   = time.Minute
)

// TestAnotherCallerCannotTakeALeaseOrReservation is the takeover of a
// lease and a reservation by a second caller, on a cluster with an access
// file (gw and gw2 are two client tokens) and on an open one (gw and gw2
// are what the requests' caller fields say): gw2 holds the only slot; gw,
// denied, derives gw2's fencing token from the denial (decided_at +
// retry_after − ttl, which was the token exactly), forges lease IDs from it
// and from the real token, and even holds gw2's real lease ID: every
// release, renew and check of gw's is refused and changes nothing; gw2
// still renews and releases. Then gw2 reserves, and gw's commits (actual
// 0) of IDs guessed next to its own reservation's, of gw2's real ID, and
// its refund of gw2's request, are all refused; gw2's own commit settles.
func TestAnotherCallerCannotTakeALeaseOrReservation(t *testing.T) {
	t.Run("access file", func(t *testing.T) {
		e := newAccessEnv(t)
		side := func(name, caller string) holderSide {
			s := holderSide{name: name}
			for i := range e.c.Len() {
				hc := e.httpClient(t, e.tokens[name])
				s.lease = append(s.lease, quoratev1connect.NewLeaseServiceClient(hc, e.c.APIURL(i)))
				s.adm = append(s.adm, quoratev1connect.NewAdmissionServiceClient(hc, e.c.APIURL(i)))
			}
			return s
		}
		gw, gw2 := side("app-a", ""), side("app-b", "")
		applyHoldPolicies(t, e.c)
		takeLease(t, gw, gw2)
		// Under an access file, naming the other caller is refused outright.
		ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
		defer cancel()
		l := acquireAs(ctx, t, gw2, 0)
		_, err := gw.lease[1].ReleaseLease(ctx, connect.NewRequest(&quoratev1.ReleaseLeaseRequest{
			LeaseId: l.GetLeaseId(), FencingToken: l.GetFencingToken(), Caller: "app-b"}))
		if connect.CodeOf(err) != connect.CodePermissionDenied {
			t.Fatalf("gw releasing as app-b: %v, want permission_denied", err)
		}
		releaseAs(ctx, t, gw2, l)
		takeReservation(t, gw, gw2)
	})
	t.Run("open", func(t *testing.T) {
		c := nodetest.NewCluster(t, 3)
		side := func(caller string) holderSide {
			s := holderSide{name: caller, caller: caller}
			for i := range c.Len() {
				s.lease = append(s.lease, c.Lease(i))
				s.adm = append(s.adm, c.Admission(i))
			}
			return s
		}
		gw, gw2 := side("gw"), side("gw2")
		applyHoldPolicies(t, c)
		takeLease(t, gw, gw2)
		takeReservation(t, gw, gw2)
	})
}

func applyHoldPolicies(t *testing.T, c *nodetest.Cluster) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if _, err := c.Admin(0).ApplyPolicies(ctx, connect.NewRequest(&quoratev1.ApplyPoliciesRequest{Policies: []*quoratev1.Policy{
		{Name: holdSem, Algorithm: "concurrency", Limit: 1, LeaseTtl: durationpb.New(holdTTL)},
		{Name: holdQuota, Algorithm: "quota", Limit: 100, MaxCost: proto.Int64(50), Calendar: "year"},
	}})); err != nil {
		t.Fatal(err)
	}
}

func acquireAs(ctx context.Context, t *testing.T, s holderSide, node int) *quoratev1.AcquireLeaseResponse {
	t.Helper()
	r, err := s.lease[node].AcquireLease(ctx, connect.NewRequest(&quoratev1.AcquireLeaseRequest{Policy: holdSem, Key: holdKey, Caller: s.caller}))
	if err != nil {
		t.Fatalf("%s acquires: %v", s.name, err)
	}
	return r.Msg
}

func releaseAs(ctx context.Context, t *testing.T, s holderSide, l *quoratev1.AcquireLeaseResponse) {
	t.Helper()
	if _, err := s.lease[2].ReleaseLease(ctx, connect.NewRequest(&quoratev1.ReleaseLeaseRequest{
		LeaseId: l.GetLeaseId(), FencingToken: l.GetFencingToken(), Caller: s.caller})); err != nil {
		t.Fatalf("%s releases its own lease: %v", s.name, err)
	}
}

// oldLeaseID is a lease ID as it was made before IDs carried a secret:
// base64(policy, key, token), all an outsider can know.
func oldLeaseID(token int64) string {
	return base64.RawURLEncoding.EncodeToString([]byte(holdSem + "\x00" + holdKey + "\x00" + strconv.FormatInt(token, 10)))
}

func randomSecret() [16]byte {
	var b [16]byte
	_, _ = rand.Read(b[:])
	return b
}

func takeLease(t *testing.T, gw, gw2 holderSide) {
	ctx, cancel := context.WithTimeout(context.Background(), 40*time.Second)
	defer cancel()
	held := acquireAs(ctx, t, gw2, 0)
	if !held.GetAllowed() {
		t.Fatalf("gw2's acquire: %v", held)
	}
	denied := acquireAs(ctx, t, gw, 1)
	if denied.GetAllowed() {
		t.Fatalf("gw's acquire of the held slot: %v, want denied", denied)
	}
	// What the denial shows: gw2's expiry, and so its acquire's log time.
	expiry := denied.GetDecidedAt().AsTime().Add(denied.GetRetryAfter().AsDuration())
	derived := expiry.Add(-holdTTL).UnixNano()
	if derived == held.GetFencingToken() {
		t.Errorf("the denial's decided_at + retry_after − ttl is gw2's fencing token %d", derived)
	}
	tok := held.GetFencingToken()
	var zero [16]byte
	type forged struct {
		what  string
		id    string
		token int64
	}
	tries := []forged{
		{"the old ID of the derived token", oldLeaseID(derived), derived},
		{"the old ID of the real token", oldLeaseID(tok), tok},
		{"a new ID of the derived token, no secret", fsm.LeaseID(holdSem, holdKey, derived, zero), derived},
		{"a new ID of the real token, a guessed secret", fsm.LeaseID(holdSem, holdKey, tok, randomSecret()), tok},
		{"gw2's real lease ID", held.GetLeaseId(), tok},
	}
	for _, f := range tries {
		for node := range 3 {
			_, err := gw.lease[node].ReleaseLease(ctx, connect.NewRequest(&quoratev1.ReleaseLeaseRequest{
				LeaseId: f.id, FencingToken: f.token, Caller: gw.caller, RequestId: "gw-release-" + f.what}))
			wantRefused(t, "gw releases "+f.what, err)
			_, err = gw.lease[node].RenewLease(ctx, connect.NewRequest(&quoratev1.RenewLeaseRequest{
				LeaseId: f.id, FencingToken: f.token, Caller: gw.caller, Ttl: durationpb.New(time.Second)}))
			wantRefused(t, "gw renews "+f.what, err)
			r, err := gw.lease[node].CheckFence(ctx, connect.NewRequest(&quoratev1.CheckFenceRequest{
				LeaseId: f.id, FencingToken: f.token, Caller: gw.caller}))
			if err == nil && (r.Msg.GetHeld() || r.Msg.GetExpiresAt() != nil) {
				t.Errorf("gw checks %s: %v, want not held", f.what, r.Msg)
			}
		}
	}
	// Nothing changed: gw2 holds the slot until the same end, gw is denied.
	r, err := gw2.lease[2].CheckFence(ctx, connect.NewRequest(&quoratev1.CheckFenceRequest{
		LeaseId: held.GetLeaseId(), FencingToken: tok, Caller: gw2.caller}))
	if err != nil || !r.Msg.GetHeld() || !r.Msg.GetExpiresAt().AsTime().Equal(held.GetExpiresAt().AsTime()) {
		t.Fatalf("gw2's check after gw's tries: %v, %v; want held until %v", r, err, held.GetExpiresAt().AsTime())
	}
	if again := acquireAs(ctx, t, gw, 2); again.GetAllowed() {
		t.Fatalf("gw acquired the slot gw2 holds: %v", again)
	}
	// gw2 still renews and releases its lease, and then gw gets the slot.
	if _, err := gw2.lease[1].RenewLease(ctx, connect.NewRequest(&quoratev1.RenewLeaseRequest{
		LeaseId: held.GetLeaseId(), FencingToken: tok, Caller: gw2.caller})); err != nil {
		t.Fatalf("gw2 renews its lease: %v", err)
	}
	releaseAs(ctx, t, gw2, held)
	mine := acquireAs(ctx, t, gw, 0)
	if !mine.GetAllowed() || mine.GetFencingToken() <= tok {
		t.Fatalf("gw's acquire once gw2 released: %v, want a token above %d", mine, tok)
	}
	releaseAs(ctx, t, gw, mine)
}

// wantRefused checks that err refuses a call on a lease or reservation
// that is not the caller's: as one that never existed (failed_precondition
// for a lease, not_found for a reservation) or as a malformed ID.
func wantRefused(t *testing.T, what string, err error) {
	t.Helper()
	switch connect.CodeOf(err) {
	case connect.CodeFailedPrecondition, connect.CodeNotFound, connect.CodeInvalidArgument, connect.CodePermissionDenied:
	default:
		t.Fatalf("%s: %v, want it refused", what, err)
	}
}

func takeReservation(t *testing.T, gw, gw2 holderSide) {
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	reserve := func(s holderSide, rid string) *quoratev1.ReserveResponse {
		t.Helper()
		r, err := s.adm[0].Reserve(ctx, connect.NewRequest(&quoratev1.ReserveRequest{
			Policy: holdQuota, Key: holdKey, Estimate: 10, Caller: s.caller, RequestId: rid}))
		if err != nil || !r.Msg.GetAllowed() {
			t.Fatalf("%s reserves: %v, %v", s.name, r, err)
		}
		return r.Msg
	}
	remaining := func() int64 {
		t.Helper()
		p, err := gw.adm[1].Peek(ctx, connect.NewRequest(&quoratev1.PeekRequest{Policy: holdQuota, Key: holdKey}))
		if err != nil {
			t.Fatal(err)
		}
		return p.Msg.GetRemaining()
	}
	theirs := reserve(gw2, "gw2-reserve")
	own := reserve(gw, "gw-reserve")
	before := remaining()
	// gw guesses gw2's ID from its own, as the log indexes of the two
	// Reserves are neighbours: IDs made as they were before they carried a
	// secret, and IDs with its own (valid) secret and a random one.
	var guesses []string
	if b, err := base64.RawURLEncoding.DecodeString(own.GetReservationId()); err == nil {
		if parts := strings.Split(string(b), "\x00"); len(parts) == 3 {
			index, group, _ := strings.Cut(parts[2], "@")
			n, _ := strconv.Atoi(index)
			for i := max(1, n-8); i <= n+8; i++ {
				name := strconv.Itoa(i)
				if group != "" {
					name += "@" + group
				}
				guesses = append(guesses, base64.RawURLEncoding.EncodeToString([]byte(holdQuota+"\x00"+holdKey+"\x00"+name)))
			}
		}
	}
	if _, _, name, secret, ok := fsm.ParseReservationID(own.GetReservationId()); ok {
		index, group, _ := strings.Cut(name, "@")
		n, _ := strconv.ParseUint(index, 10, 64)
		g, _ := strconv.ParseUint(group, 10, 32)
		for i := max(1, n-8); i <= n+8; i++ {
			guesses = append(guesses, fsm.ReservationID(holdQuota, holdKey, fsm.ReservationName(i, uint32(g)), secret),
				fsm.ReservationID(holdQuota, holdKey, fsm.ReservationName(i, uint32(g)), randomSecret()))
		}
	}
	if len(guesses) < 16 {
		t.Fatalf("gw's own reservation ID %q gave %d guesses", own.GetReservationId(), len(guesses))
	}
	guesses = append(guesses, theirs.GetReservationId()) // leaked
	for _, id := range guesses {
		if id == own.GetReservationId() {
			continue
		}
		_, err := gw.adm[2].Commit(ctx, connect.NewRequest(&quoratev1.CommitRequest{ReservationId: id, Actual: 0, Caller: gw.caller}))
		wantRefused(t, "gw commits "+id, err)
	}
	refundCaller := gw2.caller
	if refundCaller == "" {
		refundCaller = "app-b"
	}
	_, err := gw.adm[1].Refund(ctx, connect.NewRequest(&quoratev1.RefundRequest{Caller: refundCaller, RequestId: "gw2-reserve", Key: holdKey}))
	wantRefused(t, "gw refunds gw2's reserve", err)
	if got := remaining(); got != before {
		t.Fatalf("gw's tries moved the quota from %d to %d remaining", before, got)
	}
	// gw2's own commit settles its reservation: 4 charged, 6 given back.
	c, err := gw2.adm[1].Commit(ctx, connect.NewRequest(&quoratev1.CommitRequest{
		ReservationId: theirs.GetReservationId(), Actual: 4, Caller: gw2.caller}))
	if err != nil || c.Msg.GetCharged() != 4 || c.Msg.GetReleased() != 6 {
		t.Fatalf("gw2 commits its reservation: %v, %v", c, err)
	}
	if got := remaining(); got != before+6 {
		t.Fatalf("after gw2's commit %d remain, want %d", got, before+6)
	}
	if _, err := gw.adm[1].Commit(ctx, connect.NewRequest(&quoratev1.CommitRequest{
		ReservationId: own.GetReservationId(), Actual: 10, Caller: gw.caller})); err != nil {
		t.Fatalf("gw commits its own reservation: %v", err)
	}
}
