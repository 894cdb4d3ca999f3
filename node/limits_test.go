package node

import (
	"fmt"
	"strings"
	"testing"

	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/durationpb"

	quoratev1 "github.com/quorate/quorate/proto/quorate/v1"
)

// The default bounds hold the largest legitimate requests, in protobuf and
// in JSON (with every key character escaped as \uXXXX, as encoders that
// keep to ASCII write them): an AdmitBatch of MaxAdmitBatch requests with
// every field at its longest, and 10,000 policies.
func TestDefaultLimitsHoldLargestLegitimateRequests(t *testing.T) {
	l := DefaultConfig().apiLimits()
	long := func(c string, n int) string { return strings.Repeat(c, n) }
	cost := int64(1 << 62)
	batch := &quoratev1.AdmitBatchRequest{}
	for i := range MaxAdmitBatch {
		key := func(j int) string { p := fmt.Sprintf("{t%d}:%d:", i, j); return p + long("é", (512-len(p))/2) }
		r := &quoratev1.AdmitRequest{Policy: long("p", 64), Key: key(0), Cost: &cost, RequestId: long("r", 128),
			Caller: long("c", 128), MaxWait: durationpb.New(MaxWait)}
		for j := 1; j <= 8; j++ {
			r.Also = append(r.Also, &quoratev1.Check{Policy: long("p", 64), Key: key(j), Cost: &cost})
		}
		batch.Requests = append(batch.Requests, r)
	}
	policies := &quoratev1.ApplyPoliciesRequest{}
	for i := range 10_000 {
		policies.Policies = append(policies.Policies, &quoratev1.Policy{Name: fmt.Sprintf("%s-%05d", long("n", 58), i),
			Algorithm: "sliding_window", Limit: 1e9, Period: durationpb.New(366 * 24 * 3600e9), Burst: proto.Int64(1e9), MaxCost: proto.Int64(1e9),
			OnUnavailable: "local", DedupeRetention: durationpb.New(24 * 3600e9), Calendar: "month", Shadow: true,
			LeaseTtl: durationpb.New(24 * 3600e9)})
	}
	for _, m := range []proto.Message{batch, policies} {
		bin, err := proto.Marshal(m)
		if err != nil {
			t.Fatal(err)
		}
		js, err := protojson.MarshalOptions{Multiline: true}.Marshal(m)
		if err != nil {
			t.Fatal(err)
		}
		// protojson writes é as is; escaped it takes 6 bytes, not 2.
		escaped := len(js) + 2*strings.Count(string(js), "é")
		name := m.ProtoReflect().Descriptor().Name()
		t.Logf("%s: %d bytes in protobuf, %d in JSON (%d escaped)", name, len(bin), len(js), escaped)
		if len(bin) > l.maxBytes || escaped > l.maxBytes {
			t.Errorf("%s: %d/%d bytes, over the default bound %d", name, len(bin), escaped, l.maxBytes)
		}
		n := 0
		if !countProto(bin, m.ProtoReflect().Descriptor(), &n, l.maxMessages(), 0) {
			t.Errorf("%s: over the message budget %d in protobuf", name, l.maxMessages())
		}
		if got := countJSONObjects(js); got > l.maxMessages() {
			t.Errorf("%s: %d objects, over the message budget %d in JSON", name, got, l.maxMessages())
		}
		if err := (&strictJSONCodec{budget: messageBudget{max: l.maxMessages()}}).Unmarshal(js, m.ProtoReflect().New().Interface()); err != nil {
			t.Errorf("%s: strict JSON codec: %v", name, err)
		}
	}
}

func TestStrictJSONNamesTheUnknownField(t *testing.T) {
	codec := &strictJSONCodec{name: "json", budget: messageBudget{max: 100, flag: "max-request-bytes"}}
	for _, tc := range []struct {
		msg  proto.Message
		json string
		want string // "" = accepted
	}{
		{&quoratev1.AdmitRequest{}, `{"policy":"p","key":"k","kost":5}`, `kost: unknown field (quorate.v1.AdmitRequest has no field "kost")`},
		{&quoratev1.AdmitRequest{}, `{"policy":"p","requestId":"a","request_id":"b"}`, "duplicate"}, // not an unknown field
		{&quoratev1.AdmitRequest{}, `{"policy":"p","requestId":"a","max_wait":"1s","maxWait":null}`, "duplicate"},
		{&quoratev1.AdmitRequest{}, `{"policy":"p","request_id":"a","maxWait":"1.5s","cost":"3"}`, ""},
		{&quoratev1.AdmitRequest{}, `{"also":[{"key":"a"},{"key":"b","kost":1}]}`, `also[1].kost: unknown field (quorate.v1.Check`},
		{&quoratev1.AdmitBatchRequest{}, `{"requests":[{"also":[{}]},{"also":[{"polcy":"x"}]}]}`, "requests[1].also[0].polcy: unknown field"},
		{&quoratev1.ApplyPoliciesRequest{}, `{"policies":[{"name":"a","period":"1s","brust":"5"}]}`, "policies[0].brust: unknown field"},
		{&quoratev1.ApplyPoliciesRequest{}, `{"policies":[{"name":"a","leaseTtl":"1s","lease_ttl":null}]}`, "duplicate"},
		{&quoratev1.ApplyPoliciesRequest{}, `{"policies":[{"name":"a"}], "policies2":[]}`, "policies2: unknown field"},
		{&quoratev1.ApplyPoliciesRequest{}, `{"policies":[` + strings.Repeat(`{},`, 200) + `{}]}`, "more than 100 messages"},
		{&quoratev1.ApplyPoliciesRequest{}, `{"policies":[` + strings.Repeat(`{ },`, 60) + `{"name":"{{{{"}]}`, ""},
	} {
		err := codec.Unmarshal([]byte(tc.json), tc.msg.ProtoReflect().New().Interface())
		switch {
		case tc.want == "" && err != nil:
			t.Errorf("%s: %v", tc.json, err)
		case tc.want != "" && (err == nil || !strings.Contains(err.Error(), tc.want)):
			t.Errorf("%s: got %v, want an error with %q", tc.json, err, tc.want)
		}
	}
}

func TestProtoCodecCountsMessages(t *testing.T) {
	codec := &protoCodec{budget: messageBudget{max: 100, flag: "max-request-bytes"}}
	many := &quoratev1.AdmitBatchRequest{}
	for range 101 {
		many.Requests = append(many.Requests, &quoratev1.AdmitRequest{})
	}
	b, err := proto.Marshal(many)
	if err != nil {
		t.Fatal(err)
	}
	if err := codec.Unmarshal(b, &quoratev1.AdmitBatchRequest{}); err == nil || !strings.Contains(err.Error(), "more than 100 messages") {
		t.Errorf("101 requests: %v, want over the budget", err)
	}
	many.Requests = many.Requests[:100]
	b, _ = proto.Marshal(many)
	b = append(b, 0xf8, 0x06, 0x05) // an unknown field stays accepted
	if err := codec.Unmarshal(b, &quoratev1.AdmitBatchRequest{}); err != nil {
		t.Errorf("100 requests: %v", err)
	}
}
