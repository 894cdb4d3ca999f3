package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"connectrpc.com/connect"

	"github.com/quorate/quorate/cmd/internal/apiflags"
	"github.com/quorate/quorate/node"
	"github.com/quorate/quorate/node/nodetest"
	quoratev1 "github.com/quorate/quorate/proto/quorate/v1"
	"github.com/quorate/quorate/proto/quorate/v1/quoratev1connect"
)

// buildQuorate builds this command into a temporary directory, as go build
// does (with its version control stamps), and returns the binary's path.
func buildQuorate(t *testing.T) string {
	t.Helper()
	goTool, err := exec.LookPath("go")
	if err != nil {
		t.Skipf("no go tool to build the binary with: %v", err)
	}
	bin := filepath.Join(t.TempDir(), "quorate")
	if out, err := exec.Command(goTool, "build", "-o", bin, ".").CombinedOutput(); err != nil {
		t.Fatalf("go build: %v\n%s", err, out)
	}
	return bin
}

// binaryRun is one run of the built binary.
type binaryRun struct {
	stdout, stderr string
	status         int
}

// runBinary runs bin with args and the environment without any
// QUORATE_ variable but env, and returns its output and exit status.
func runBinary(t *testing.T, bin string, env []string, args ...string) binaryRun {
	t.Helper()
	cmd := exec.Command(bin, args...)
	for _, kv := range os.Environ() {
		if !strings.HasPrefix(kv, "QUORATE_") {
			cmd.Env = append(cmd.Env, kv)
		}
	}
	cmd.Env = append(cmd.Env, env...)
	var out, errOut bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errOut
	err := cmd.Run()
	var exitErr *exec.ExitError
	if err != nil && !errors.As(err, &exitErr) {
		t.Fatalf("running quorate %s: %v", strings.Join(args, " "), err)
	}
	return binaryRun{stdout: out.String(), stderr: errOut.String(), status: cmd.ProcessState.ExitCode()}
}

// wantStatus fails unless r exited with status.
func wantStatus(t *testing.T, r binaryRun, status int, what string) {
	t.Helper()
	if r.status != status {
		t.Errorf("%s: exit status %d, want %d\nstdout: %s\nstderr: %s", what, r.status, status, r.stdout, r.stderr)
	}
}

// fakeOutcomes is an AdmissionService whose Admit answers answer(n), n
// counting the calls from 1.
type fakeOutcomes struct {
	quoratev1connect.UnimplementedAdmissionServiceHandler
	calls  atomic.Int64
	answer func(n int64) (*quoratev1.AdmitResponse, error)
}

func (f *fakeOutcomes) Admit(_ context.Context, _ *connect.Request[quoratev1.AdmitRequest]) (*connect.Response[quoratev1.AdmitResponse], error) {
	resp, err := f.answer(f.calls.Add(1))
	if err != nil {
		return nil, err
	}
	return connect.NewResponse(resp), nil
}

func serveOutcomes(t *testing.T, f *fakeOutcomes) *httptest.Server {
	t.Helper()
	_, h := quoratev1connect.NewAdmissionServiceHandler(f)
	srv := httptest.NewServer(h)
	t.Cleanup(srv.Close)
	return srv
}

// unknownOutcome is a node's answer when a request may have been applied.
func unknownOutcome(t *testing.T) error {
	t.Helper()
	err := connect.NewError(connect.CodeUnavailable, errors.New("node: outcome unknown: leadership lost while committing"))
	d, derr := connect.NewErrorDetail(&quoratev1.OutcomeUnknown{Reason: "leadership lost"})
	if derr != nil {
		t.Fatal(derr)
	}
	err.AddDetail(d)
	return err
}

const exitPolicies = `policies:
  - name: exit-once
    algorithm: fixed_window
    limit: 1
    period: 1h
  - name: exit-slot
    algorithm: concurrency
    limit: 1
`

