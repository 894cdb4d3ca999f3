package main

import (
	"context"
	"errors"
	"strings"
	"sync"
	"testing"
	"time"

	"connectrpc.com/connect"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/durationpb"

	quoratev1 "github.com/quorate/quorate/proto/quorate/v1"
	"github.com/quorate/quorate/proto/quorate/v1/quoratev1connect"
)

// Every one of these fails before any request: the server (none listens on
// 127.0.0.1:1) is never asked.
func TestPlanFlagErrorsNameTheFlag(t *testing.T) {
	srv := []string{"--server", "127.0.0.1:1"}
	tests := []struct {
		name  string
		args  []string
		names []string // the error must name each
	}{
		{"slots move without groups", []string{"admin", "slots", "move", "--count", "1"}, []string{"--from", "--to"}},
		{"slots move without to", []string{"admin", "slots", "move", "--from", "1", "--count", "1"}, []string{"--to"}},
		{"slots move from the meta group", []string{"admin", "slots", "move", "--from", "0", "--to", "2", "--count", "1"}, []string{"--from", "meta group"}},
		{"slots move to the meta group", []string{"admin", "slots", "move", "--from", "1", "--to", "0", "--count", "1"}, []string{"--to", "meta group"}},
		{"slots move to itself", []string{"admin", "slots", "move", "--from", "2", "--to", "2", "--count", "1"}, []string{"--from", "--to"}},
		{"slots move without count or range", []string{"admin", "slots", "move", "--from", "1", "--to", "2"}, []string{"--count", "--range"}},
		{"slots move count and range", []string{"admin", "slots", "move", "--from", "1", "--to", "2", "--count", "1", "--range", "0-1"}, []string{"--count", "--range"}},
		{"slots move zero count", []string{"admin", "slots", "move", "--from", "1", "--to", "2", "--count", "0"}, []string{"--count"}},
		{"slots move count over the slots", []string{"admin", "slots", "move", "--from", "1", "--to", "2", "--count", "4097"}, []string{"--count", "4096"}},
		{"slots move bad count", []string{"admin", "slots", "move", "--from", "1", "--to", "2", "--count", "-1"}, []string{"--count"}},
		{"slots move empty range", []string{"admin", "slots", "move", "--from", "1", "--to", "2", "--range", "5-5"}, []string{"--range", "below"}},
		{"slots move reversed range", []string{"admin", "slots", "move", "--from", "1", "--to", "2", "--range", "9-3"}, []string{"--range"}},
		{"slots move range past the end", []string{"admin", "slots", "move", "--from", "1", "--to", "2", "--range", "0-4097"}, []string{"--range", "4097"}},
		{"slots move range not A-B", []string{"admin", "slots", "move", "--from", "1", "--to", "2", "--range", "12"}, []string{"--range", "A-B"}},
		{"slots move wait json", []string{"admin", "slots", "move", "--from", "1", "--to", "2", "--count", "1", "--wait", "-o", "json"}, []string{"--wait", "--output"}},
		{"slots move bad output", []string{"admin", "slots", "move", "--from", "1", "--to", "2", "--count", "1", "-o", "xml"}, []string{"--output"}},
		{"group add empty replica", []string{"admin", "group", "add", "--replicas", "a,,b"}, []string{"--replicas", "entry 2"}},
		{"group add repeated replica", []string{"admin", "group", "add", "--replicas", "a,b,a"}, []string{"--replicas", "a is listed twice"}},
		{"group add wait json", []string{"admin", "group", "add", "--wait", "-o", "json"}, []string{"--wait", "--output"}},
		{"group split without id", []string{"admin", "group", "split"}, []string{"arg"}},
		{"group split bad id", []string{"admin", "group", "split", "two"}, []string{"ID", "two"}},
		{"group split meta group", []string{"admin", "group", "split", "0"}, []string{"ID", "meta group"}},
		{"plan cancel without id", []string{"admin", "plan", "cancel"}, []string{"arg"}},
		{"plan cancel bad id", []string{"admin", "plan", "cancel", "3x"}, []string{"ID", "3x"}},
		{"plan watch bad id", []string{"admin", "plan", "watch", "x"}, []string{"ID", "x"}},
		{"plan watch two ids", []string{"admin", "plan", "watch", "1", "2"}, []string{"arg"}},
		{"plan watch bad server", []string{"admin", "plan", "watch", "--server", "ftp://x"}, []string{"--server"}},
		{"plan watch zero timeout", []string{"admin", "plan", "watch", "--timeout", "0s"}, []string{"--timeout"}},
		{"plan list bad output", []string{"admin", "plan", "list", "-o", "xml"}, []string{"--output"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			args := tt.args
			if !strings.Contains(strings.Join(args, " "), "--server") {
				args = append(append([]string{}, args...), srv...)
			}
			_, _, err := runCLI(t, args...)
			wantErrNaming(t, err, tt.names...)
			if strings.Contains(err.Error(), "127.0.0.1:1") {
				t.Errorf("error %q comes from a request, want a local check", err)
			}
		})
	}
}

