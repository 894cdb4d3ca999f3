package node

import (
	"errors"
	"strings"
	"testing"
	"time"
	"unicode/utf8"

	"connectrpc.com/connect"
	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/reflect/protoreflect"
	"google.golang.org/protobuf/types/known/durationpb"

	"github.com/quorate/quorate/admission"
	"github.com/quorate/quorate/fsm"
	"github.com/quorate/quorate/node/internal/engine"
	raftcmdv1 "github.com/quorate/quorate/proto/quorate/raftcmd/v1"
	quoratev1 "github.com/quorate/quorate/proto/quorate/v1"
	"github.com/quorate/quorate/shard"
)

// The peer port's forwarding channel decodes what other nodes send (and,
// before mTLS refuses it, what anyone reaching the port sends) with the
// codecs of codec.go. These targets feed arbitrary bytes through those
// codecs, as the server does, for the requests that carry forwarded work
// (AdmitBatch, the forwarded Admits) and slot migrations (PeerService),
// then through the checks the node makes before proposing.

// fuzzBudget is the message budget of one fuzz input: small, so that
// inputs of a few bytes reach it.
func fuzzBudget(b uint8) messageBudget {
	return messageBudget{max: int(b%64) + 1, flag: "max-peer-request-bytes"}
}

// peerCodec is the codec the peer port uses for a request sent in JSON or
// in binary protobuf.
func peerCodec(asJSON bool, budget messageBudget) connect.Codec {
	if asJSON {
		return &strictJSONCodec{name: "json", budget: budget}
	}
	return &protoCodec{budget: budget}
}

// checkPeerDecode decodes data into m as the peer port would and reports
// whether it decoded. It fails the test when the codec fails with an error
// that is not its own or protobuf's, when what decoded holds more messages
// than the budget, or when it does not survive a round trip through the
// same codec.
func checkPeerDecode(t *testing.T, data []byte, asJSON bool, budget messageBudget, m proto.Message) bool {
	t.Helper()
	codec := peerCodec(asJSON, budget)
	if err := codec.Unmarshal(data, m); err != nil {
		checkCodecError(t, err, asJSON, budget)
		return false
	}
	if n := decodedMessages(m.ProtoReflect(), asJSON); n > budget.max {
		t.Fatalf("%s codec decoded %q into %d messages, over its budget of %d", codec.Name(), data, n, budget.max)
	}
	again, err := codec.Marshal(m)
	if err != nil {
		t.Fatalf("%s codec decoded %q but cannot encode the result: %v", codec.Name(), data, err)
	}
	back := m.ProtoReflect().New().Interface()
	if err := codec.Unmarshal(again, back); err != nil {
		t.Fatalf("%s codec decoded %q, encoded it as %q, and cannot decode that: %v", codec.Name(), data, again, err)
	}
	if !proto.Equal(m, back) {
		t.Fatalf("%s codec round trip of %q changed the message:\n%v\n%v", codec.Name(), data, m, back)
	}
	return true
}

// checkCodecError fails the test unless err is one of the codec's typed
// errors or protobuf's own.
func checkCodecError(t *testing.T, err error, asJSON bool, budget messageBudget) {
	t.Helper()
	var be *budgetError
	var ue *unknownFieldError
	switch {
	case errors.As(err, &be):
		if be.max != budget.max || be.flag != budget.flag {
			t.Fatalf("budget error %v for a budget of %d (--%s)", err, budget.max, budget.flag)
		}
	case errors.Is(err, proto.Error):
	case asJSON && (errors.Is(err, errEmptyJSON) || errors.As(err, &ue)):
	default:
		t.Fatalf("codec error %q (%T) is none of the codec's typed errors", err, err)
	}
}

