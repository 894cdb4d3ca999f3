package jepsen

import (
	"archive/tar"
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"time"

	"connectrpc.com/connect"

	quoratev1 "github.com/quorate/quorate/proto/quorate/v1"
)

// The rolling upgrade scenario (Options.UpgradeBinary, Nemesis.Upgrade):
// the cluster starts on one binary (Options.Binary, the old one) and is
// upgraded node by node to another under the workloads, as the runbook in
// docs/operating.md ("Rolling upgrade") says.

// ErrNoRevision says a revision of the checkout cannot be built: no git,
// not a git checkout, a shallow clone without the commit, or no such
// commit (the first commit has no parent).
var ErrNoRevision = errors.New("jepsen: no such revision to build")

// stampPkg is where the linker writes a build's version and commit.
const stampPkg = modulePath + "/node"

// BuildStamped builds ./cmd/quorate of the module at root into out as
// BuildBinary does (so that it shares the build cache with the harness's
// other builds: only the link differs), stamping version and commit as
// `make build` does (quorate_build_info shows them). GOTOOLCHAIN=local:
// the go command running, whatever the tree's go.mod asks for.
func BuildStamped(ctx context.Context, root, out, version, commit string) error {
	ldflags := fmt.Sprintf("-X %s.stampVersion=%s -X %s.stampCommit=%s", stampPkg, version, stampPkg, commit)
	cmd := exec.CommandContext(ctx, "go", "build", "-ldflags", ldflags, "-o", out, "./cmd/quorate")
	cmd.Dir = root
	cmd.Env = append(os.Environ(), "GOTOOLCHAIN=local")
	if b, err := cmd.CombinedOutput(); err != nil {
		return fmt.Errorf("jepsen: go build in %s: %v\n%s", root, err, b)
	}
	return nil
}

// Revision is a commit of the checkout, resolved.
type Revision struct {
	Name    string // as asked: HEAD~1, a tag, a hash
	Commit  string // its full hash
	Version string // `git describe --always` of it
}

// ResolveRevision resolves rev in the git checkout at root. Its error
// wraps ErrNoRevision, saying why, when there is no such commit.
func ResolveRevision(ctx context.Context, root, rev string) (Revision, error) {
	if _, err := exec.LookPath("git"); err != nil {
		return Revision{}, fmt.Errorf("%w: git is not installed", ErrNoRevision)
	}
	git := func(args ...string) (string, error) {
		cmd := exec.CommandContext(ctx, "git", append([]string{"-C", root}, args...)...)
		b, err := cmd.Output()
		if err != nil {
			var ee *exec.ExitError
			if errors.As(err, &ee) {
				err = fmt.Errorf("%v: %s", err, strings.TrimSpace(string(ee.Stderr)))
			}
		}
		return strings.TrimSpace(string(b)), err
	}
	if _, err := git("rev-parse", "--git-dir"); err != nil {
		return Revision{}, fmt.Errorf("%w: %s is not a git checkout (%v)", ErrNoRevision, root, err)
	}
	commit, err := git("rev-parse", "--verify", "--quiet", rev+"^{commit}")
	if err != nil || commit == "" {
		why := "no such commit"
		if shallow, _ := git("rev-parse", "--is-shallow-repository"); shallow == "true" {
			why = "the clone is shallow: its history stops before it"
		} else if strings.Contains(rev, "~") || strings.Contains(rev, "^") {
			why = "the commit it counts back from has no parent"
		}
		return Revision{}, fmt.Errorf("%w: %s: %s", ErrNoRevision, rev, why)
	}
	version, err := git("describe", "--tags", "--always", commit)
	if err != nil {
		return Revision{}, fmt.Errorf("jepsen: git describe %s: %w", commit, err)
	}
	return Revision{Name: rev, Commit: commit, Version: version}, nil
}

// BuildRevision builds ./cmd/quorate as of rev (ResolveRevision) into
// out: `git archive` of the commit extracted into dir, built there with
// BuildStamped and stamped with the commit and its version.
func BuildRevision(ctx context.Context, root string, rev Revision, dir, out string) error {
	cmd := exec.CommandContext(ctx, "git", "-C", root, "archive", "--format=tar", rev.Commit)
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		return err
	}
	var stderr strings.Builder
	cmd.Stderr = &stderr
	if err := cmd.Start(); err != nil {
		return fmt.Errorf("jepsen: git archive: %w", err)
	}
	xerr := extractTar(stdout, dir)
	_, _ = io.Copy(io.Discard, stdout)
	if err := errors.Join(cmd.Wait(), xerr); err != nil {
		return fmt.Errorf("jepsen: git archive %s into %s: %w %s", rev.Commit, dir, err, stderr.String())
	}
	return BuildStamped(ctx, dir, out, rev.Version, rev.Commit)
}