func TestParseSlotsRange(t *testing.T) {
	for in, want := range map[string][2]uint32{
		"0-512":     {0, 512},
		"0-4096":    {0, 4096},
		"4095-4096": {4095, 4096},
		" 7 - 9 ":   {7, 9},
	} {
		start, end, err := parseSlotRange(in)
		if err != nil || start != want[0] || end != want[1] {
			t.Errorf("parseSlotRange(%q) = %d, %d, %v; want %d, %d", in, start, end, err, want[0], want[1])
		}
	}
	for _, in := range []string{"", "5", "-", "1-", "-5", "a-b", "3-3", "4-2", "0-4097", "4096-4097", "1-2-3", "0x1-0x2", "-1-2", "1-99999999999"} {
		if start, end, err := parseSlotRange(in); err == nil {
			t.Errorf("parseSlotRange(%q) = %d, %d; want an error", in, start, end)
		}
	}
}

func TestMoveSlotsRequest(t *testing.T) {
	for _, tc := range []struct {
		args []string
		want *quoratev1.MoveSlotsRequest
	}{
		{[]string{"--from", "1", "--to", "3", "--count", "512"}, &quoratev1.MoveSlotsRequest{From: 1, To: 3, Count: 512}},
		{[]string{"--from", "2", "--to", "1", "--range", "100-200"}, &quoratev1.MoveSlotsRequest{From: 2, To: 1, Start: 100, End: 200}},
		{[]string{"--from", "2", "--to", "1", "--count", "4096"}, &quoratev1.MoveSlotsRequest{From: 2, To: 1, Count: 4096}},
	} {
		cmd := newAdminSlotsMoveCmd()
		if err := cmd.ParseFlags(tc.args); err != nil {
			t.Fatal(err)
		}
		fs := cmd.Flags()
		from, _ := fs.GetUint32("from")
		to, _ := fs.GetUint32("to")
		count, _ := fs.GetUint32("count")
		rng, _ := fs.GetString("range")
		got, err := moveSlotsRequest(cmd, from, to, count, rng)
		if err != nil {
			t.Errorf("%v: %v", tc.args, err)
			continue
		}
		if got.String() != tc.want.String() {
			t.Errorf("%v: request %v, want %v", tc.args, got, tc.want)
		}
	}
}

func plan(id uint64, state string, done uint32, steps ...*quoratev1.PlanStepStatus) *quoratev1.PlanStatus {
	return &quoratev1.PlanStatus{Id: id, Kind: "move-slots", State: state, StepsDone: done, Steps: steps,
		Summary: "move 512 slots 1→3", Age: durationpb.New(75 * time.Second)}
}

func step(action, phase string, attempt, records, bytes, chunks uint64) *quoratev1.PlanStepStatus {
	return &quoratev1.PlanStepStatus{Action: action, Phase: phase, Attempt: attempt, Records: records, Bytes: bytes, Chunks: chunks}
}

