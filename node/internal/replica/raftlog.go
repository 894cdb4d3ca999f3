package replica

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log"
	"log/slog"
	"net"
	"strings"
	"sync/atomic"
	"syscall"

	"github.com/hashicorp/go-hclog"
	"github.com/hashicorp/raft"

	"github.com/quorate/quorate/raftmux"
)

// One structured log. Raft (and the node's Raft log stores and transports,
// which take an hclog.Logger) writes through raftLogger into the node's
// slog logger: one handler, one format, one level (--log-level). Its
// messages keep their logger's name in front ("raft: ..."), as the node's
// other components name themselves ("nodelog: ...", "raftmux: ...").
//
// Some of raft's warnings and errors are the protocol working as it
// should, or are what shutting down looks like; raftNoise logs those at a
// lower level (see it for which). Nothing about the node's own storage is
// lowered: a damaged log, a failed write or fsync, a snapshot that cannot
// be taken or restored stay errors.

// raftLogger is an hclog.Logger over a slog.Logger.
type raftLogger struct {
	base     *slog.Logger // the node's logger
	log      *slog.Logger // base with the implied arguments
	name     string
	implied  []any
	level    *atomic.Int32 // an hclog.Level set by SetLevel; NoLevel: the handler's
	stopping *atomic.Bool  // the node is stopping (Node.stopping)
}

var _ hclog.Logger = (*raftLogger)(nil)

// NewRaftLogger returns the hclog.Logger named name that writes to base.
func NewRaftLogger(base *slog.Logger, name string, stopping *atomic.Bool) *raftLogger {
	l := &raftLogger{base: base, log: base, name: name, level: new(atomic.Int32), stopping: stopping}
	l.level.Store(int32(hclog.NoLevel))
	return l
}

// slogLevel maps hclog's levels onto slog's; trace is below debug.
func slogLevel(l hclog.Level) slog.Level {
	switch l {
	case hclog.Trace:
		return slog.LevelDebug - 4
	case hclog.Debug:
		return slog.LevelDebug
	case hclog.Warn:
		return slog.LevelWarn
	case hclog.Error:
		return slog.LevelError
	}
	return slog.LevelInfo
}

func (l *raftLogger) enabled(level hclog.Level) bool {
	if floor := hclog.Level(l.level.Load()); floor != hclog.NoLevel && level < floor {
		return false
	}
	return l.log.Enabled(context.Background(), slogLevel(level))
}

func (l *raftLogger) Log(level hclog.Level, msg string, args ...any) {
	if level == hclog.Off || level == hclog.NoLevel {
		return
	}
	level = raftNoise(l.stopping != nil && l.stopping.Load(), level, msg, args)
	if !l.enabled(level) {
		return
	}
	if l.name != "" {
		msg = l.name + ": " + msg
	}
	l.log.Log(context.Background(), slogLevel(level), msg, hclogArgs(args)...)
}

// hclogArgs turns hclog's formatting types into what they print as.
func hclogArgs(args []any) []any {
	out := make([]any, len(args))
	for i, a := range args {
		switch v := a.(type) {
		case hclog.Format:
			if len(v) > 0 {
				if f, ok := v[0].(string); ok {
					a = fmt.Sprintf(f, v[1:]...)
				}
			}
		case hclog.Hex:
			a = fmt.Sprintf("0x%x", int(v))
		case hclog.Octal:
			a = fmt.Sprintf("0%o", int(v))
		case hclog.Binary:
			a = fmt.Sprintf("0b%b", int(v))
		case hclog.Quote:
			a = fmt.Sprintf("%q", string(v))
		}
		out[i] = a
	}
	return out
}

func (l *raftLogger) Trace(msg string, args ...any) { l.Log(hclog.Trace, msg, args...) }
func (l *raftLogger) Debug(msg string, args ...any) { l.Log(hclog.Debug, msg, args...) }
func (l *raftLogger) Info(msg string, args ...any)  { l.Log(hclog.Info, msg, args...) }
func (l *raftLogger) Warn(msg string, args ...any)  { l.Log(hclog.Warn, msg, args...) }
func (l *raftLogger) Error(msg string, args ...any) { l.Log(hclog.Error, msg, args...) }

func (l *raftLogger) IsTrace() bool { return l.enabled(hclog.Trace) }
func (l *raftLogger) IsDebug() bool { return l.enabled(hclog.Debug) }
func (l *raftLogger) IsInfo() bool  { return l.enabled(hclog.Info) }
func (l *raftLogger) IsWarn() bool  { return l.enabled(hclog.Warn) }
func (l *raftLogger) IsError() bool { return l.enabled(hclog.Error) }

func (l *raftLogger) ImpliedArgs() []any { return l.implied }

func (l *raftLogger) With(args ...any) hclog.Logger {
	c := *l
	c.implied = append(append([]any(nil), l.implied...), args...)
	c.log = l.base.With(hclogArgs(c.implied)...)
	return &c
}

func (l *raftLogger) Name() string { return l.name }

func (l *raftLogger) Named(name string) hclog.Logger {
	if l.name != "" {
		name = l.name + "." + name
	}
	return l.ResetNamed(name)
}

func (l *raftLogger) ResetNamed(name string) hclog.Logger {
	c := *l
	c.name = name
	return &c
}

