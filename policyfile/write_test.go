package policyfile

import (
	"strings"
	"testing"
	"time"

	"google.golang.org/protobuf/types/known/durationpb"

	quoratev1 "github.com/quorate/quorate/proto/quorate/v1"
)

func TestWritePolicyFileLocalSync(t *testing.T) {
	var b strings.Builder
	err := Write(&b, []*quoratev1.Policy{
		{Name: "a", Version: 1, Algorithm: "token_bucket", Limit: 100, Period: durationpb.New(time.Second),
			Local: &quoratev1.LocalDecisions{Mode: "sync", SyncInterval: durationpb.New(500 * time.Millisecond)}},
		{Name: "b", Version: 1, Algorithm: "token_bucket", Limit: 100, Period: durationpb.New(time.Second),
			Local: &quoratev1.LocalDecisions{Mode: "sync", SyncInterval: durationpb.New(time.Second)}},
	})
	if err != nil {
		t.Fatal(err)
	}
	out := b.String()
	if !strings.Contains(out, "sync_interval: 500ms") || strings.Count(out, "sync_interval") != 1 {
		t.Errorf("want sync_interval 500ms written and the default 1s left out:\n%s", out)
	}
	back, err := Parse("p.yaml", []byte(out))
	if err != nil {
		t.Fatalf("the written file does not parse: %v\n%s", err, out)
	}
	if back[0].GetLocal().GetSyncInterval().AsDuration() != 500*time.Millisecond || back[1].GetLocal().GetMode() != "sync" || back[1].GetLocal().GetSyncInterval() != nil {
		t.Errorf("round trip: %v", back)
	}
}
