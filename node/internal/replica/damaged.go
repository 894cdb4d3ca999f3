package replica

import (
	"errors"
	"log/slog"
	"slices"
	"time"

	"github.com/cenkalti/backoff/v5"
	"google.golang.org/protobuf/types/known/timestamppb"

	quoratev1 "github.com/quorate/quorate/proto/quorate/v1"
	"github.com/quorate/quorate/shard"
)

// Reopening a damaged data group replica is retried after
// damagedRetryMin, doubling up to damagedRetryMax: its directory may have
// been deleted meanwhile (the recovery), and then it reopens empty.
const (
	damagedRetryMin = time.Second
	damagedRetryMax = time.Minute
)

// damagedReplica is a data group replica of this node that is not running
// because its files are damaged. Set.mu guards it.
type damagedReplica struct {
	err  error
	at   time.Time
	wait *backoff.ExponentialBackOff // the waits before the next reopenings
	next time.Time
}

// damaged stops replica g, whose files were found damaged while it
// ran (err is a *DamagedError). A data group replica is closed and its
// reopening retried with backoff (a replica not yet installed is left to
// Set.Open, which sees it stopping); the meta group replica is shut
// down. Either way its status shows err.
func (h *Host) damaged(g *Replica, err error) {
	if !g.stopping.CompareAndSwap(false, true) {
		return
	}
	h.Log.Error("replica files damaged: stopping the replica", "group", g.ID, "err", err)
	go func() {
		if g.ID == shard.MetaGroup {
			_ = g.Raft.Shutdown().Error()
			return
		}
		if h.Data.removeDamaged(g, err) {
			_ = g.Close()
		}
	}()
}

// removeDamaged takes replica g, whose files are damaged, out of the
// hosted ones and records the damage, if g is still hosted; it reports
// whether it was.
func (d *Set) removeDamaged(g *Replica, err error) bool {
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.m[g.ID] != g {
		return false
	}
	delete(d.m, g.ID)
	d.noteDamaged(g.ID, err)
	return true
}

// noteDamaged records that data group id's replica could not open, or was
// stopped, because its files are damaged. Callers hold d.mu.
func (d *Set) noteDamaged(id shard.GroupID, err error) {
	if d.damaged == nil {
		d.damaged = make(map[shard.GroupID]*damagedReplica)
	}
	r := d.damaged[id]
	if r == nil {
		r = &damagedReplica{wait: &backoff.ExponentialBackOff{InitialInterval: damagedRetryMin, Multiplier: 2, MaxInterval: damagedRetryMax}}
		d.damaged[id] = r
	}
	now := time.Now()
	r.err, r.at = err, now
	r.next = now.Add(r.wait.NextBackOff())
}

// OpenDue reports whether the node may try to open data group id's replica
// now: always, unless its files were found damaged and the next retry is
// still to come.
func (d *Set) OpenDue(id shard.GroupID) bool {
	d.mu.RLock()
	defer d.mu.RUnlock()
	r := d.damaged[id]
	return r == nil || !time.Now().Before(r.next)
}

// OpenFailed records the failure to open data group id's replica, logging it to log.
func (d *Set) OpenFailed(id shard.GroupID, err error, log *slog.Logger) {
	if !errors.Is(err, ErrDamaged) {
		log.Warn("opening data group", "group", id, "err", err)
		return
	}
	d.mu.Lock()
	d.noteDamaged(id, err)
	next := d.damaged[id].next
	d.mu.Unlock()
	log.Error("data group replica not started: its files are damaged", "group", id,
		"retry_in", time.Until(next).Round(time.Second), "err", err)
}

// ForgetDamaged drops the damage records of data groups no longer placed on
// this node (Set.Open drops those whose replica runs again). placed
// reports whether the shard map places group id here.
func (d *Set) ForgetDamaged(placed func(shard.GroupID) bool) {
	d.mu.Lock()
	defer d.mu.Unlock()
	for id := range d.damaged {
		if !placed(id) {
			delete(d.damaged, id)
		}
	}
}

// DamagedStates are the status rows of the data group replicas that are
// not running because their files are damaged, by group ID.
func (d *Set) DamagedStates() []*quoratev1.GroupState {
	d.mu.RLock()
	defer d.mu.RUnlock()
	var out []*quoratev1.GroupState
	for id, r := range d.damaged {
		out = append(out, &quoratev1.GroupState{Id: uint32(id), Role: "damaged",
			StorageError: r.err.Error(), StorageErrorAt: timestamppb.New(r.at)})
	}
	slices.SortFunc(out, func(a, b *quoratev1.GroupState) int { return int(a.GetId()) - int(b.GetId()) })
	return out
}