// extractTar writes the regular files, directories and symbolic links of
// the tar stream r under dir, refusing any path that leaves it.
func extractTar(r io.Reader, dir string) error {
	tr := tar.NewReader(r)
	for {
		h, err := tr.Next()
		if err == io.EOF {
			return nil
		}
		if err != nil {
			return err
		}
		name := filepath.Clean(h.Name)
		if !filepath.IsLocal(name) {
			return fmt.Errorf("archive path %q leaves the directory", h.Name)
		}
		path := filepath.Join(dir, name)
		switch h.Typeflag {
		case tar.TypeDir:
			err = os.MkdirAll(path, 0o755)
		case tar.TypeReg:
			err = writeFileFrom(path, tr, os.FileMode(h.Mode)&0o777)
		case tar.TypeSymlink:
			if err = os.MkdirAll(filepath.Dir(path), 0o755); err == nil {
				err = os.Symlink(h.Linkname, path)
			}
		}
		if err != nil {
			return err
		}
	}
}

func writeFileFrom(path string, r io.Reader, mode os.FileMode) error {
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		return err
	}
	f, err := os.OpenFile(path, os.O_CREATE|os.O_WRONLY|os.O_TRUNC, mode|0o600)
	if err != nil {
		return err
	}
	_, err = io.Copy(f, r)
	return errors.Join(err, f.Close())
}

// buildInfoLine matches quorate_build_info's labels on /metrics.
var buildInfoLine = regexp.MustCompile(`(?m)^quorate_build_info\{([^}]*)\}`)

// BuildVersion asks node i's /metrics for the version quorate_build_info
// carries: the binary it runs.
func (c *Cluster) BuildVersion(ctx context.Context, i int) (string, error) {
	ctx, cancel := context.WithTimeout(ctx, 3*time.Second)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, c.url(i)+"/metrics", nil)
	if err != nil {
		return "", err
	}
	resp, err := c.http.Do(req)
	if err != nil {
		return "", err
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if err != nil {
		return "", err
	}
	m := buildInfoLine.FindSubmatch(body)
	if m == nil {
		return "", fmt.Errorf("jepsen: %s: no quorate_build_info on /metrics (HTTP %d)", c.Nodes[i].ID, resp.StatusCode)
	}
	for _, l := range strings.Split(string(m[1]), ",") {
		if v, ok := strings.CutPrefix(l, `version="`); ok {
			return strings.TrimSuffix(v, `"`), nil
		}
	}
	return "", fmt.Errorf("jepsen: %s: quorate_build_info has no version label", c.Nodes[i].ID)
}

// nodeStatus asks node i for NodeStatus with a short deadline.
func (c *Cluster) nodeStatus(ctx context.Context, i int) (*quoratev1.NodeState, error) {
	ctx, cancel := context.WithTimeout(ctx, 2*time.Second)
	defer cancel()
	resp, err := c.Admin(i).NodeStatus(ctx, connect.NewRequest(&quoratev1.NodeStatusRequest{}))
	if err != nil {
		return nil, err
	}
	return resp.Msg.GetNode(), nil
}

// UpgradeOptions configures Nemesis.Upgrade.
type UpgradeOptions struct {
	Binary  string // the new binary
	Version string // the version it stamps (BuildVersion), checked on each node once upgraded
	// HoldLevel runs the runbook's two passes: each node first starts on
	// the new binary with --max-feature-level at the level the old nodes
	// register, so that the way back stays open; once every node runs the
	// new binary, a second rolling restart drops the flag.
	HoldLevel bool
}

// upgradeStepWait bounds each node's return: started, caught up, the
// cluster whole.
const upgradeStepWait = 45 * time.Second

// Upgrade upgrades the members one at a time to opts.Binary while the
// workloads go on, the meta leader last (one election of the meta group
// instead of one per node). Each step is a fault of kind "upgrade", its
// Node "n2 <version before> → <version after>": stop
// the node gracefully (SIGTERM), start it on the new binary with the same
// data dir, ports and flags, then wait (waitCaughtUp) until it runs the
// new version, every group it hosts has applied what the cluster had
// committed when it came back, and the cluster is whole. With HoldLevel,
// the first pass holds the new nodes at the old level and a second pass
// ("upgrade-finish") restarts each without --max-feature-level. It
// returns the first error; the faults record how far it went.
func (n *Nemesis) Upgrade(ctx context.Context, c *Cluster, opts UpgradeOptions) error {
	order := c.Live()
	if l, err := c.Leader(ctx); err == nil {
		order = append(slices.DeleteFunc(order, func(i int) bool { return i == l }), l)
	}
	var hold []string
	if opts.HoldLevel {
		st, err := c.nodeStatus(ctx, order[0])
		if err != nil {
			return fmt.Errorf("upgrade: the old nodes' feature level: %w", err)
		}
		if lvl := st.GetFeatureLevel(); lvl > 0 {
			hold = []string{"--max-feature-level", fmt.Sprint(lvl)}
		}
	}
	pass := func(kind string, args []string) error {
		for _, i := range order {
			f := Fault{Kind: kind, Node: c.Nodes[i].ID, Start: time.Now()}
			from, err := c.BuildVersion(ctx, i)
			f.Node += fmt.Sprintf(" %s → %s", from, opts.Version)
			if err == nil {
				err = c.StopNode(i)
			}
			if err == nil {
				c.SetNodeBinary(i, opts.Binary, args...)
				err = c.Restart(i)
			}
			if err == nil {
				err = c.waitCaughtUp(ctx, i, opts.Version, args)
			}
			n.record(finish(f, err))
			if err != nil {
				return fmt.Errorf("%s %s: %w", kind, c.Nodes[i].ID, err)
			}
		}
		return nil
	}
	if err := pass("upgrade", hold); err != nil {
		return err
	}
	if hold != nil {
		return pass("upgrade-finish", nil)
	}
	return nil
}