// The exit statuses scripts rely on, $QUORATE_SERVER, version and
// completion, through the built binary against a real 3-node cluster.
func TestCLIBinaryConventions(t *testing.T) {
	bin := buildQuorate(t)
	c := nodetest.NewCluster(t, 3)
	server := c.APIURL(0)
	file := filepath.Join(t.TempDir(), "policies.yaml")
	if err := os.WriteFile(file, []byte(exitPolicies), 0o600); err != nil {
		t.Fatal(err)
	}
	wantStatus(t, runBinary(t, bin, nil, "policy", "apply", "-f", file, "--server", server), exitOK, "policy apply")

	t.Run("allowed 0, denied 2, error 1", func(t *testing.T) {
		for _, tc := range []struct {
			args   []string
			status int
			out    string // stdout's prefix
		}{
			{[]string{"admit", "--policy", "exit-once", "--key", "k"}, exitOK, "allowed"},
			{[]string{"admit", "--policy", "exit-once", "--key", "k"}, exitDenied, "denied"},
			{[]string{"admit", "--policy", "exit-once", "--key", "k", "-o", "json"}, exitDenied, "{"},
			{[]string{"reserve", "--policy", "exit-once", "--key", "r", "--estimate", "1"}, exitOK, "allowed"},
			{[]string{"reserve", "--policy", "exit-once", "--key", "r", "--estimate", "1", "-o", "yaml"}, exitDenied, "allowed: false"},
			{[]string{"lease", "acquire", "--policy", "exit-slot", "--key", "l"}, exitOK, "allowed"},
			{[]string{"lease", "acquire", "--policy", "exit-slot", "--key", "l"}, exitDenied, "denied"},
			{[]string{"peek", "--policy", "exit-once", "--key", "k"}, exitOK, "would deny"}, // a read, not a denial
			{[]string{"admit", "--policy", "no-such-policy", "--key", "k"}, exitError, ""},
			{[]string{"admit", "--policy", "exit-once"}, exitError, ""}, // a missing flag
		} {
			r := runBinary(t, bin, nil, append(tc.args, "--server", server)...)
			what := "quorate " + strings.Join(tc.args, " ")
			wantStatus(t, r, tc.status, what)
			if !strings.HasPrefix(r.stdout, tc.out) {
				t.Errorf("%s: stdout %q, want it to start with %q", what, r.stdout, tc.out)
			}
			if (tc.status == exitError) != strings.HasPrefix(r.stderr, "quorate: ") {
				t.Errorf("%s: stderr %q; want \"quorate: <error>\" exactly for an error", what, r.stderr)
			}
		}
	})

	t.Run("outcome unknown 3", func(t *testing.T) {
		srv := serveOutcomes(t, &fakeOutcomes{answer: func(int64) (*quoratev1.AdmitResponse, error) { return nil, unknownOutcome(t) }})
		r := runBinary(t, bin, nil, "admit", "--server", srv.URL, "--policy", "p", "--key", "k", "--request-id", "r-9", "--timeout", "300ms")
		wantStatus(t, r, exitUnknown, "admit with the outcome unknown")
		if !strings.Contains(r.stderr, "outcome is unknown") || !strings.Contains(r.stderr, "--request-id r-9") {
			t.Errorf("stderr %q does not say the outcome is unknown and how to retry", r.stderr)
		}
		if strings.Contains(r.stderr, "retrying in") {
			t.Errorf("retry chatter without -v:\n%s", r.stderr)
		}
	})

	t.Run("a node's Raft port 1 at once", func(t *testing.T) {
		raft := c.Node(0).RaftAddr()
		for _, args := range [][]string{{"admit", "--policy", "exit-once", "--key", "raft"}, {"lease", "acquire", "--policy", "exit-slot", "--key", "raft"}} {
			started := time.Now()
			r := runBinary(t, bin, nil, append(args, "--server", raft, "--timeout", "10s")...)
			what := "quorate " + strings.Join(args, " ") + " --server " + raft + " (the Raft port)"
			wantStatus(t, r, exitError, what)
			if took := time.Since(started); took > 5*time.Second {
				t.Errorf("%s: took %v, want an answer at once (--timeout 10s)", what, took)
			}
			if !strings.Contains(r.stderr, "is not a Quorate node") || !strings.Contains(r.stderr, "not its Raft or another port") {
				t.Errorf("%s: stderr %q does not say the server is not a Quorate API", what, r.stderr)
			}
		}
	})

	t.Run("QUORATE_SERVER", func(t *testing.T) {
		env := []string{apiflags.ServerEnv + "=" + c.APIURL(1)}
		wantStatus(t, runBinary(t, bin, env, "admit", "--policy", "exit-once", "--key", "env"), exitOK, "admit with $QUORATE_SERVER")
		dead := []string{apiflags.ServerEnv + "=http://127.0.0.1:1"}
		wantStatus(t, runBinary(t, bin, dead, "admit", "--server", server, "--policy", "exit-once", "--key", "flag"), exitOK,
			"admit with --server and a dead $QUORATE_SERVER (the flag wins)")
		r := runBinary(t, bin, dead, "policy", "list", "--timeout", "2s")
		wantStatus(t, r, exitError, "policy list with a dead $QUORATE_SERVER")
		if !strings.Contains(r.stderr, "127.0.0.1:1") {
			t.Errorf("the error does not name $QUORATE_SERVER's server: %s", r.stderr)
		}
	})

	t.Run("version", func(t *testing.T) {
		r := runBinary(t, bin, nil, "version", "-o", "json")
		wantStatus(t, r, exitOK, "version")
		var v node.BuildInfo
		if err := json.Unmarshal([]byte(r.stdout), &v); err != nil {
			t.Fatalf("version -o json: %v\n%s", err, r.stdout)
		}
		if v.Version == "" || v.GoVersion == "" || v.Platform == "" {
			t.Errorf("version -o json: %+v, want a version, Go version and platform", v)
		}
		// go build stamps the commit only in a checkout it recognizes
		// (not a git worktree, nor with GOFLAGS=-buildvcs=false).
		commit := v.Commit
		if commit != "" {
			if head, err := exec.Command("git", "rev-parse", "HEAD").Output(); err == nil && commit != strings.TrimSpace(string(head)) {
				t.Errorf("version: commit %q, want %s", commit, head)
			}
			if v.CommitTime == "" {
				t.Errorf("version: commit %s without its time", commit)
			}
		} else {
			commit = "unknown"
		}
		text := runBinary(t, bin, nil, "version")
		for _, want := range []string{"quorate " + v.Version + "\n", "commit:      " + commit, "modified:    "} {
			if !strings.Contains(text.stdout, want) {
				t.Errorf("version text lacks %q:\n%s", want, text.stdout)
			}
		}
		y := runBinary(t, bin, nil, "version", "-o", "yaml")
		if !strings.Contains(y.stdout, "commit: ") || !strings.Contains(y.stdout, "goVersion: ") {
			t.Errorf("version -o yaml:\n%s", y.stdout)
		}
	})

	t.Run("completion and help", func(t *testing.T) {
		for shell, want := range map[string]string{"bash": "__start_quorate", "zsh": "#compdef quorate",
			"fish": "complete -c quorate", "powershell": "Register-ArgumentCompleter"} {
			r := runBinary(t, bin, nil, "completion", shell)
			wantStatus(t, r, exitOK, "completion "+shell)
			if !strings.Contains(r.stdout, want) {
				t.Errorf("completion %s does not print a script with %q:\n%.300s", shell, want, r.stdout)
			}
		}
		wantStatus(t, runBinary(t, bin, nil, "completion", "tcsh"), exitError, "completion tcsh")
		r := runBinary(t, bin, nil, "--help")
		for _, want := range []string{"Exit status: 0", "2 denied", "3 outcome unknown", "$" + apiflags.ServerEnv, "completion", "version"} {
			if !strings.Contains(r.stdout, want) {
				t.Errorf("quorate --help lacks %q:\n%s", want, r.stdout)
			}
		}
	})
}

