package jepsen

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"os/exec"
	"slices"
	"strings"
	"time"

	"connectrpc.com/connect"

	quoratev1 "github.com/quorate/quorate/proto/quorate/v1"
	"github.com/quorate/quorate/proto/quorate/v1/quoratev1connect"
)

// The recovery scenario (Options.Recovery, Nemesis.Recover): a cluster of
// three loses two nodes for good under the workloads and is rebuilt from
// the survivor with `quorate admin recover`, as the runbook in
// docs/operating.md ("Recovery from a lost majority") says.
//
// What recovery may lose is every entry the survivor never received:
// acknowledged decisions the two lost nodes committed between themselves.
// The scenario makes that set empty, so that the checkers need tolerate
// nothing: it kills the two one after the other, and kills the second only
// once the survivor holds everything committed. After the first loss the
// two left form the only majority, so every entry committed from then on
// is on the survivor; what the first lost node committed with the second
// before it died is on the second (and on whichever of the two leads each
// group: Raft's leader completeness), and the scenario waits until, in
// every group, both see one leader in one term on three polls in a row
// (100 ms or more apart) and, at the third, the survivor has applied the
// commit index the second node had at the second. The leader commits its term's first entry, which
// commits every entry before it, within a round trip of its election (the
// survivor is alive), so by the second poll its commit index covers them:
// that timing is the scenario's one assumption. A follower learns the
// commit index only with the next entry (a heartbeat does not carry it),
// so the scenario writes to every group between polls: a policy change in
// the meta group, Peeks (which go through the log) of probe keys in the
// data groups. Entries the survivor received but that were never committed
// become committed by the recovery: their calls ended unknown (never
// acknowledged), which the checkers already allow.

// RecoverySpare is how many spare node slots the recovery scenario joins.
const RecoverySpare = 2

// recoveryLead is how long the workloads run before the first loss.
const recoveryLead = 3 * time.Second

// recoveryStepWait bounds each step of the recovery scenario.
const recoveryStepWait = 60 * time.Second

// Recover runs the recovery scenario on a cluster of three members started
// with ClusterOptions.Spare ≥ RecoverySpare, while the workloads go on.
// Each step is recorded as a fault:
//
//  1. recover-lose (twice): a member other than the survivor (drawn from
//     seed) is withdrawn (never started again), killed with SIGKILL and
//     its data directory deleted; between the two, recover-catch-up waits
//     until the survivor holds every committed entry (see above);
//  2. recover-stop: the survivor is stopped with SIGTERM;
//  3. recover-run: `quorate admin recover --data-dir DIR --yes` runs on
//     its data directory as a process of its own (its output goes to the
//     node's log);
//  4. recover-start: the survivor starts again with its flags and leads
//     every group it hosts, the only voter of each;
//  5. recover-join (twice): a spare starts with --join to the survivor and
//     is listed answering;
//  6. recover-remove (twice): AdminService.RemoveNode with force (what
//     `quorate admin node remove ID --force` calls) takes a lost node out;
//  7. recover-whole: the members are the survivor and the two new nodes,
//     all answering, and every group has exactly them as voters.
//
// It returns the first error; the faults record how far it went.
func (n *Nemesis) Recover(ctx context.Context, c *Cluster, seed uint64) error {
	live := c.Live()
	if len(live) != 3 {
		return fmt.Errorf("recover: %d members, the scenario needs 3", len(live))
	}
	rng := rand.New(rand.NewPCG(seed, 0x7ec0))
	s := live[rng.IntN(len(live))]
	var lost []int
	for _, i := range live {
		if i != s {
			lost = append(lost, i)
		}
	}
	step := func(kind string, node int, do func() error) error {
		f := Fault{Kind: kind, Node: c.Nodes[node].ID, Start: time.Now()}
		err := do()
		n.record(finish(f, err))
		if err != nil {
			return fmt.Errorf("%s %s: %w", kind, f.Node, err)
		}
		return nil
	}
	probe := probePolicy(1)
	if err := ApplyPolicy(ctx, c, probe); err != nil {
		return err
	}
	if !sleepCtx(ctx, recoveryLead) {
		return ctx.Err()
	}
	if err := step("recover-lose", lost[0], func() error { return c.destroy(lost[0]) }); err != nil {
		return err
	}
	if err := step("recover-catch-up", s, func() error { return c.waitHoldsCommitted(ctx, s, lost[1]) }); err != nil {
		return err
	}
	if err := step("recover-lose", lost[1], func() error { return c.destroy(lost[1]) }); err != nil {
		return err
	}
	if err := step("recover-stop", s, func() error { return c.StopNode(s) }); err != nil {
		return err
	}
	if err := step("recover-run", s, func() error { return c.runRecover(ctx, s) }); err != nil {
		return err
	}
	if err := step("recover-start", s, func() error {
		if err := c.start(s); err != nil {
			return err
		}
		return c.waitSoleLeader(ctx, s)
	}); err != nil {
		return err
	}
	for range RecoverySpare {
		i, err := c.nextSpare()
		if err != nil {
			return err
		}
		if err := step("recover-join", i, func() error { return c.joinSpare(ctx, i, s) }); err != nil {
			return err
		}
	}
	for _, i := range lost {
		if err := step("recover-remove", i, func() error {
			return c.adminRetry(ctx, 30*time.Second, func(ctx context.Context, a quoratev1connect.AdminServiceClient) error {
				_, err := a.RemoveNode(ctx, connect.NewRequest(&quoratev1.RemoveNodeRequest{Id: c.Nodes[i].ID, Force: true}))
				return err
			})
		}); err != nil {
			return err
		}
	}
	return step("recover-whole", s, func() error {
		live := c.LiveIDs()
		return c.pollStatus(ctx, recoveryStepWait, func(st *quoratev1.ClusterStatusResponse) []string {
			return wholeProblems(st, live)
		})
	})
}