func TestPlanProgress(t *testing.T) {
	add := step("add group 4 on [n1 n2 n3]", "done", 1, 0, 0, 0)
	for _, tc := range []struct {
		p    *quoratev1.PlanStatus
		want string
	}{
		{plan(7, "running", 1, add, step("move slots [0,512) 1→4", "copying", 2, 12034, 3<<20+1<<19, 5)),
			"plan 7 running: step 2/2 move slots [0,512) 1→4: copying, attempt 2, 12034 records, 3.5 MiB, 5 chunks"},
		{plan(7, "running", 0, step("move slots [0,512) 1→4", "copying", 1, 1, 0, 0)),
			"plan 7 running: step 1/1 move slots [0,512) 1→4: copying, attempt 1, 1 record, 0 B, 0 chunks"},
		{plan(7, "running", 0, step("add group 4 on [n1 n2 n3]", "pending", 0, 0, 0, 0)),
			"plan 7 running: step 1/1 add group 4 on [n1 n2 n3]: pending"},
		{plan(7, "cancelling", 0, step("move slots [0,512) 1→4", "rolling back", 1, 0, 0, 0)),
			"plan 7 cancelling: step 1/1 move slots [0,512) 1→4: rolling back, attempt 1"},
		{plan(7, "done", 2, add, add), "plan 7 done: 2/2 steps"},
		{&quoratev1.PlanStatus{Id: 8, State: "failed", Error: "group 4: no leader"}, "plan 8 failed: group 4: no leader"},
		{&quoratev1.PlanStatus{Id: 9, State: "cancelled"}, "plan 9 cancelled"},
	} {
		if got := planProgress(tc.p); got != tc.want {
			t.Errorf("planProgress:\n got %q\nwant %q", got, tc.want)
		}
	}
}

func TestWritePlans(t *testing.T) {
	var b strings.Builder
	plans := []*quoratev1.PlanStatus{
		{Id: 3, Kind: "add-group", State: "failed", StepsDone: 0, Steps: []*quoratev1.PlanStepStatus{step("add group 4", "pending", 3, 0, 0, 0)},
			Summary: "add group 4", Error: "no node has room"},
		plan(12, "running", 1, step("add group 5", "done", 1, 0, 0, 0), step("move slots [2048,4096) 2→5", "copying", 1, 900, 2048, 2)),
		{Id: 13, Kind: "move-slots", State: "done", StepsDone: 1, Steps: []*quoratev1.PlanStepStatus{step("move slots [0,1) 1→2", "done", 1, 4, 100, 1)},
			Summary: "move 1 slot 1→2"},
	}
	if err := writePlans(&b, plans); err != nil {
		t.Fatal(err)
	}
	lines := strings.Split(strings.TrimRight(b.String(), "\n"), "\n")
	if len(lines) != 6 {
		t.Fatalf("want a header, 3 rows, an error line and a step line:\n%s", b.String())
	}
	wantFields := [][]string{
		{"ID", "KIND", "STATE", "STEPS", "AGE", "SUMMARY"},
		{"3", "add-group", "failed", "0/1", "-", "add", "group", "4"},
		{"error:", "no", "node", "has", "room"},
		{"12", "move-slots", "running", "1/2", "1m15s", "move", "512", "slots", "1→3"},
		{"step", "2/2", "move", "slots", "[2048,4096)", "2→5:", "copying,", "attempt", "1,", "900", "records,", "2.0", "KiB,", "2", "chunks"},
		{"13", "move-slots", "done", "1/1", "-", "move", "1", "slot", "1→2"},
	}
	for i, want := range wantFields {
		if got := strings.Fields(lines[i]); strings.Join(got, " ") != strings.Join(want, " ") {
			t.Errorf("line %d: %q, want fields %q", i, lines[i], want)
		}
	}
	// The summary column lines up across the rows, and the step and error
	// lines sit under it.
	col := strings.Index(lines[0], "SUMMARY")
	for _, i := range []int{1, 3, 5} {
		if !strings.HasPrefix(lines[i][col:], "add") && !strings.HasPrefix(lines[i][col:], "move") {
			t.Errorf("line %d: summary not in the SUMMARY column (%d):\n%s", i, col, b.String())
		}
	}
	for _, i := range []int{2, 4} {
		if strings.TrimSpace(lines[i][:col]) != "" || !strings.HasPrefix(lines[i][col:], "  ") {
			t.Errorf("line %d is not indented under SUMMARY:\n%s", i, b.String())
		}
	}
}