// decodedMessages counts what the budget of m's codec counts in m (not m
// itself): in binary protobuf, every message, map entry and element of a
// repeated string or bytes field (countProto); in JSON, the messages
// written as JSON objects (countJSONObjects), which leaves out the
// well-known types written as strings or numbers (a Duration is "1s"). The
// types fuzzed here have no maps.
func decodedMessages(m protoreflect.Message, asJSON bool) int {
	n := 0
	count := func(m protoreflect.Message) {
		if !asJSON || !strings.HasPrefix(string(m.Descriptor().FullName()), "google.protobuf.") {
			n++
		}
		n += decodedMessages(m, asJSON)
	}
	m.Range(func(fd protoreflect.FieldDescriptor, v protoreflect.Value) bool {
		switch {
		case fd.IsMap():
			v.Map().Range(func(_ protoreflect.MapKey, mv protoreflect.Value) bool {
				if !asJSON {
					n++
				}
				if fd.MapValue().Message() != nil {
					count(mv.Message())
				}
				return true
			})
		case fd.IsList():
			l := v.List()
			for i := range l.Len() {
				switch {
				case fd.Message() != nil:
					count(l.Get(i).Message())
				case !asJSON && (fd.Kind() == protoreflect.StringKind || fd.Kind() == protoreflect.BytesKind):
					n++
				}
			}
		case fd.Message() != nil:
			count(v.Message())
		}
		return true
	})
	return n
}

// addCodecSeeds adds each message as a seed in both encodings, under a
// budget it fits and one it does not.
func addCodecSeeds(f *testing.F, msgs []proto.Message, raw ...string) {
	for _, m := range msgs {
		bin, err := proto.Marshal(m)
		if err != nil {
			f.Fatal(err)
		}
		js, err := protojson.Marshal(m)
		if err != nil {
			f.Fatal(err)
		}
		for _, b := range []uint8{63, 1} {
			f.Add(bin, false, b)
			f.Add(js, true, b)
		}
	}
	for _, r := range raw {
		f.Add([]byte(r), true, uint8(3))
		f.Add([]byte(r), false, uint8(3))
	}
}

// FuzzForwardedAdmitBatch decodes an AdmitBatchRequest, the call a follower
// forwards its Admits to a leader in, then checks each request as the
// leader does before proposing it (admitCommand): a request either builds
// a command within the documented bounds that encodes as a Raft entry and
// decodes back the same, or is refused with an InvalidArgument error that
// names its field.
func FuzzForwardedAdmitBatch(f *testing.F) {
	cost := int64(3)
	addCodecSeeds(f, []proto.Message{
		&quoratev1.AdmitBatchRequest{Requests: []*quoratev1.AdmitRequest{
			{Policy: "api", Key: "{tenant:acme}:api", Cost: &cost, RequestId: "r1", Caller: "gateway",
				Also:    []*quoratev1.Check{{Policy: "ip", Key: "{tenant:acme}:ip:1.2.3.4"}},
				MaxWait: durationpb.New(2 * time.Second)},
			{Policy: "api", Key: "tenant:beta"},
		}},
		&quoratev1.AdmitBatchRequest{Requests: []*quoratev1.AdmitRequest{
			{Policy: "", Key: "k"},
			{Policy: "p", Key: "{a}x", Also: []*quoratev1.Check{{Policy: "p", Key: "{b}y"}}},
			{Policy: "p", Key: "k", MaxWait: durationpb.New(-time.Second)},
			{Policy: "p", Key: "k", Cost: new(int64)},
			{Policy: "p", Key: strings.Repeat("k", admission.MaxKeyBytes+1)},
		}},
		&quoratev1.AdmitBatchRequest{Requests: make([]*quoratev1.AdmitRequest, 70)},
	},
		`{"requests":[{"maxWait":"0s"},{"maxWait":"0s"},{"maxWait":"0s"}]}`,
		`{"requests":[{"policy":"p","key":"k","kost":5}]}`,
		`{"requests":[{"policy":"p","key":"\ud800"}]}`,
		`{"requests":[{"also":[{},{},{},{},{},{},{},{},{}]}]}`,
		"\x0a\x02\x0a\x00\x0a\x00",
		"\x0a\x05\x3a\x03\x08\x80\x80",
		"",
	)
	f.Fuzz(func(t *testing.T, data []byte, asJSON bool, budget uint8) {
		req := new(quoratev1.AdmitBatchRequest)
		if !checkPeerDecode(t, data, asJSON, fuzzBudget(budget), req) {
			return
		}
		for _, m := range req.GetRequests() {
			checkForwardedAdmit(t, m)
		}
	})
}