// recoveryProbe is the policy of the recovery scenario's probes.
const recoveryProbe = "jepsen-recovery-probe"

// probePolicy is recoveryProbe with limit n: a new limit is a new entry of
// the meta group.
func probePolicy(n int64) *quoratev1.Policy { return TokenBucketPolicy(recoveryProbe, n) }

// probe writes an entry to every group (very likely: a Peek of each of 16
// keys lands in its key's data group), each call bounded by a second; its
// errors do not matter.
func (c *Cluster) probe(ctx context.Context, round int64) {
	cctx, cancel := context.WithTimeout(ctx, time.Second)
	defer cancel()
	_ = ApplyPolicy(cctx, c, probePolicy(2+round))
	cc, err := c.NewClient("jepsen-recovery-probe")
	if err != nil {
		return
	}
	defer cc.Close()
	for k := range 16 {
		_, _ = cc.Peek(cctx, recoveryProbe, fmt.Sprintf("probe-%d", k))
	}
}

// destroy loses node i for good: out of the members (never started
// again), killed, its data directory deleted.
func (c *Cluster) destroy(i int) error {
	c.Withdraw(i)
	if err := c.Kill(i); err != nil {
		return err
	}
	return os.RemoveAll(c.Nodes[i].DataDir)
}

// waitHoldsCommitted waits, for up to recoveryStepWait, until node s holds
// every entry committed in every group it hosts, other being the only
// other node alive: in each group both see the same leader (one of them)
// in the same term on three polls in a row, and s has applied other's
// commit index of the second; between polls it writes to every group
// (probe).
func (c *Cluster) waitHoldsCommitted(ctx context.Context, s, other int) error {
	deadline := time.Now().Add(recoveryStepWait)
	type seen struct {
		leader string
		term   uint64
	}
	prev := map[uint32]seen{}
	polls := map[uint32]int{}         // consecutive polls that saw prev
	prevCommit := map[uint32]uint64{} // other's commit index, by group, at the earlier poll
	var last string
	for round := int64(0); ; round++ {
		err := func() error {
			ss, err := c.nodeStatus(ctx, s)
			if err != nil {
				return err
			}
			ost, err := c.nodeStatus(ctx, other)
			if err != nil {
				return err
			}
			og := map[uint32]*quoratev1.GroupState{}
			for _, g := range ost.GetGroups() {
				og[g.GetId()] = g
			}
			now, commit := map[uint32]seen{}, map[uint32]uint64{}
			var problems []string
			for _, g := range ss.GetGroups() {
				o := og[g.GetId()]
				switch {
				case o == nil:
					problems = append(problems, fmt.Sprintf("group %d: %s does not host it", g.GetId(), c.Nodes[other].ID))
				case g.GetLeaderId() == "" || g.GetLeaderId() != o.GetLeaderId() || g.GetTerm() != o.GetTerm() ||
					(g.GetLeaderId() != c.Nodes[s].ID && g.GetLeaderId() != c.Nodes[other].ID):
					problems = append(problems, fmt.Sprintf("group %d: leaders %q (term %d) and %q (term %d)",
						g.GetId(), g.GetLeaderId(), g.GetTerm(), o.GetLeaderId(), o.GetTerm()))
				default:
					now[g.GetId()] = seen{g.GetLeaderId(), g.GetTerm()}
					commit[g.GetId()] = o.GetCommitIndex()
					if p, ok := prev[g.GetId()]; ok && p == now[g.GetId()] {
						polls[g.GetId()]++
					} else {
						polls[g.GetId()] = 1
					}
					if polls[g.GetId()] < 3 {
						problems = append(problems, fmt.Sprintf("group %d: leader %s in term %d seen %d times", g.GetId(), g.GetLeaderId(), g.GetTerm(), polls[g.GetId()]))
					} else if g.GetLastAppliedIndex() < prevCommit[g.GetId()] {
						problems = append(problems, fmt.Sprintf("group %d: %s applied %d < %d committed", g.GetId(),
							c.Nodes[s].ID, g.GetLastAppliedIndex(), prevCommit[g.GetId()]))
					}
				}
			}
			prev, prevCommit = now, commit
			if len(ss.GetGroups()) == 0 {
				problems = append(problems, "no groups")
			}
			if len(problems) > 0 {
				return errors.New(strings.Join(problems, "; "))
			}
			return nil
		}()
		if err == nil {
			return nil
		}
		last = err.Error()
		if time.Now().After(deadline) || ctx.Err() != nil {
			return fmt.Errorf("after %v: %s", recoveryStepWait, last)
		}
		c.probe(ctx, round)
		sleepCtx(ctx, 100*time.Millisecond)
	}
}