func TestWriteRunningPlans(t *testing.T) {
	var b strings.Builder
	if err := writeRunningPlans(&b, []*quoratev1.PlanStatus{plan(1, "done", 0), plan(2, "failed", 0)}); err != nil || b.Len() != 0 {
		t.Fatalf("no running plan: wrote %q, %v; want nothing", b.String(), err)
	}
	err := writeRunningPlans(&b, []*quoratev1.PlanStatus{
		plan(1, "done", 0),
		plan(2, "cancelling", 0, step("move slots [0,512) 1→3", "rolling back", 1, 0, 0, 0)),
		plan(3, "running", 0, step("move slots [0,512) 1→3", "freezing", 1, 0, 0, 0)),
	})
	if err != nil {
		t.Fatal(err)
	}
	out := b.String()
	if !strings.HasPrefix(out, "\n2 running plans\nID ") || strings.Contains(out, "\n1 ") ||
		!strings.Contains(out, "\n2 ") || !strings.Contains(out, "rolling back") || !strings.Contains(out, "freezing") {
		t.Errorf("want plans 2 and 3 with their steps after a summary line:\n%s", out)
	}
}

func TestWriteClusterStatusWithoutPlansIsUnchanged(t *testing.T) {
	s := &quoratev1.ClusterStatusResponse{AnsweredBy: "a", LeaderId: "a", Members: []*quoratev1.MemberStatus{member("a")}}
	var before, after strings.Builder
	if err := writeClusterStatus(&before, s); err != nil {
		t.Fatal(err)
	}
	after.WriteString(before.String())
	if err := writeRunningPlans(&after, nil); err != nil {
		t.Fatal(err)
	}
	if before.String() != after.String() {
		t.Errorf("no plans changed the status:\n%s\nvs\n%s", before.String(), after.String())
	}
}

func TestPlanWatcher(t *testing.T) {
	copying := func(records uint64) *quoratev1.PlanStatus {
		return plan(5, "running", 0, step("move slots [0,512) 1→3", "copying", 1, records, records*10, 1))
	}
	w := &planWatcher{} // the newest plan
	older := plan(4, "done", 0)
	answers := []struct {
		plans    []*quoratev1.PlanStatus
		line     string // "" for none; else a substring
		over     bool
		errNames string // "" for no error
	}{
		{[]*quoratev1.PlanStatus{older, copying(10)}, "step 1/1 move slots [0,512) 1→3: copying, attempt 1, 10 records", false, ""},
		{[]*quoratev1.PlanStatus{older, copying(10)}, "", false, ""}, // unchanged: no line
		{[]*quoratev1.PlanStatus{older, copying(20)}, "20 records, 200 B", false, ""},
		{[]*quoratev1.PlanStatus{plan(5, "done", 1, step("move slots [0,512) 1→3", "done", 1, 20, 200, 1)), plan(6, "running", 0)}, "plan 5 done: 1/1 step", true, ""},
	}
	for i, a := range answers {
		line, over, err := w.observe(a.plans)
		if (a.line == "") != (line == "") || !strings.Contains(line, a.line) {
			t.Errorf("answer %d: line %q, want %q", i, line, a.line)
		}
		if over != a.over || (err != nil) != (a.errNames != "") {
			t.Errorf("answer %d: over %v, err %v; want %v, %q", i, over, err, a.over, a.errNames)
		}
	}
	if w.id != 5 {
		t.Errorf("watched plan %d, want 5 (the newest when the watch began)", w.id)
	}

	for _, tc := range []struct {
		w     *planWatcher
		plans []*quoratev1.PlanStatus
		names []string
	}{
		{&planWatcher{}, nil, []string{"no plan"}},
		{&planWatcher{id: 9, chosen: true}, []*quoratev1.PlanStatus{older}, []string{"plan 9", "not listed"}},
		{&planWatcher{id: 4, chosen: true}, []*quoratev1.PlanStatus{{Id: 4, State: "failed", Error: "group 3 lost its leader"}}, []string{"plan 4 failed", "group 3 lost its leader"}},
		{&planWatcher{id: 4, chosen: true}, []*quoratev1.PlanStatus{{Id: 4, State: "cancelled"}}, []string{"plan 4 cancelled"}},
	} {
		_, over, err := tc.w.observe(tc.plans)
		if !over {
			t.Errorf("%v: the watch goes on, want it over", tc.plans)
		}
		wantErrNaming(t, err, tc.names...)
	}
	// Cancelling is not the end: the rollback goes on.
	if _, over, err := (&planWatcher{id: 4, chosen: true}).observe([]*quoratev1.PlanStatus{plan(4, "cancelling", 0)}); over || err != nil {
		t.Errorf("cancelling: over %v, %v; want the watch to go on", over, err)
	}
}

