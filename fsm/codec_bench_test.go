package fsm_test

import (
	"testing"

	"google.golang.org/protobuf/proto"

	"github.com/quorate/quorate/fsm"
	raftcmdv1 "github.com/quorate/quorate/proto/quorate/raftcmd/v1"
)

// codecCases are the Admit envelopes the codec benchmarks encode and decode:
// a plain Admit, the same with a caller and a request ID (32 hex
// characters), as retried clients send, and a multi-check Admit of three
// checks (its own and two in Also) with a request ID.
var codecCases = []struct {
	name string
	env  func() *raftcmdv1.Envelope
}{
	{"Admit", func() *raftcmdv1.Envelope {
		return admitEnv(t0, "api", "tenant-00042", 1)
	}},
	{"AdmitWithRequestID", func() *raftcmdv1.Envelope {
		return admitIDEnv(t0, "svc-checkout", "9e3779b97f4a7c15f39cc0605cedc834", "api", "tenant-00042", 1)
	}},
	{"Admit3Checks", func() *raftcmdv1.Envelope {
		env := admitIDEnv(t0, "svc-checkout", "9e3779b97f4a7c15f39cc0605cedc834", "api", "tenant-00042", 1)
		env.GetAdmit().Also = []*raftcmdv1.Check{
			{Policy: "per-user", Key: "tenant-00042/user-1234567", Cost: 1},
			{Policy: "global", Key: "all", Cost: 1},
		}
		return env
	}},
}

// BenchmarkCodecEncode measures fsm.Encode (deterministic protobuf
// marshalling, as the leader does before raft.Apply) of one Admit envelope
// per op, for each of codecCases. bytes/entry is the size of the encoded
// log entry.
func BenchmarkCodecEncode(b *testing.B) {
	for _, c := range codecCases {
		b.Run(c.name, func(b *testing.B) {
			env := c.env()
			var data []byte
			b.ReportAllocs()
			for b.Loop() {
				var err error
				if data, err = fsm.Encode(env); err != nil {
					b.Fatal(err)
				}
			}
			b.ReportMetric(float64(len(data)), "bytes/entry")
		})
	}
}

// BenchmarkCodecDecode measures proto.Unmarshal of one encoded Admit entry
// per op into a fresh raftcmdv1.Envelope, as FSM.Apply decodes every
// entry, for each of codecCases. bytes/entry is the size of the entry.
func BenchmarkCodecDecode(b *testing.B) {
	for _, c := range codecCases {
		b.Run(c.name, func(b *testing.B) {
			want := c.env()
			data := encode(b, want)
			var env *raftcmdv1.Envelope
			b.ReportAllocs()
			for b.Loop() {
				env = new(raftcmdv1.Envelope)
				if err := proto.Unmarshal(data, env); err != nil {
					b.Fatal(err)
				}
			}
			b.StopTimer()
			if !proto.Equal(env, want) {
				b.Fatalf("decoded %v, want %v", env, want)
			}
			b.ReportMetric(float64(len(data)), "bytes/entry")
		})
	}
}
