package admission_test

import (
	"fmt"
	"math"
	"testing"
	"time"

	"github.com/quorate/quorate/admission"
)

// t0 is an arbitrary, realistic start time (2023-11-14, Unix nanos).
const t0 = int64(1_700_000_000_000_000_000)

// tenPerSecond is 10/s with bursts of 5: T = 100ms, capacity 5.
func tenPerSecond() admission.Policy {
	return admission.Policy{Name: "ten", Algorithm: admission.AlgorithmTokenBucket,
		Limit: 10, Period: time.Second, Burst: 5}
}

// decide calls DecideTokenBucket after checking the policy and the cost, as
// callers must.
func decide(t testing.TB, p admission.Policy, b admission.Bucket, cost, now int64) (admission.Bucket, admission.Decision) {
	t.Helper()
	if err := p.Validate(); err != nil {
		t.Fatalf("invalid test policy: %v", err)
	}
	if err := p.CheckRequest("k", cost); err != nil {
		t.Fatalf("invalid test cost: %v", err)
	}
	return admission.DecideTokenBucket(p, b, cost, now)
}

func wantDecision(t testing.TB, got, want admission.Decision) {
	t.Helper()
	if got != want {
		t.Fatalf("decision = %+v\n         want %+v", got, want)
	}
}

const ms = time.Millisecond

func TestNewBucketStartsFull(t *testing.T) {
	p := tenPerSecond()
	b, d := decide(t, p, admission.Bucket{}, 1, t0)
	wantDecision(t, d, admission.Decision{Allowed: true, Limit: 5, Remaining: 4, ResetAfter: 100 * ms})
	if got, want := b.TAT, t0+int64(100*ms); got != want {
		t.Errorf("TAT = %d, want %d", got, want)
	}
	// A full-capacity request on a new bucket succeeds too.
	_, d = decide(t, p, admission.Bucket{}, 5, t0)
	wantDecision(t, d, admission.Decision{Allowed: true, Limit: 5, Remaining: 0, ResetAfter: 500 * ms})
}

func TestRequestsConsumeUntilEmpty(t *testing.T) {
	p := tenPerSecond()
	var b admission.Bucket
	var d admission.Decision
	for i := int64(1); i <= 5; i++ { // all at the same instant
		b, d = decide(t, p, b, 1, t0)
		wantDecision(t, d, admission.Decision{Allowed: true, Limit: 5, Remaining: 5 - i, ResetAfter: time.Duration(i) * 100 * ms})
	}
	// The last token went; the next request fails and waits one interval.
	before := b
	b, d = decide(t, p, b, 1, t0)
	wantDecision(t, d, admission.Decision{Allowed: false, Limit: 5, Remaining: 0, ResetAfter: 500 * ms, RetryAfter: 100 * ms})
	if b != before {
		t.Errorf("denial changed the bucket: %+v, was %+v", b, before)
	}
}

func TestWeightedCost(t *testing.T) {
	p := tenPerSecond()
	b, d := decide(t, p, admission.Bucket{}, 3, t0)
	wantDecision(t, d, admission.Decision{Allowed: true, Limit: 5, Remaining: 2, ResetAfter: 300 * ms})
	// 3 more do not fit in 2: denied, and exactly 100ms until one more refills.
	b2, d := decide(t, p, b, 3, t0)
	wantDecision(t, d, admission.Decision{Allowed: false, Limit: 5, Remaining: 2, ResetAfter: 300 * ms, RetryAfter: 100 * ms})
	if b2 != b {
		t.Errorf("denial changed the bucket: %+v, was %+v", b2, b)
	}
	// The last 2 fit exactly.
	_, d = decide(t, p, b, 2, t0)
	wantDecision(t, d, admission.Decision{Allowed: true, Limit: 5, Remaining: 0, ResetAfter: 500 * ms})
}

func TestRetryAfterIsExact(t *testing.T) {
	p := tenPerSecond()
	b, _ := decide(t, p, admission.Bucket{}, 5, t0)
	now := t0 + int64(30*ms)
	_, d := decide(t, p, b, 2, now)
	if d.Allowed || d.RetryAfter != 170*ms {
		t.Fatalf("cost 2 on an empty bucket 30ms later: %+v, want denied with RetryAfter 170ms", d)
	}
	if _, d := decide(t, p, b, 2, now+int64(d.RetryAfter)-1); d.Allowed {
		t.Errorf("allowed 1ns before RetryAfter: %+v", d)
	}
	if _, d := decide(t, p, b, 2, now+int64(d.RetryAfter)); !d.Allowed {
		t.Errorf("denied at RetryAfter: %+v", d)
	}
}