func TestPlanFmtBytesAndAge(t *testing.T) {
	for n, want := range map[uint64]string{0: "0 B", 1023: "1023 B", 1024: "1.0 KiB", 1536: "1.5 KiB", 1<<20 - 1: "1.0 MiB", 5 << 30: "5.0 GiB", 1<<64 - 1: "16.0 EiB"} {
		if got := fmtBytes(n); got != want {
			t.Errorf("fmtBytes(%d) = %q, want %q", n, got, want)
		}
	}
	for d, want := range map[time.Duration]string{0: "0s", 59*time.Second + 999*time.Millisecond: "59s", 187 * time.Second: "3m07s",
		2*time.Hour + 5*time.Minute + 9*time.Second: "2h05m", 76 * time.Hour: "3d04h"} {
		if got := fmtAge(d, true); got != want {
			t.Errorf("fmtAge(%v) = %q, want %q", d, got, want)
		}
	}
	if got := fmtAge(0, false); got != "-" {
		t.Errorf("fmtAge(unset) = %q, want -", got)
	}
}

// fakeAdmin is an AdminService whose plan answers a test scripts; it records
// the requests that start or cancel plans.
type fakeAdmin struct {
	quoratev1connect.UnimplementedAdminServiceHandler
	status *quoratev1.ClusterStatusResponse
	plans  func(n int) ([]*quoratev1.PlanStatus, error) // n counts from 1; nil: unimplemented
	start  *quoratev1.PlanStatus                        // the answer to every request starting or cancelling a plan

	mu        sync.Mutex
	listCalls int
	requests  []proto.Message
}

func (f *fakeAdmin) ClusterStatus(context.Context, *connect.Request[quoratev1.ClusterStatusRequest]) (*connect.Response[quoratev1.ClusterStatusResponse], error) {
	return connect.NewResponse(f.status), nil
}

func (f *fakeAdmin) ListPlans(context.Context, *connect.Request[quoratev1.ListPlansRequest]) (*connect.Response[quoratev1.ListPlansResponse], error) {
	f.mu.Lock()
	f.listCalls++
	n := f.listCalls
	f.mu.Unlock()
	if f.plans == nil {
		return nil, connect.NewError(connect.CodeUnimplemented, errors.New("not yet"))
	}
	plans, err := f.plans(n)
	if err != nil {
		return nil, err
	}
	return connect.NewResponse(&quoratev1.ListPlansResponse{Plans: plans}), nil
}

func (f *fakeAdmin) started(req proto.Message) (*connect.Response[quoratev1.PlanResponse], error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.requests = append(f.requests, proto.Clone(req))
	return connect.NewResponse(&quoratev1.PlanResponse{Plan: f.start}), nil
}

func (f *fakeAdmin) MoveSlots(_ context.Context, req *connect.Request[quoratev1.MoveSlotsRequest]) (*connect.Response[quoratev1.PlanResponse], error) {
	return f.started(req.Msg)
}

func (f *fakeAdmin) AddGroup(_ context.Context, req *connect.Request[quoratev1.AddGroupRequest]) (*connect.Response[quoratev1.PlanResponse], error) {
	return f.started(req.Msg)
}

func (f *fakeAdmin) SplitGroup(_ context.Context, req *connect.Request[quoratev1.SplitGroupRequest]) (*connect.Response[quoratev1.PlanResponse], error) {
	return f.started(req.Msg)
}

