package main

// The Quorate cluster bench compare measures: three `quorate serve`
// processes on loopback, one per node, so that each node's CPU is its own
// process's and a run reports what the busiest node spent, as three
// machines would see it.

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"connectrpc.com/connect"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/durationpb"

	quoratev1 "github.com/quorate/quorate/proto/quorate/v1"
	"github.com/quorate/quorate/proto/quorate/v1/quoratev1connect"
)

const (
	// compareNodes is the size of the cluster compare starts.
	compareNodes = 3
	// compareDefaultGroups is the data groups of its default topology:
	// serve's and dev's default (--groups auto), one per node.
	compareDefaultGroups = compareNodes
	// userHZ is the unit of the CPU times in /proc/PID/stat (USER_HZ,
	// 100 on every Linux architecture Go builds for).
	userHZ = 100
)

// compareCluster is the three serve processes of a comparison.
type compareCluster struct {
	nodes  []*serverProcess
	urls   []string
	exited chan struct{} // closed when any node exits
}

// startCompareCluster starts compareNodes `bin serve` processes (bin is a
// quorate binary, normally the one beside this program) with groups data
// groups (0: every key in the meta group), on free loopback ports, state
// under dir: the first bootstraps, the others join it. It applies the
// comparison's token-bucket policy and waits until every data group knows
// it, and returns the cluster and a description of it. The nodes run in
// processes of their own, as Redis and Gubernator do, so they share no Go
// runtime with the load generator, and each node's CPU can be read.
func startCompareCluster(ctx context.Context, bin, dir string, groups int, stderr io.Writer) (*compareCluster, string, error) {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, "", err
	}
	envoyFile, err := writeEnvoyConfig(dir)
	if err != nil {
		return nil, "", err
	}
	var c *compareCluster
	for attempt := 0; ; attempt++ { // another process may take a free port first
		base, err := freeLoopbackPortRange(2 * compareNodes)
		if err != nil {
			return nil, "", err
		}
		c, err = startServeProcesses(ctx, bin, filepath.Join(dir, fmt.Sprintf("data%d", attempt)), base, groups, envoyFile)
		if err == nil {
			break
		}
		if attempt == 2 || ctx.Err() != nil || !strings.Contains(err.Error(), "address already in use") {
			return nil, "", fmt.Errorf("bench compare: %w", err)
		}
	}
	deadline := time.Now().Add(time.Minute)
	admin := quoratev1connect.NewAdminServiceClient(http.DefaultClient, c.urls[0])
	err = pollUntil(ctx, deadline, c.exited, func(ctx context.Context) (bool, error) {
		_, err := admin.ApplyPolicies(ctx, connect.NewRequest(&quoratev1.ApplyPoliciesRequest{Policies: []*quoratev1.Policy{{
			Name: comparePolicy, Algorithm: "token_bucket", Limit: 1, Period: durationpb.New(benchRefillPeriod),
			Burst: proto.Int64(defaultBenchCapacity)}, {
			Name: comparePolicyLocal, Algorithm: "token_bucket", Limit: 1, Period: durationpb.New(benchRefillPeriod),
			Burst: proto.Int64(defaultBenchCapacity), Local: &quoratev1.LocalDecisions{Mode: "grant"}}}}))
		return err == nil, err
	})
	if err == nil {
		err = waitPolicyEverywhere(ctx, c.urls, deadline, c.exited)
	}
	if err != nil {
		return nil, "", errors.Join(fmt.Errorf("bench compare: %w", err), c.stop())
	}
	desc := fmt.Sprintf("%d nodes, %d data groups (`%s serve`, a process each)", compareNodes, groups, filepath.Base(bin))
	if groups == 0 {
		desc = fmt.Sprintf("%d nodes, one Raft group for all keys (`%s serve --groups 0`, a process each)", compareNodes, filepath.Base(bin))
	}
	fmt.Fprintf(stderr, "bench compare: quorate cluster: %s, APIs %s\n", desc, strings.Join(c.urls, " "))
	return c, desc, nil
}