func TestRefillsOverTime(t *testing.T) {
	p := tenPerSecond()
	b, _ := decide(t, p, admission.Bucket{}, 5, t0)
	// 250ms later 2.5 units have come back; after spending 1, 1 whole is left.
	b, d := decide(t, p, b, 1, t0+int64(250*ms))
	wantDecision(t, d, admission.Decision{Allowed: true, Limit: 5, Remaining: 1, ResetAfter: 350 * ms})
	// At ExpiresAt it is full again.
	if got, want := b.ExpiresAt(), t0+int64(600*ms); got != want {
		t.Fatalf("ExpiresAt = %d, want %d", got, want)
	}
	_, d = decide(t, p, b, 1, b.ExpiresAt())
	wantDecision(t, d, admission.Decision{Allowed: true, Limit: 5, Remaining: 4, ResetAfter: 100 * ms})
}

func TestNeverExceedsCapacity(t *testing.T) {
	p := tenPerSecond()
	b, _ := decide(t, p, admission.Bucket{}, 1, t0)
	for _, idle := range []time.Duration{time.Second, time.Hour, 366 * day, 100 * 366 * day} {
		_, d := decide(t, p, b, 1, t0+int64(idle))
		wantDecision(t, d, admission.Decision{Allowed: true, Limit: 5, Remaining: 4, ResetAfter: 100 * ms})
	}
}

func TestSmoothingWithBurstOne(t *testing.T) {
	p := admission.Policy{Name: "provider-webhooks", Algorithm: "token_bucket", Limit: 20, Period: time.Second, Burst: 1}
	b, d := decide(t, p, admission.Bucket{}, 1, t0)
	wantDecision(t, d, admission.Decision{Allowed: true, Limit: 1, Remaining: 0, ResetAfter: 50 * ms})
	_, d = decide(t, p, b, 1, t0+int64(50*ms)-1)
	wantDecision(t, d, admission.Decision{Allowed: false, Limit: 1, Remaining: 0, ResetAfter: 1, RetryAfter: 1})
	_, d = decide(t, p, b, 1, t0+int64(50*ms))
	wantDecision(t, d, admission.Decision{Allowed: true, Limit: 1, Remaining: 0, ResetAfter: 50 * ms})
}

func TestUnevenPeriodRoundsTowardStrict(t *testing.T) {
	// 3 per 10ms+1ns: T = ceil(10000001/3) = 3333334ns, so 3 units take
	// 10000002ns to refill, 1ns more than the period.
	p := admission.Policy{Name: "odd", Algorithm: "token_bucket", Limit: 3, Period: 10*ms + 1}
	T := p.EmissionInterval()
	if T != 3333334 {
		t.Fatalf("EmissionInterval = %d, want 3333334", T)
	}
	b, _ := decide(t, p, admission.Bucket{}, 3, t0)
	_, d := decide(t, p, b, 3, t0+int64(p.Period))
	if d.Allowed {
		t.Errorf("3 more allowed one period later, but T rounds up so the bucket is not yet full: %+v", d)
	}
	if _, d := decide(t, p, b, 3, t0+3*T); !d.Allowed {
		t.Errorf("denied after 3×T: %+v", d)
	}
}

func TestPolicyShrunk(t *testing.T) {
	// A bucket left by a larger policy can sit further ahead than the new
	// capacity: it is denied with the exact wait, and Remaining stays 0.
	big := admission.Policy{Name: "p", Algorithm: "token_bucket", Limit: 10, Period: time.Second, Burst: 50}
	b, _ := decide(t, big, admission.Bucket{}, 50, t0) // TAT = t0 + 5s
	small := tenPerSecond()                            // capacity 5: window 500ms
	b2, d := decide(t, small, b, 1, t0)
	wantDecision(t, d, admission.Decision{Allowed: false, Limit: 5, Remaining: 0, ResetAfter: 5 * time.Second, RetryAfter: 4600 * ms})
	if b2 != b {
		t.Errorf("denial changed the bucket")
	}
}