func (f *fakeAdmin) CancelPlan(_ context.Context, req *connect.Request[quoratev1.CancelPlanRequest]) (*connect.Response[quoratev1.PlanResponse], error) {
	return f.started(req.Msg)
}

// received returns the requests f recorded and its count of ListPlans calls.
func (f *fakeAdmin) received() ([]proto.Message, int) {
	f.mu.Lock()
	defer f.mu.Unlock()
	return append([]proto.Message(nil), f.requests...), f.listCalls
}

func serveFakeAdmin(t *testing.T, f *fakeAdmin) string {
	t.Helper()
	_, h := quoratev1connect.NewAdminServiceHandler(f)
	return serveHandler(t, h, false).URL
}

// answers scripts ListPlans: the nth call gets the nth answer, later calls
// the last.
func answers(list ...func() ([]*quoratev1.PlanStatus, error)) func(int) ([]*quoratev1.PlanStatus, error) {
	return func(n int) ([]*quoratev1.PlanStatus, error) { return list[min(n, len(list))-1]() }
}

func plansAre(plans ...*quoratev1.PlanStatus) func() ([]*quoratev1.PlanStatus, error) {
	return func() ([]*quoratev1.PlanStatus, error) { return plans, nil }
}

func TestAdminStatusListsRunningPlans(t *testing.T) {
	cs := &quoratev1.ClusterStatusResponse{AnsweredBy: "a", LeaderId: "a", Members: []*quoratev1.MemberStatus{member("a"), member("b")},
		ShardMap: &quoratev1.ShardMapStatus{Epoch: 4, Groups: []*quoratev1.ShardGroupStatus{{Id: 1, Replicas: []string{"a", "b"}, Slots: 4096}}}}
	var bare strings.Builder
	if err := writeClusterStatus(&bare, cs); err != nil {
		t.Fatal(err)
	}
	running := plan(7, "running", 0, step("move slots [0,512) 1→2", "copying", 1, 10, 4096, 1))
	for _, tc := range []struct {
		name      string
		plans     func(int) ([]*quoratev1.PlanStatus, error)
		addition  string // after the bare status
		errNaming string
	}{
		{"unimplemented", nil, "", ""},
		{"none running", answers(plansAre(plan(6, "done", 0))), "", ""},
		{"running", answers(plansAre(plan(6, "done", 0), running)), "\n1 running plan\nID ", ""},
		{"failing", answers(func() ([]*quoratev1.PlanStatus, error) {
			return nil, connect.NewError(connect.CodeInternal, errors.New("boom"))
		}), "", "boom"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			srv := serveFakeAdmin(t, &fakeAdmin{status: cs, plans: tc.plans})
			out, errOut, err := runCLI(t, "admin", "status", "--server", srv)
			if err != nil {
				t.Fatal(err)
			}
			if !strings.HasPrefix(out, bare.String()) || !strings.HasPrefix(out[len(bare.String()):], tc.addition) ||
				(tc.addition == "") != (len(out) == bare.Len()) {
				t.Errorf("status:\n%s\nwant the status without plans followed by %q", out, tc.addition)
			}
			if tc.addition != "" && !strings.Contains(out, "step 1/1 move slots [0,512) 1→2: copying, attempt 1, 10 records, 4.0 KiB, 1 chunk") {
				t.Errorf("status lacks the running step:\n%s", out)
			}
			if (tc.errNaming == "") != (errOut == "") || !strings.Contains(errOut, tc.errNaming) {
				t.Errorf("stderr %q, want it to name %q", errOut, tc.errNaming)
			}
		})
	}
	// -o json is the ClusterStatusResponse alone, as before.
	var got quoratev1.ClusterStatusResponse
	mustRunJSON(t, &got, "admin", "status", "--server", serveFakeAdmin(t, &fakeAdmin{status: cs, plans: answers(plansAre(running))}), "-o", "json")
	if !proto.Equal(&got, cs) {
		t.Errorf("status -o json: %v, want %v", &got, cs)
	}
}

