package engine

import (
	"fmt"
	"testing"

	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/reflect/protoreflect"

	"github.com/quorate/quorate/dedupe"
	raftcmdv1 "github.com/quorate/quorate/proto/quorate/raftcmd/v1"
)

// fill sets every field of m that is not part of a oneof, recursively, to a
// value other than its zero, so that a copy forgetting a field differs.
func fill(t *testing.T, m protoreflect.Message, depth int) {
	t.Helper()
	fields := m.Descriptor().Fields()
	for i := 0; i < fields.Len(); i++ {
		f := fields.Get(i)
		if f.ContainingOneof() != nil {
			continue
		}
		if f.IsList() {
			l := m.Mutable(f).List()
			for j := 0; j < 2; j++ {
				if f.Kind() == protoreflect.MessageKind {
					e := l.NewElement()
					fill(t, e.Message(), depth+1)
					l.Append(e)
				} else {
					l.Append(scalar(t, f, j))
				}
			}
			continue
		}
		if f.IsMap() {
			t.Fatalf("%s: a map field; teach fill about maps", f.FullName())
		}
		if f.Kind() == protoreflect.MessageKind {
			if depth > 3 {
				continue
			}
			fill(t, m.Mutable(f).Message(), depth+1)
			continue
		}
		m.Set(f, scalar(t, f, int(f.Number())))
	}
}

func scalar(t *testing.T, f protoreflect.FieldDescriptor, n int) protoreflect.Value {
	t.Helper()
	switch f.Kind() {
	case protoreflect.StringKind:
		return protoreflect.ValueOfString(fmt.Sprintf("%s-%d", f.Name(), n))
	case protoreflect.BytesKind:
		return protoreflect.ValueOfBytes([]byte(fmt.Sprintf("%s-%d", f.Name(), n)))
	case protoreflect.BoolKind:
		return protoreflect.ValueOfBool(true)
	case protoreflect.Int32Kind, protoreflect.Sint32Kind, protoreflect.Sfixed32Kind:
		return protoreflect.ValueOfInt32(int32(n + 7))
	case protoreflect.Int64Kind, protoreflect.Sint64Kind, protoreflect.Sfixed64Kind:
		return protoreflect.ValueOfInt64(int64(n + 7))
	case protoreflect.Uint32Kind, protoreflect.Fixed32Kind:
		return protoreflect.ValueOfUint32(uint32(n + 7))
	case protoreflect.Uint64Kind, protoreflect.Fixed64Kind:
		return protoreflect.ValueOfUint64(uint64(n + 7))
	case protoreflect.EnumKind:
		vals := f.Enum().Values()
		return protoreflect.ValueOfEnum(vals.Get(vals.Len() - 1).Number())
	}
	t.Fatalf("%s: kind %v; teach scalar about it", f.FullName(), f.Kind())
	return protoreflect.Value{}
}

// TestKeyRequestIDCopiesEveryField: the proposed copy of an Admit (built
// field by field) equals a whole clone with the keyed request ID, with
// every field of the envelope and of the Admit set; the caller's envelope
// is left as it was. A field added to Envelope or Admit and not copied by
// keyRequestID fails it.
func TestKeyRequestIDCopiesEveryField(t *testing.T) {
	admit := &raftcmdv1.Admit{}
	fill(t, admit.ProtoReflect(), 0)
	env := &raftcmdv1.Envelope{Body: &raftcmdv1.Envelope_Admit{Admit: admit}}
	fill(t, env.ProtoReflect(), 0)
	before := proto.Clone(env).(*raftcmdv1.Envelope)

	got := keyRequestID(env)

	want := proto.Clone(env).(*raftcmdv1.Envelope)
	want.GetAdmit().RequestId = dedupe.KeyedRequestID(admit.GetRequestId(), admit.GetKey())
	if !proto.Equal(got, want) {
		t.Fatalf("keyRequestID(Admit) = %v\nwant %v", got, want)
	}
	if !proto.Equal(env, before) {
		t.Fatalf("keyRequestID changed the caller's envelope: %v, was %v", env, before)
	}
	got.MapEpoch++
	if env.GetMapEpoch() != before.GetMapEpoch() {
		t.Fatal("the proposed copy shares the caller's envelope")
	}
}

// TestKeyRequestIDOtherCommands: every other command with a request ID is
// cloned whole with its key folded in; one without is proposed as it is.
func TestKeyRequestIDOtherCommands(t *testing.T) {
	cases := []*raftcmdv1.Envelope{
		{Body: &raftcmdv1.Envelope_Reserve{Reserve: &raftcmdv1.Reserve{Key: "k", RequestId: "r", Caller: "c"}}},
		{Body: &raftcmdv1.Envelope_Commit{Commit: &raftcmdv1.Commit{ReservationId: "res", RequestId: "r"}}},
		{Body: &raftcmdv1.Envelope_Lease{Lease: &raftcmdv1.LeaseOp{Key: "k", RequestId: "r"}}},
		{Body: &raftcmdv1.Envelope_Refund{Refund: &raftcmdv1.Refund{Key: "k", RequestId: "r"}}},
	}
	for _, env := range cases {
		_, id, key, _ := requestKey(env)
		got := keyRequestID(env)
		if got == env {
			t.Fatalf("%v: proposed as it is", env)
		}
		if _, gotID, _, _ := requestKey(got); gotID != dedupe.KeyedRequestID(id, key) {
			t.Fatalf("%v: request ID %q, want the keyed one", env, gotID)
		}
		if _, stillID, _, _ := requestKey(env); stillID != id {
			t.Fatalf("%v: the caller's request ID became %q", env, stillID)
		}
	}
	plain := &raftcmdv1.Envelope{Body: &raftcmdv1.Envelope_Admit{Admit: &raftcmdv1.Admit{Key: "k"}}}
	if keyRequestID(plain) != plain {
		t.Fatal("a command without a request ID was copied")
	}
}