// startServeProcesses starts the nodes, node i (from 0) with its API on
// base+i and its Raft port on base+compareNodes+i, serving Envoy's
// rate-limit service with envoyFile's domains, and waits until the cluster
// has them all and a leader in every group.
func startServeProcesses(ctx context.Context, bin, dir string, base, groups int, envoyFile string) (*compareCluster, error) {
	c := &compareCluster{exited: make(chan struct{})}
	for i := range compareNodes {
		id := fmt.Sprintf("n%d", i+1)
		api := fmt.Sprintf("127.0.0.1:%d", base+i)
		args := []string{"serve", "--id", id, "--data-dir", filepath.Join(dir, id), "--api-addr", api,
			"--raft-addr", fmt.Sprintf("127.0.0.1:%d", base+compareNodes+i), "--log-level", "warn",
			"--groups", strconv.Itoa(groups), "--expect-nodes", strconv.Itoa(compareNodes), "--envoy-config", envoyFile}
		if i == 0 {
			args = append(args, "--bootstrap")
		} else {
			args = append(args, "--join", c.urls[0])
		}
		p, err := startServerProcess(ctx, "quorate serve --id "+id, bin, args, nil)
		if err != nil {
			return nil, errors.Join(err, c.stop())
		}
		c.nodes, c.urls = append(c.nodes, p), append(c.urls, "http://"+api)
		go func() {
			<-p.exited
			select {
			case <-c.exited:
			default:
				close(c.exited)
			}
		}()
	}
	status := quoratev1connect.NewAdminServiceClient(http.DefaultClient, c.urls[0])
	err := pollUntil(ctx, time.Now().Add(90*time.Second), c.exited, func(ctx context.Context) (bool, error) {
		st, err := status.ClusterStatus(ctx, connect.NewRequest(&quoratev1.ClusterStatusRequest{}))
		if err != nil {
			return false, err
		}
		if n := len(st.Msg.GetMembers()); n != compareNodes {
			return false, fmt.Errorf("%d of %d nodes are members", n, compareNodes)
		}
		if n := len(st.Msg.GetShardMap().GetGroups()); n != groups {
			return false, fmt.Errorf("%d of %d data groups", n, groups)
		}
		return true, nil
	})
	if err != nil {
		return nil, errors.Join(fmt.Errorf("cluster of %d quorate serve processes: %w: %s", compareNodes, err, c.lastLogLines()), c.stop())
	}
	return c, nil
}

// lastLogLines are the last lines of every node's output, for errors.
func (c *compareCluster) lastLogLines() string {
	var b strings.Builder
	for _, n := range c.nodes {
		fmt.Fprintf(&b, "\n%s: %s", n.name, lastLines(n.log.String(), 5))
	}
	return b.String()
}

// stop stops every node (SIGTERM, as an init system would).
func (c *compareCluster) stop() error {
	var errs []error
	for _, n := range c.nodes {
		errs = append(errs, n.stop())
	}
	return errors.Join(errs...)
}

// cpu returns each node's CPU time so far (processesCPU).
func (c *compareCluster) cpu() []time.Duration { return processesCPU(c.nodes) }

// processesCPU returns each process's CPU time so far (user + system,
// every thread), from /proc; nil where /proc cannot be read (not Linux).
func processesCPU(ps []*serverProcess) []time.Duration {
	out := make([]time.Duration, len(ps))
	for i, p := range ps {
		d, err := processCPU(p.cmd.Process.Pid)
		if err != nil {
			return nil
		}
		out[i] = d
	}
	return out
}

// processCPU reads the user and system time of process pid from
// /proc/PID/stat (fields 14 and 15, in USER_HZ ticks).
func processCPU(pid int) (time.Duration, error) {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return 0, err
	}
	// The command name (field 2) may hold spaces: fields count from the
	// last ')'.
	i := bytes.LastIndexByte(b, ')')
	if i < 0 {
		return 0, fmt.Errorf("/proc/%d/stat: no command name", pid)
	}
	f := strings.Fields(string(b[i+1:]))
	if len(f) < 13 {
		return 0, fmt.Errorf("/proc/%d/stat: %d fields after the command name", pid, len(f))
	}
	var ticks int64
	for _, s := range f[11:13] { // utime, stime: fields 14 and 15
		v, err := strconv.ParseInt(s, 10, 64)
		if err != nil {
			return 0, fmt.Errorf("/proc/%d/stat: %w", pid, err)
		}
		ticks += v
	}
	return time.Duration(ticks) * time.Second / userHZ, nil
}