// TestSlotsMoveWaitFollowsThePlan: --wait asks again after an unavailable
// answer, prints each change and exits 0 once the plan is done.
func TestSlotsMoveWaitFollowsThePlan(t *testing.T) {
	mv := func(phase string, records uint64) *quoratev1.PlanStepStatus {
		return step("move slots [0,512) 1→3", phase, 1, records, records*100, 1)
	}
	f := &fakeAdmin{start: plan(7, "running", 0, mv("pending", 0)), plans: answers(
		func() ([]*quoratev1.PlanStatus, error) {
			return nil, connect.NewError(connect.CodeUnavailable, errors.New("no meta leader"))
		},
		plansAre(plan(6, "done", 0), plan(7, "running", 0, mv("copying", 30))),
		plansAre(plan(6, "done", 0), plan(7, "done", 1, mv("done", 60))),
	)}
	srv := serveFakeAdmin(t, f)
	out, errOut, err := runCLI(t, "admin", "slots", "move", "--server", srv, "--from", "1", "--to", "3", "--range", "0-512", "--wait")
	if err != nil {
		t.Fatalf("slots move --wait: %v\nstderr: %s", err, errOut)
	}
	if reqs, _ := f.received(); len(reqs) != 1 || !proto.Equal(reqs[0], &quoratev1.MoveSlotsRequest{From: 1, To: 3, Start: 0, End: 512}) {
		t.Errorf("requests %v, want one MoveSlots of [0,512) 1→3", reqs)
	}
	lines := strings.Split(strings.TrimSpace(out), "\n")
	want := []string{"plan 7 started: move 512 slots 1→3", "plan 7 running: step 1/1 move slots [0,512) 1→3: copying, attempt 1, 30 records, 2.9 KiB, 1 chunk", "plan 7 done: 1/1 step"}
	if len(lines) != len(want) {
		t.Fatalf("output:\n%s\nwant %d lines", out, len(want))
	}
	for i, w := range want {
		if !strings.HasSuffix(lines[i], w) {
			t.Errorf("line %d: %q, want it to end with %q", i, lines[i], w)
		}
	}
	if !strings.Contains(errOut, "no meta leader (asking again)") {
		t.Errorf("stderr %q, want the unavailable answer", errOut)
	}
}

func TestPlanWatchEnds(t *testing.T) {
	for _, tc := range []struct {
		name  string
		args  []string
		plans func(int) ([]*quoratev1.PlanStatus, error)
		names []string // the error must name each; none: no error
	}{
		{"done", nil, answers(plansAre(plan(3, "done", 0), plan(2, "running", 0))), nil},
		{"failed", []string{"3"}, answers(plansAre(&quoratev1.PlanStatus{Id: 3, State: "failed", Error: "group 2 lost its leader"})), []string{"plan 3 failed", "group 2 lost its leader"}},
		{"cancelled", nil, answers(plansAre(&quoratev1.PlanStatus{Id: 3, State: "cancelled"})), []string{"plan 3 cancelled"}},
		{"not listed", []string{"4"}, answers(plansAre(plan(3, "done", 0))), []string{"plan 4", "not listed"}},
		{"unimplemented", nil, nil, []string{"ListPlans", "unimplemented"}},
		{"invalid", nil, answers(func() ([]*quoratev1.PlanStatus, error) {
			return nil, connect.NewError(connect.CodeInvalidArgument, errors.New("bad request"))
		}), []string{"ListPlans", "bad request"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			f := &fakeAdmin{plans: tc.plans}
			_, _, err := runCLI(t, append([]string{"admin", "plan", "watch", "--server", serveFakeAdmin(t, f)}, tc.args...)...)
			if tc.names == nil {
				if err != nil {
					t.Fatal(err)
				}
			} else {
				wantErrNaming(t, err, tc.names...)
			}
			if _, calls := f.received(); calls != 1 {
				t.Errorf("%d ListPlans calls, want 1 (the first answer ends the watch)", calls)
			}
		})
	}
}

