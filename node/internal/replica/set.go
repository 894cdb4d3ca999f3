package replica

import (
	"errors"
	"slices"
	"sync"

	"github.com/quorate/quorate/shard"
)

// Set are the data group replicas this node hosts.
type Set struct {
	mu sync.RWMutex
	m  map[shard.GroupID]*Replica
	// opening are the groups whose replica is being opened (open), outside
	// mu; opens counts them, for closeAll to wait for; closed is set by
	// closeAll, after which nothing is opened.
	opening map[shard.GroupID]bool
	opens   sync.WaitGroup
	closed  bool
	// damaged are the replicas not running because their files are
	// damaged (damaged.go).
	damaged map[shard.GroupID]*damagedReplica
}

// errGroupsClosed refuses to open a replica once the node closed its data
// group replicas.
var errGroupsClosed = errors.New("node: closing: no more replicas are opened")

// NewSet returns an empty set.
func NewSet() *Set { return &Set{m: make(map[shard.GroupID]*Replica)} }

// Get returns the replica of data group id hosted here, or nil.
func (d *Set) Get(id shard.GroupID) *Replica {
	d.mu.RLock()
	defer d.mu.RUnlock()
	return d.m[id]
}

// Sorted returns the hosted data replicas by group ID.
func (d *Set) Sorted() []*Replica {
	d.mu.RLock()
	out := make([]*Replica, 0, len(d.m))
	for _, g := range d.m {
		out = append(out, g)
	}
	d.mu.RUnlock()
	slices.SortFunc(out, func(a, b *Replica) int { return int(a.ID) - int(b.ID) })
	return out
}

// Open opens data group id's replica with open and installs it. The
// opening (storage checks included) runs outside mu, so routing is not
// held up by it; only one opening of a group runs at a time, and none
// after closeAll. It returns nil and no error when the group's replica is
// installed or being opened already, and when the new replica was found
// damaged before it could be installed (then it is closed, and recorded as
// damaged).
func (d *Set) Open(id shard.GroupID, open func() (*Replica, error)) (*Replica, error) {
	d.mu.Lock()
	switch {
	case d.closed:
		d.mu.Unlock()
		return nil, errGroupsClosed
	case d.m[id] != nil || d.opening[id]:
		d.mu.Unlock()
		return nil, nil
	}
	if d.opening == nil {
		d.opening = make(map[shard.GroupID]bool)
	}
	d.opening[id] = true
	d.opens.Add(1)
	d.mu.Unlock()
	defer d.opens.Done()

	g, err := open()
	d.mu.Lock()
	delete(d.opening, id)
	installed := false
	switch {
	case err != nil:
	case d.closed:
		err = errGroupsClosed
	case g.stopping.Load():
		// Damage found after raft started: Host.damaged found the
		// replica not installed and left it to this.
		derr, _ := g.Health.Last()
		d.noteDamaged(id, derr)
	default:
		d.m[id] = g
		delete(d.damaged, id)
		installed = true
	}
	d.mu.Unlock()
	if g != nil && !installed {
		_ = g.Close()
		g = nil
	}
	return g, err
}

// Remove takes replica g out of the hosted ones, if it is still there, and
// reports whether it was.
func (d *Set) Remove(g *Replica) bool {
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.m[g.ID] != g {
		return false
	}
	delete(d.m, g.ID)
	return true
}

// CloseAll stops every data group replica, once the openings under way
// have ended, and lets no other open.
func (d *Set) CloseAll() error {
	d.mu.Lock()
	d.closed = true
	d.mu.Unlock()
	d.opens.Wait()
	d.mu.Lock()
	defer d.mu.Unlock()
	var errs []error
	for id, g := range d.m {
		errs = append(errs, g.Close())
		delete(d.m, id)
	}
	return errors.Join(errs...)
}