// Retry chatter is printed with -v only; the answer shows the attempts
// either way.
func TestRetryChatterOnlyWithVerbose(t *testing.T) {
	for _, verbose := range []bool{false, true} {
		f := &fakeOutcomes{answer: func(n int64) (*quoratev1.AdmitResponse, error) {
			if n == 1 {
				return nil, connect.NewError(connect.CodeUnavailable, errors.New("node: no leader"))
			}
			return &quoratev1.AdmitResponse{Allowed: true, Limit: 1}, nil
		}}
		srv := serveOutcomes(t, f)
		args := []string{"admit", "--server", srv.URL, "--policy", "p", "--key", "k"}
		if verbose {
			args = append(args, "-v")
		}
		out, errOut, err := runCLI(t, args...)
		if err != nil || !strings.Contains(out, "attempts=2") {
			t.Fatalf("admit (verbose %t): %v\n%s", verbose, err, out)
		}
		if got := strings.Contains(errOut, "attempt 1 failed: Admit on "+srv.URL) && strings.Contains(errOut, "retrying in"); got != verbose {
			t.Errorf("verbose %t: stderr %q", verbose, errOut)
		}
		if !verbose && errOut != "" {
			t.Errorf("stderr without -v: %q", errOut)
		}
	}
}

// execute maps a denial to exit status 2 and an error to 1 in process too.
func TestExecuteStatus(t *testing.T) {
	f := &fakeOutcomes{answer: func(int64) (*quoratev1.AdmitResponse, error) {
		return &quoratev1.AdmitResponse{Allowed: false, Limit: 1}, nil
	}}
	srv := serveOutcomes(t, f)
	var out, errOut bytes.Buffer
	if s := execute(context.Background(), []string{"admit", "--server", srv.URL, "--policy", "p", "--key", "k"}, &out, &errOut); s != exitDenied {
		t.Errorf("denied admit: status %d, want %d\n%s%s", s, exitDenied, out.String(), errOut.String())
	}
	if s := execute(context.Background(), []string{"admit", "--bogus"}, &out, &errOut); s != exitError {
		t.Errorf("bad flag: status %d, want %d", s, exitError)
	}
}