// checkForwardedAdmit checks m as a leader does a forwarded Admit.
func checkForwardedAdmit(t *testing.T, m *quoratev1.AdmitRequest) {
	t.Helper()
	cmd, err := admitCommand(m)
	if err != nil {
		var fe *admission.FieldError
		if !errors.Is(err, admission.ErrInvalidRequest) || !errors.As(err, &fe) || fe.Field == "" {
			t.Fatalf("admitCommand(%v): %v (%T), want an invalid request naming its field", m, err, err)
		}
		if code := connect.CodeOf((&Node{}).toConnectError(err)); code != connect.CodeInvalidArgument {
			t.Fatalf("admitCommand(%v): %v maps to %v, want invalid_argument", m, err, code)
		}
		return
	}
	checks := append([]*raftcmdv1.Check{{Policy: cmd.GetPolicy(), Key: cmd.GetKey(), Cost: cmd.GetCost()}}, cmd.GetAlso()...)
	switch {
	case len(checks) > admission.MaxChecks:
		t.Fatalf("admitCommand(%v) accepted %d checks (at most %d)", m, len(checks), admission.MaxChecks)
	case cmd.GetMaxWaitNanos() < 0 || cmd.GetMaxWaitNanos() > int64(MaxWait):
		t.Fatalf("admitCommand(%v) accepted a wait of %v", m, time.Duration(cmd.GetMaxWaitNanos()))
	case cmd.GetKey() != m.GetKey() || cmd.GetPolicy() != m.GetPolicy() || cmd.GetRequestId() != m.GetRequestId() || cmd.GetCaller() != m.GetCaller():
		t.Fatalf("admitCommand(%v) = %v: not the request's own policy, key and identity", m, cmd)
	}
	for _, c := range checks {
		if c.GetPolicy() == "" || len(c.GetPolicy()) > admission.MaxNameBytes || c.GetKey() == "" || len(c.GetKey()) > admission.MaxKeyBytes ||
			!utf8.ValidString(c.GetKey()) || c.GetCost() < 1 || shard.HashTag(c.GetKey()) != shard.HashTag(cmd.GetKey()) {
			t.Fatalf("admitCommand(%v) accepted the check %v", m, c)
		}
	}
	it := admitItem(m, cmd, true)
	if !it.Route.Data || !it.Route.Forwarded || it.Route.Key != cmd.GetKey() {
		t.Fatalf("admitItem(%v) routes as %+v", m, it.Route)
	}
	entry, err := fsm.Encode(it.Here.Env)
	if err != nil {
		t.Fatalf("the command of %v does not encode as a Raft entry: %v", m, err)
	}
	var env raftcmdv1.Envelope
	if err := proto.Unmarshal(entry, &env); err != nil || !proto.Equal(env.GetAdmit(), cmd) {
		t.Fatalf("the Raft entry of %v decodes as %v, %v", cmd, &env, err)
	}
}