// SetLevel sets a floor for this logger and those derived from it, above
// the handler's own level.
func (l *raftLogger) SetLevel(level hclog.Level) { l.level.Store(int32(level)) }

// GetLevel is the lowest level logged.
func (l *raftLogger) GetLevel() hclog.Level {
	for _, level := range []hclog.Level{hclog.Trace, hclog.Debug, hclog.Info, hclog.Warn, hclog.Error} {
		if l.enabled(level) {
			return level
		}
	}
	return hclog.Off
}

func (l *raftLogger) StandardLogger(opts *hclog.StandardLoggerOptions) *log.Logger {
	level := hclog.Info
	if opts != nil && opts.ForceLevel != hclog.NoLevel {
		level = opts.ForceLevel
	}
	return slog.NewLogLogger(l.log.Handler(), slogLevel(level))
}

func (l *raftLogger) StandardWriter(opts *hclog.StandardLoggerOptions) io.Writer {
	return l.StandardLogger(opts).Writer()
}

// raftNoise is the level raft's message msg, logged at level with args, is
// written at. stopping is whether this node is stopping. What it lowers:
//
//   - The consistency check at work: a follower missing the entry before
//     the leader's ("failed to get previous log" with log not found) and
//     the leader going back ("appendEntries rejected, sending older logs"):
//     debug. A node not yet added to the cluster finding no one to vote for
//     ("no known peers, aborting election"): debug. A replica's first
//     election ("heartbeat timeout reached" with no leader ever known):
//     info. A leader meeting a newer term ("peer has newer term"): info.
//   - A peer unreachable (a heartbeat, an append, a pipeline, a vote
//     request that failed, or a connection from it that broke): a warning,
//     not an error, since this node works on and readiness and status say
//     whether its groups have quorum; debug when the peer does not host the
//     group yet (raftmux.IsNoGroup, while its replica is being opened), and
//     once this node is stopping. A call on a connection the peer reset or
//     closed (connCut): debug, since the peer restarted, and raft dials
//     again (a peer that is down refuses the dial: a warning). A vote
//     request the peer refused: debug too, since that is how every election looks
//     while peers start (a restart of the cluster); a lasting problem
//     still shows as the follower's "heartbeat timeout reached" warning
//     and in readiness. A split vote ("Election timeout reached,
//     restarting election"): info.
//   - A voter turning down a candidate whose log is behind its own
//     ("rejecting vote request since our last term is greater", and the
//     same for the last index and for pre-votes): info, the election doing
//     its job after a restart.
//   - Once this node is stopping: elections and the loss of contact with
//     peers that are stopping too: debug.
func raftNoise(stopping bool, level hclog.Level, msg string, args []any) hclog.Level {
	switch msg {
	case "no known peers, aborting election", "appendEntries rejected, sending older logs":
		return min(level, hclog.Debug)
	case "failed to get previous log":
		if err := argError(args); errors.Is(err, raft.ErrLogNotFound) || (err != nil && err.Error() == raft.ErrLogNotFound.Error()) {
			return min(level, hclog.Debug)
		}
	case "heartbeat timeout reached, starting election":
		switch {
		case stopping:
			return min(level, hclog.Debug)
		case argString(args, "last-leader-id") == "":
			return min(level, hclog.Info)
		}
	case "peer has newer term, stopping replication":
		return min(level, hclog.Info)
	case "Election timeout reached, restarting election":
		if stopping {
			return min(level, hclog.Debug)
		}
		return min(level, hclog.Info)
	case "failed to contact", "failed to contact quorum of nodes, stepping down":
		if stopping {
			return min(level, hclog.Debug)
		}
	case "rejecting vote request since our last term is greater", "rejecting vote request since our last index is greater",
		"rejecting pre-vote request since our last term is greater":
		return min(level, hclog.Info)
	case "failed to heartbeat to", "failed to appendEntries to", "failed to pipeline appendEntries",
		"failed to start pipeline replication to", "failed to make requestVote RPC", "failed to decode incoming command":
		err := argError(args)
		if stopping || raftmux.IsNoGroup(err) || errors.Is(err, net.ErrClosed) {
			return min(level, hclog.Debug)
		}
		if connCut(err) || (msg == "failed to make requestVote RPC" && errors.Is(err, syscall.ECONNREFUSED)) {
			return min(level, hclog.Debug)
		}
		return min(level, hclog.Warn)
	}
	return level
}

// connCut is whether err says the peer's end of a connection went away
// (reset, closed, cut short), as when the peer restarts. Raft dials
// again; a peer that is down then refuses,
// which stays a warning, except for vote requests.
func connCut(err error) bool {
	return errors.Is(err, syscall.ECONNRESET) || errors.Is(err, syscall.EPIPE) || errors.Is(err, io.EOF) ||
		errors.Is(err, io.ErrUnexpectedEOF) || errors.Is(err, net.ErrClosed)
}

// argError is the "error" argument of an hclog call, or nil.
func argError(args []any) error {
	for i := 0; i+1 < len(args); i += 2 {
		if k, _ := args[i].(string); k == "error" {
			err, _ := args[i+1].(error)
			return err
		}
	}
	return nil
}

// argString is the argument key of an hclog call, as it prints.
func argString(args []any, key string) string {
	for i := 0; i+1 < len(args); i += 2 {
		if k, _ := args[i].(string); k == key {
			return strings.TrimSpace(fmt.Sprint(args[i+1]))
		}
	}
	return ""
}
