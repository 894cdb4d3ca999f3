package replica

import (
	"sync"
	"sync/atomic"
	"time"

	"github.com/hashicorp/raft"
)

// Quiet groups. A leader heartbeats each follower every HeartbeatTimeout/10
// to 2×HeartbeatTimeout/10; with many groups those heartbeats are most of
// an idle node's CPU. A group whose leader appended nothing for quietAfter
// is quiet: its leader heartbeats quietFactor times less often, by raising
// its own HeartbeatTimeout (a leader uses it only to pace heartbeats). The
// followers keep theirs, so a quiet group's failover is as fast as a busy
// one's: the slowest quiet heartbeat, 2×quietFactor×HeartbeatTimeout/10,
// stays well inside the followers' HeartbeatTimeout and the leader's
// LeaderLeaseTimeout (QuietTimeout caps it). The first entry proposed
// to a quiet group restores the normal pace before it is sent, and so does
// any change of leader.
const (
	quietAfter  = 2 * time.Second
	quietFactor = 5 / 2.0
)

// quietness is one replica's quiet state. quiet is read without the lock
// (wake, on every proposal); mu serializes its changes, each with the
// reload of raft's configuration that makes it true.
type quietness struct {
	mu    sync.Mutex
	quiet atomic.Bool
	// lastIndex and since are the sweep's: the replica's last log index at
	// the previous sweep, and when it last changed.
	lastIndex uint64
	since     time.Time
}

// QuietTimeout is the HeartbeatTimeout a quiet leader runs with, or 0 when
// it would not be longer than hb: quietFactor×hb, capped so that its
// slowest heartbeat interval (a fifth of it) is at most half of lease.
func QuietTimeout(hb, lease time.Duration) time.Duration {
	q := time.Duration(float64(hb) * quietFactor)
	q = min(q, lease*5/2)
	if q <= hb {
		return 0
	}
	return q
}

// SweepQuiet is called for each hosted replica every expireInterval: a
// leader that has appended nothing for quietAfter turns quiet; a replica
// that no longer leads turns loud.
func (g *Replica) SweepQuiet(now time.Time) {
	q := &g.quiet
	if !g.IsLeader() {
		g.SetQuiet(false)
		q.lastIndex, q.since = 0, now
		return
	}
	if idx := g.Raft.LastIndex(); idx != q.lastIndex || q.since.IsZero() {
		q.lastIndex, q.since = idx, now
		return
	}
	if now.Sub(q.since) >= quietAfter {
		g.SetQuiet(true)
	}
}

// Wake restores g's normal heartbeat pace before an entry is proposed: one
// atomic load while g is loud, the lock only to turn it loud.
func (g *Replica) Wake() {
	if g.quiet.quiet.Load() {
		g.SetQuiet(false)
	}
}

// SetQuiet sets g's replica quiet or loud, reloading its raft
// configuration when that changes.
func (g *Replica) SetQuiet(quiet bool) {
	q := &g.quiet
	q.mu.Lock()
	defer q.mu.Unlock()
	if q.quiet.Load() == quiet || g.Raft == nil {
		return
	}
	cfg := &g.host.Config
	hb, et := cfg.HeartbeatTimeout, cfg.ElectionTimeout
	if quiet {
		qt := QuietTimeout(hb, cfg.LeaderLeaseTimeout)
		if qt == 0 {
			return
		}
		hb, et = qt, max(et, qt)
	}
	// Turning quiet, the flag is set before the slower pace: a wake that
	// reads it meanwhile waits on mu for the change, then undoes it.
	if quiet {
		q.quiet.Store(true)
	}
	rc := g.Raft.ReloadableConfig()
	rc.HeartbeatTimeout, rc.ElectionTimeout = hb, et
	if err := g.Raft.ReloadConfig(rc); err != nil {
		g.host.Log.Warn("changing a replica's heartbeat pace", "group", g.ID, "quiet", quiet, "error", err)
		q.quiet.Store(!quiet)
		return
	}
	q.quiet.Store(quiet)
}

// HeartbeatTimeout is the HeartbeatTimeout g's replica runs with now.
func (g *Replica) HeartbeatTimeout() time.Duration {
	if g.Raft == nil || g.Raft.State() == raft.Shutdown {
		return 0
	}
	return g.Raft.ReloadableConfig().HeartbeatTimeout
}