// runRecover runs `quorate admin recover --data-dir DIR --yes` on node s's
// data directory, with node s's binary, appending its output to the node's
// log.
func (c *Cluster) runRecover(ctx context.Context, s int) error {
	n := c.Nodes[s]
	n.mu.Lock()
	binary := c.binary
	if n.binary != "" {
		binary = n.binary
	}
	n.mu.Unlock()
	args := []string{"admin", "recover", "--data-dir", n.DataDir, "--yes"}
	out, err := exec.CommandContext(ctx, binary, args...).CombinedOutput()
	if logf, lerr := os.OpenFile(n.LogPath, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644); lerr == nil {
		fmt.Fprintf(logf, "=== jepsen: %s %s %s\n%s", time.Now().Format(time.RFC3339Nano), binary, strings.Join(args, " "), out)
		logf.Close()
	}
	if err != nil {
		return fmt.Errorf("quorate %s: %v: %s", strings.Join(args, " "), err, out)
	}
	return nil
}

// waitSoleLeader waits until node s answers and leads every group it
// hosts as the only voter.
func (c *Cluster) waitSoleLeader(ctx context.Context, s int) error {
	id := c.Nodes[s].ID
	deadline := time.Now().Add(recoveryStepWait)
	for {
		st, err := c.nodeStatus(ctx, s)
		if err == nil {
			var problems []string
			for _, g := range st.GetGroups() {
				if g.GetRole() != "leader" || !slices.Equal(g.GetVoters(), []string{id}) {
					problems = append(problems, fmt.Sprintf("group %d: %s, voters %v", g.GetId(), g.GetRole(), g.GetVoters()))
				}
			}
			if len(st.GetGroups()) == 0 {
				problems = append(problems, "no groups")
			}
			if len(problems) == 0 {
				return nil
			}
			err = errors.New(strings.Join(problems, "; "))
		}
		if time.Now().After(deadline) || ctx.Err() != nil {
			return fmt.Errorf("%s does not lead its groups alone after %v: %v%s", id, recoveryStepWait, err, c.logTails(15))
		}
		sleepCtx(ctx, 200*time.Millisecond)
	}
}