// FuzzExportSlots decodes a PeerService ExportSlots request as the source
// replica's peer port does, and a page as the node driving a migration
// decodes the answer (connect's binary protobuf client codec, then the
// page's SlotState), which it puts in an ImportSlots entry.
func FuzzExportSlots(f *testing.F) {
	state, err := proto.Marshal(&raftcmdv1.SlotState{})
	if err != nil {
		f.Fatal(err)
	}
	addCodecSeeds(f, []proto.Message{
		&quoratev1.ExportSlotsRequest{Group: 3, Migration: 1<<16 | 2, Start: 10, End: 900, Cursor: []byte("cursor"), MaxBytes: 1 << 20},
		&quoratev1.ExportSlotsRequest{Group: ^uint32(0), Start: ^uint32(0), End: 5},
		&quoratev1.ExportSlotsResponse{State: state, Records: 7, NextCursor: []byte{1, 2}, SourceNowUnixNano: time.Now().UnixNano()},
		&quoratev1.ExportSlotsResponse{Done: true},
	}, `{"cursor":"!!"}`, `{"group":-1}`)
	f.Fuzz(func(t *testing.T, data []byte, asJSON bool, budget uint8) {
		req := new(quoratev1.ExportSlotsRequest)
		if checkPeerDecode(t, data, asJSON, fuzzBudget(budget), req) {
			r := shard.SlotRange{Start: shard.Slot(min(req.GetStart(), shard.SlotCount)), End: shard.Slot(min(req.GetEnd(), shard.SlotCount))}
			if r.Start > shard.SlotCount || r.End > shard.SlotCount {
				t.Fatalf("request %v: range %v out of the slots", req, r)
			}
		}
		resp := new(quoratev1.ExportSlotsResponse)
		if err := proto.Unmarshal(data, resp); err != nil {
			if !errors.Is(err, proto.Error) {
				t.Fatalf("decoding a page: %v (%T)", err, err)
			}
			return
		}
		page := new(raftcmdv1.SlotState)
		if err := proto.Unmarshal(resp.GetState(), page); err != nil {
			if !errors.Is(err, proto.Error) {
				t.Fatalf("decoding a page's state: %v (%T)", err, err)
			}
			return
		}
		env := &raftcmdv1.Envelope{Body: &raftcmdv1.Envelope_ImportSlots{ImportSlots: &raftcmdv1.ImportSlots{State: page,
			SourceNowUnixNano: resp.GetSourceNowUnixNano(), Last: resp.GetDone()}}}
		if _, err := fsm.Encode(env); err != nil {
			t.Fatalf("a page that decodes does not encode as an import: %v", err)
		}
	})
}

// FuzzApplyToGroup decodes a PeerService ApplyToGroup request as a group
// leader's peer port does, then its envelope as the handler does: only a
// slot-migration entry is accepted, and it names the migration call that
// checkPlanned checks it against.
func FuzzApplyToGroup(f *testing.F) {
	var msgs []proto.Message
	for _, env := range []*raftcmdv1.Envelope{
		{Body: &raftcmdv1.Envelope_FreezeSlots{FreezeSlots: &raftcmdv1.FreezeSlots{Migration: 1<<16 | 1, Start: 0, End: 100}}},
		{Body: &raftcmdv1.Envelope_ImportSlots{ImportSlots: &raftcmdv1.ImportSlots{Migration: 5, Start: 100, End: ^uint32(0), State: &raftcmdv1.SlotState{}}}},
		{Body: &raftcmdv1.Envelope_UnfreezeSlots{UnfreezeSlots: &raftcmdv1.UnfreezeSlots{Migration: 9}}},
		{Body: &raftcmdv1.Envelope_DropImport{DropImport: &raftcmdv1.DropImport{Migration: 9, End: 3}}},
		{Body: &raftcmdv1.Envelope_Admit{Admit: &raftcmdv1.Admit{Policy: "p", Key: "k", Cost: 1}}},
	} {
		b, err := fsm.Encode(env)
		if err != nil {
			f.Fatal(err)
		}
		msgs = append(msgs, &quoratev1.ApplyToGroupRequest{Group: 2, Envelope: b})
	}
	addCodecSeeds(f, msgs, `{"envelope":"AAAA"}`, `{"group":1,"envelope":null}`)
	f.Fuzz(func(t *testing.T, data []byte, asJSON bool, budget uint8) {
		req := new(quoratev1.ApplyToGroupRequest)
		if !checkPeerDecode(t, data, asJSON, fuzzBudget(budget), req) {
			return
		}
		env := new(raftcmdv1.Envelope)
		if err := proto.Unmarshal(req.GetEnvelope(), env); err != nil {
			if !errors.Is(err, proto.Error) {
				t.Fatalf("decoding an envelope: %v (%T)", err, err)
			}
			return
		}
		c := engine.MigrationCallOf(shard.GroupID(req.GetGroup()), env)
		if isCoordination(env) != (c.Kind != "unknown") {
			t.Fatalf("envelope %v: coordination %v, migration call %+v", env, isCoordination(env), c)
		}
		if c.Range.Start > shard.SlotCount || c.Range.End > shard.SlotCount {
			t.Fatalf("envelope %v: range %v out of the slots", env, c.Range)
		}
	})
}
