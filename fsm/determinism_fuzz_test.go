package fsm_test

import (
	"bytes"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/quorate/quorate/admission"
	"github.com/quorate/quorate/fsm"
	raftcmdv1 "github.com/quorate/quorate/proto/quorate/raftcmd/v1"
)

// fuzzEntries turns fuzz bytes into a log: the first byte picks the restore
// point, then each 4 bytes (op, key, cost, time) make one entry after an
// initial PutPolicies. An op of 128 and above gives an Admit a request ID:
// the caller from op's bit 5, the ID from the cost byte's high bits, so the
// same 4 bytes again are a retry and another cost byte with the same high
// bits a reuse. op%32 == 31 is an Expire.
func fuzzEntries(tb testing.TB, data []byte) (entries [][]byte, k int) {
	tb.Helper()
	now := t0
	entries = [][]byte{encode(tb, initialPolicies(now))}
	if len(data) == 0 {
		return entries, 0
	}
	split, data := int(data[0]), data[1:]
	for ; len(data) >= 4; data = data[4:] {
		op, kb, cb, tb8 := data[0], data[1], data[2], int8(data[3])
		switch tb8 {
		case 127:
			now += int64(25 * time.Hour)
		case -128:
			now -= int64(time.Hour)
		default:
			now += int64(tb8) * int64(time.Millisecond)
		}
		var env *raftcmdv1.Envelope
		switch op % 32 {
		case 0:
			name := policyNames[int(kb)%len(policyNames)]
			vs := policyVariants[name]
			ps := []admission.Policy{vs[int(kb)/len(policyNames)%len(vs)]}
			if cb%2 == 1 {
				ps = append(ps, invalidPolicies[int(cb/2)%len(invalidPolicies)])
			}
			env = putPoliciesEnv(now, ps...)
		case 1:
			env = registerNodeEnv(now, fmt.Sprintf("n%d", kb%4), fmt.Sprintf("r%d", cb), "api")
		case 31:
			env = expireEnv(now)
		default:
			policy := policyNames[int(op)%len(policyNames)]
			if op%32 == 2 {
				policy = "nope"
			}
			key := fmt.Sprintf("k%d", kb%64)
			switch kb {
			case 255:
				key = ""
			case 254:
				key = strings.Repeat("y", admission.MaxKeyBytes+1)
			}
			cost := int64(cb % 8)
			switch cb {
			case 255:
				cost = -1
			case 254:
				cost = 1_000_000
			}
			env = admitEnv(now, policy, key, cost)
			if op >= 128 {
				c := env.GetAdmit()
				c.Caller, c.RequestId = fmt.Sprint("c", op>>5&1), fmt.Sprint("r", cb>>3)
			}
		}
		entries = append(entries, encode(tb, env))
	}
	return entries, split % (len(entries) + 1)
}

func FuzzApplyDeterminism(f *testing.F) {
	f.Add([]byte{})
	f.Add([]byte{2, 3, 1, 1, 1, 3, 1, 1, 1, 3, 1, 1, 0})
	f.Add([]byte{5, 4, 7, 3, 10, 5, 7, 3, 10, 6, 7, 3, 127, 4, 7, 1, 0, 4, 8, 1, 0})
	f.Add([]byte{9, 0, 5, 1, 0, 0, 9, 3, 0, 3, 9, 7, 10, 1, 2, 3, 4, 2, 9, 1, 0, 7, 255, 1, 0, 7, 254, 1, 0})
	f.Add([]byte{1, 3, 1, 255, 0, 3, 1, 254, 0, 3, 1, 0, 0, 4, 9, 1, 128, 4, 9, 1, 128, 4, 9, 1, 5})
	f.Add(bytes.Repeat([]byte{3, 1, 2, 1}, 64))
	f.Add(append([]byte{200}, bytes.Repeat([]byte{4, 9, 1, 200, 3, 10, 1, 127, 0, 4, 0, 0}, 20)...))
	// Request IDs: retries, a reuse, another caller, Expire after 25h, a
	// retry decided afresh; "tiny" keeps entries for 2s.
	f.Add([]byte{3, 132, 5, 9, 10, 132, 5, 9, 10, 132, 5, 10, 10, 164, 5, 9, 10, 31, 0, 0, 127, 132, 5, 9, 10, 132, 5, 9, 0})
	f.Add(append([]byte{7, 131, 1, 9, 0, 131, 1, 9, 100}, bytes.Repeat([]byte{131, 1, 9, 120, 31, 0, 0, 120}, 12)...))
	// More distinct request IDs than MaxDedupeEntries, then their expiry.
	full := []byte{11}
	for i := range 20 {
		full = append(full, 132, byte(i), byte(8*i+1), 1)
	}
	f.Add(append(full, 31, 0, 0, 127, 132, 0, 1, 0, 132, 0, 1, 0))
	f.Fuzz(func(t *testing.T, data []byte) {
		entries, k := fuzzEntries(t, data)
		opts := fsm.Options{MaxBuckets: 40, MaxDedupeEntries: 16}
		a, aOuts := runAll(t, opts, entries)
		aSnap := snapshotBytes(t, a)
		checkRestoreAt(t, opts, entries, k, false, a, aOuts, aSnap)
		if testing.Short() {
			return
		}
		checkPersistStable(t, a)
		checkRestoreAt(t, opts, entries, len(entries)/2, true, a, aOuts, aSnap)
	})
}