// waitCaughtUp waits, for up to upgradeStepWait, until node i answers
// with version, registers the feature level args hold it at (if any),
// has applied in every group it hosts at least what that group's leader
// had committed when the node first answered, and the cluster is whole:
// every member answering, a full set of meta voters, every data group's
// replicas serving under one leader.
func (c *Cluster) waitCaughtUp(ctx context.Context, i int, version string, args []string) error {
	deadline := time.Now().Add(upgradeStepWait)
	id := c.Nodes[i].ID
	var target map[uint32]uint64 // group → the leader's commit index once i answered
	var last string
	for {
		err := func() error {
			if v, err := c.BuildVersion(ctx, i); err != nil {
				return err
			} else if v != version {
				return fmt.Errorf("%s runs version %q, want %q", id, v, version)
			}
			st, err := c.Status(ctx, i)
			if err != nil {
				return err
			}
			live := c.LiveIDs()
			problems := memberProblems(st, live)
			if len(st.GetShardMap().GetGroups()) > 0 {
				problems = replicaProblems(st, live, live, min(dataReplicas, len(live)))
			}
			if st.GetLeaderId() == "" {
				problems = append(problems, "no meta leader")
			}
			if len(problems) > 0 {
				return errors.New(strings.Join(problems, "; "))
			}
			if target == nil {
				target = map[uint32]uint64{}
				for _, m := range st.GetMembers() {
					for _, g := range m.GetStatus().GetGroups() {
						if g.GetRole() == "leader" {
							target[g.GetId()] = g.GetCommitIndex()
						}
					}
				}
			}
			self, err := c.nodeStatus(ctx, i)
			if err != nil {
				return err
			}
			if len(args) == 2 && fmt.Sprint(self.GetFeatureLevel()) != args[1] {
				return fmt.Errorf("%s registers feature level %d, want %s (%s)", id, self.GetFeatureLevel(), args[1], strings.Join(args, " "))
			}
			for _, g := range self.GetGroups() {
				if want, ok := target[g.GetId()]; ok && g.GetLastAppliedIndex() < want {
					return fmt.Errorf("%s applied %d of group %d, the leader had committed %d", id, g.GetLastAppliedIndex(), g.GetId(), want)
				}
			}
			return nil
		}()
		if err == nil {
			return nil
		}
		last = err.Error()
		if time.Now().After(deadline) || ctx.Err() != nil {
			return fmt.Errorf("not caught up after %v: %s%s", upgradeStepWait, last, c.logTails(15))
		}
		sleepCtx(ctx, 200*time.Millisecond)
	}
}

// checkUpgrade is the upgrade scenario's verdict: it completed, and every
// member runs the new version and registers the same feature level.
func checkUpgrade(ctx context.Context, c *Cluster, opts UpgradeOptions, upgradeErr error) Verdict {
	v := Verdict{Checker: "upgrade", OK: true}
	if upgradeErr != nil {
		v.violate("the scenario stopped: %v", upgradeErr)
	}
	levels := map[uint32][]string{}
	for _, i := range c.Live() {
		id := c.Nodes[i].ID
		if ver, err := c.BuildVersion(ctx, i); err != nil {
			v.violate("%s: %v", id, err)
		} else if ver != opts.Version {
			v.violate("%s runs version %q, want %q", id, ver, opts.Version)
		}
		if st, err := c.nodeStatus(ctx, i); err != nil {
			v.violate("%s: %v", id, err)
		} else {
			levels[st.GetFeatureLevel()] = append(levels[st.GetFeatureLevel()], id)
		}
	}
	if len(levels) != 1 {
		v.violate("the members register different feature levels: %v", levels)
	}
	v.Summary = fmt.Sprintf("members %s on version %s, feature levels %v", strings.Join(c.LiveIDs(), " "), opts.Version, levels)
	return v
}