func TestTotalAndFailClosed(t *testing.T) {
	p := tenPerSecond()
	full := admission.Bucket{}
	tests := []struct {
		name string
		p    admission.Policy
		b    admission.Bucket
		cost int64
		now  int64
		want admission.Decision
	}{
		{"cost above capacity", p, full, 6, t0, admission.Decision{Limit: 5, Remaining: 5, RetryAfter: admission.NeverRetry}},
		{"cost 0", p, full, 0, t0, admission.Decision{Limit: 5, Remaining: 5, RetryAfter: admission.NeverRetry}},
		{"cost -1", p, full, -1, t0, admission.Decision{Limit: 5, Remaining: 5, RetryAfter: admission.NeverRetry}},
		{"cost MinInt64", p, full, math.MinInt64, t0, admission.Decision{Limit: 5, Remaining: 5, RetryAfter: admission.NeverRetry}},
		{"invalid policy", admission.Policy{Limit: 1}, full, 1, t0, admission.Decision{RetryAfter: admission.NeverRetry}},
		{"policy overflowing burst × T", admission.Policy{Limit: 1, Period: 366 * day, Burst: 1e9}, full, 1, t0, admission.Decision{RetryAfter: admission.NeverRetry}},
		{"TAT at the end of time, now at the start", p, admission.Bucket{TAT: math.MaxInt64}, 1, math.MinInt64,
			admission.Decision{Limit: 5, ResetAfter: admission.NeverRetry, RetryAfter: admission.NeverRetry}},
		{"new TAT would pass MaxInt64", p, full, 1, math.MaxInt64 - int64(100*ms) + 1,
			admission.Decision{Limit: 5, Remaining: 5, RetryAfter: admission.NeverRetry}},
		{"new TAT exactly MaxInt64", p, full, 1, math.MaxInt64 - int64(100*ms),
			admission.Decision{Allowed: true, Limit: 5, Remaining: 4, ResetAfter: 100 * ms}},
		{"negative now, old TAT", p, admission.Bucket{TAT: math.MinInt64}, 1, -1,
			admission.Decision{Allowed: true, Limit: 5, Remaining: 4, ResetAfter: 100 * ms}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			b, d := admission.DecideTokenBucket(tc.p, tc.b, tc.cost, tc.now)
			wantDecision(t, d, tc.want)
			if !d.Allowed && b != tc.b {
				t.Errorf("denial changed the bucket: %+v, was %+v", b, tc.b)
			}
			if d.Allowed && b.TAT != tc.now+int64(d.ResetAfter) {
				t.Errorf("TAT = %d, want now+ResetAfter = %d", b.TAT, tc.now+int64(d.ResetAfter))
			}
		})
	}
}

func ExampleDecideTokenBucket() {
	p := admission.Policy{Name: "api-free", Algorithm: admission.AlgorithmTokenBucket,
		Limit: 60, Period: time.Minute, Burst: 20, MaxCost: 10}
	if err := p.Validate(); err != nil {
		panic(err)
	}
	now := int64(1_700_000_000_000_000_000) // from the Raft log, never the clock
	if err := p.CheckRequest("tenant:acme", 10); err != nil {
		panic(err)
	}
	var b admission.Bucket // absent state: a full bucket
	b, d := admission.DecideTokenBucket(p, b, 10, now)
	fmt.Println(d.Allowed, d.Remaining, d.ResetAfter)
	b, d = admission.DecideTokenBucket(p, b, 10, now)
	fmt.Println(d.Allowed, d.Remaining, d.ResetAfter)
	_, d = admission.DecideTokenBucket(p, b, 10, now)
	fmt.Println(d.Allowed, d.Remaining, d.RetryAfter)
	// Output:
	// true 10 10s
	// true 0 20s
	// false 0 10s
}

func BenchmarkDecideTokenBucket(b *testing.B) {
	p := apiFree()
	if err := p.Validate(); err != nil {
		b.Fatal(err)
	}
	var bucket admission.Bucket
	now := t0
	allowed := 0
	for b.Loop() {
		var d admission.Decision
		bucket, d = admission.DecideTokenBucket(p, bucket, 1, now)
		if d.Allowed {
			allowed++
		}
		now += int64(500 * ms) // half the emission interval: a mix of allows and denials
	}
	if b.N > 100 && allowed == 0 {
		b.Fatal("nothing allowed")
	}
}