func TestGroupAndPlanCommandsSendTheirRequests(t *testing.T) {
	started := plan(9, "running", 0, step("add group 4 on [a b c]", "pending", 0, 0, 0, 0))
	for _, tc := range []struct {
		args []string
		want proto.Message
		out  string
	}{
		{[]string{"admin", "group", "add", "--replicas", "a,b,c"}, &quoratev1.AddGroupRequest{Replicas: []string{"a", "b", "c"}}, "plan 9 started: move 512 slots 1→3\nfollow it with: quorate admin plan watch 9\n"},
		{[]string{"admin", "group", "add"}, &quoratev1.AddGroupRequest{}, "plan 9 started"},
		{[]string{"admin", "group", "split", "2"}, &quoratev1.SplitGroupRequest{Group: 2}, "plan 9 started"},
		{[]string{"admin", "slots", "move", "--from", "2", "--to", "1", "--count", "64"}, &quoratev1.MoveSlotsRequest{From: 2, To: 1, Count: 64}, "plan 9 started"},
		{[]string{"admin", "plan", "cancel", "9"}, &quoratev1.CancelPlanRequest{Id: 9}, "plan 9 running: step 1/1 add group 4 on [a b c]: pending\n"},
	} {
		f := &fakeAdmin{start: started}
		out, _, err := runCLI(t, append(tc.args, "--server", serveFakeAdmin(t, f))...)
		if err != nil {
			t.Errorf("%v: %v", tc.args, err)
			continue
		}
		if reqs, _ := f.received(); len(reqs) != 1 || !proto.Equal(reqs[0], tc.want) {
			t.Errorf("%v: requests %v, want %v", tc.args, reqs, tc.want)
		}
		if !strings.HasPrefix(out, tc.out) {
			t.Errorf("%v: output %q, want it to begin with %q", tc.args, out, tc.out)
		}
		// -o json prints the answer.
		var resp quoratev1.PlanResponse
		mustRunJSON(t, &resp, append(tc.args, "--server", serveFakeAdmin(t, f), "-o", "json")...)
		if !proto.Equal(resp.GetPlan(), started) {
			t.Errorf("%v -o json: %v, want %v", tc.args, &resp, started)
		}
	}
}

func TestPlanList(t *testing.T) {
	plans := []*quoratev1.PlanStatus{plan(6, "done", 0), plan(7, "running", 0, step("move slots [0,512) 1→3", "freezing", 1, 0, 0, 0))}
	srv := serveFakeAdmin(t, &fakeAdmin{plans: answers(plansAre(plans...))})
	out, _, err := runCLI(t, "admin", "plan", "list", "--server", srv)
	if err != nil {
		t.Fatal(err)
	}
	var want strings.Builder
	if err := writePlans(&want, plans); err != nil {
		t.Fatal(err)
	}
	if out != want.String() {
		t.Errorf("plan list:\n%s\nwant\n%s", out, want.String())
	}
	var got quoratev1.ListPlansResponse
	mustRunJSON(t, &got, "admin", "plan", "list", "--server", srv, "-o", "json")
	if len(got.GetPlans()) != 2 || !proto.Equal(got.GetPlans()[1], plans[1]) {
		t.Errorf("plan list -o json: %v", &got)
	}
	srv = serveFakeAdmin(t, &fakeAdmin{plans: answers(plansAre())})
	if out, _, err := runCLI(t, "admin", "plan", "list", "--server", srv); err != nil || !strings.HasPrefix(out, "no plans") {
		t.Errorf("plan list of none: %q, %v", out, err)
	}
}

func TestRebalanceText(t *testing.T) {
	r := &quoratev1.RebalanceResponse{MapEpoch: 7, Changes: []string{"group 1: replica n1 → n4", "group 2: leader n2 → n5"}}
	got := rebalanceText(r, true)
	want := "would make 2 changes (dry run; shard map still at epoch 7):\n  group 1: replica n1 → n4\n  group 2: leader n2 → n5\n"
	if got != want {
		t.Fatalf("dry run:\n%s\nwant:\n%s", got, want)
	}
	if got := rebalanceText(&quoratev1.RebalanceResponse{MapEpoch: 3}, false); got != "balanced already: nothing to change (shard map epoch 3)\n" {
		t.Fatalf("balanced: %q", got)
	}
	if got := rebalanceText(&quoratev1.RebalanceResponse{MapEpoch: 8, Changes: []string{"x"}}, false); got != "1 change (shard map epoch 8):\n  x\n" {
		t.Fatalf("applied: %q", got)
	}
}
