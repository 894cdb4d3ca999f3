package replica

import (
	"errors"
	"runtime"
	"testing"
)

// An opening runs outside the set's mutex: the hosted replicas can be read
// meanwhile, a second opening of the same group does nothing, and CloseAll
// waits for it, then lets no other open.
func TestDataGroupsOpenOutsideTheLock(t *testing.T) {
	d := NewSet()
	started, release := make(chan struct{}), make(chan struct{})
	opened := make(chan *Replica, 1)
	go func() {
		g, err := d.Open(1, func() (*Replica, error) {
			close(started)
			<-release
			return &Replica{ID: 1}, nil
		})
		if err != nil {
			t.Errorf("open: %v", err)
		}
		opened <- g
	}()
	<-started

	// Routing reads the map while the replica opens.
	if g := d.Get(1); g != nil {
		t.Fatalf("get during the opening = %v, want nil", g)
	}
	g, err := d.Open(1, func() (*Replica, error) {
		t.Error("a second opening of group 1 ran while the first was under way")
		return &Replica{ID: 1}, nil
	})
	if g != nil || err != nil {
		t.Fatalf("second open = %v, %v; want nil, nil", g, err)
	}

	close(release)
	first := <-opened
	if first == nil || d.Get(1) != first {
		t.Fatalf("after the opening, get = %v, want the opened replica %v", d.Get(1), first)
	}
	if g, err := d.Open(1, func() (*Replica, error) {
		t.Error("an opening of an installed group ran")
		return nil, nil
	}); g != nil || err != nil {
		t.Fatalf("open of an installed group = %v, %v; want nil, nil", g, err)
	}

	if err := d.CloseAll(); err != nil {
		t.Fatal(err)
	}
	if g, err := d.Open(2, func() (*Replica, error) {
		t.Error("an opening ran after CloseAll")
		return nil, nil
	}); g != nil || !errors.Is(err, errGroupsClosed) {
		t.Fatalf("open after CloseAll = %v, %v; want nil, errGroupsClosed", g, err)
	}
}

// CloseAll waits for an opening under way and discards its replica; a
// replica found damaged before it was installed is recorded, not hosted.
func TestDataGroupsOpenRacingCloseAndDamage(t *testing.T) {
	d := NewSet()
	started, release := make(chan struct{}), make(chan struct{})
	done := make(chan error, 1)
	go func() {
		_, err := d.Open(1, func() (*Replica, error) {
			close(started)
			<-release
			return &Replica{ID: 1}, nil
		})
		done <- err
	}()
	<-started
	closed := make(chan error, 1)
	go func() { closed <- d.CloseAll() }()
	for !closing(d) {
		runtime.Gosched()
	}
	close(release)
	if err := <-done; !errors.Is(err, errGroupsClosed) {
		t.Fatalf("open racing CloseAll: %v, want errGroupsClosed", err)
	}
	if err := <-closed; err != nil {
		t.Fatal(err)
	}
	if len(d.m) != 0 {
		t.Fatalf("CloseAll left %d replicas", len(d.m))
	}

	d = NewSet()
	damage := errors.New("damaged")
	g, err := d.Open(3, func() (*Replica, error) {
		g := &Replica{ID: 3}
		g.Health.record(damage)
		g.stopping.Store(true) // as Host.damaged does, before it looks for the replica
		return g, nil
	})
	if g != nil || err != nil {
		t.Fatalf("open of a replica damaged meanwhile = %v, %v; want nil, nil", g, err)
	}
	if d.Get(3) != nil || d.damaged[3] == nil || !errors.Is(d.damaged[3].err, damage) {
		t.Fatalf("replica damaged before it was installed: hosted %v, damage record %+v", d.Get(3), d.damaged[3])
	}
}

// closing reports whether CloseAll began on d.
func closing(d *Set) bool {
	d.mu.RLock()
	defer d.mu.RUnlock()
	return d.closed
}