// joinSpare starts spare node i with --join to a member and makes it a
// member once node via lists it answering. (AddNode waits for every member
// to answer, which lost nodes not yet removed never do.)
func (c *Cluster) joinSpare(ctx context.Context, i, via int) error {
	c.membersMu.Lock()
	defer c.membersMu.Unlock()
	c.setState(i, nodeJoining)
	if err := c.start(i); err != nil {
		return err
	}
	id := c.Nodes[i].ID
	deadline := time.Now().Add(recoveryStepWait)
	for {
		st, err := c.Status(ctx, via)
		if err == nil {
			err = fmt.Errorf("%s is not listed answering", id)
			for _, m := range st.GetMembers() {
				if m.GetId() == id && m.GetStatus() != nil {
					c.setState(i, nodeMember)
					return nil
				}
			}
		}
		if time.Now().After(deadline) || ctx.Err() != nil {
			return fmt.Errorf("did not join after %v: %v%s", recoveryStepWait, err, c.logTails(15))
		}
		sleepCtx(ctx, 200*time.Millisecond)
	}
}

// wholeProblems lists what keeps the cluster from being whole on members
// live: exactly them as members, all answering, and in every group (the
// meta group and each data group) one leader whose configuration has
// exactly them as voters and no non-voter.
func wholeProblems(st *quoratev1.ClusterStatusResponse, live []string) []string {
	problems := memberProblems(st, live)
	if len(st.GetShardMap().GetGroups()) > 0 {
		problems = replicaProblems(st, live, live, min(dataReplicas, len(live)))
	}
	want := slices.Sorted(slices.Values(live))
	led := map[uint32]bool{}
	hosted := map[uint32]bool{}
	for _, m := range st.GetMembers() {
		for _, g := range m.GetStatus().GetGroups() {
			hosted[g.GetId()] = true
			if g.GetRole() != "leader" {
				continue
			}
			led[g.GetId()] = true
			if v := slices.Sorted(slices.Values(g.GetVoters())); !slices.Equal(v, want) || len(g.GetNonvoters()) > 0 {
				problems = append(problems, fmt.Sprintf("group %d: voters %v, non-voters %v; want voters %v", g.GetId(), v, g.GetNonvoters(), want))
			}
		}
	}
	for g := range hosted {
		if !led[g] {
			problems = append(problems, fmt.Sprintf("group %d: no leader among the members", g))
		}
	}
	slices.Sort(problems)
	return problems
}

// checkRecovery is the recovery scenario's verdict: it completed, and the
// cluster is whole on the survivor and the two new nodes.
func checkRecovery(ctx context.Context, c *Cluster, recoverErr error) Verdict {
	v := Verdict{Checker: "recovery", OK: true}
	live := c.LiveIDs()
	v.Summary = fmt.Sprintf("two of three nodes lost, the survivor recovered: members %s at the end", strings.Join(live, " "))
	if recoverErr != nil {
		v.violate("the scenario stopped: %v", recoverErr)
	}
	if len(live) != 3 {
		v.violate("%d members at the end, want 3", len(live))
	}
	if err := c.pollStatus(ctx, 30*time.Second, func(st *quoratev1.ClusterStatusResponse) []string {
		return wholeProblems(st, live)
	}); err != nil {
		v.violate("not whole: %v", err)
	}
	return v
}
