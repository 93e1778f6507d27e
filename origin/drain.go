package origin

import (
	"errors"
	"maps"
	"slices"
	"sync"
	"sync/atomic"
)

// ErrDrained is why a trip found no server for its first try: every
// server of its group is drained.
var ErrDrained = errors.New("origin: every server of the group is drained")

// Drains are the servers an operator took out of rotation on this node
// (drained), by name: no trip chooses one, for a first try, a retry or a
// hash key (a drained server's keys go to their next server), nor in
// panic mode, since a drain is an order and not a guess; the requests a
// drained server has go on, and its active checks continue. One Drains
// serves every group of a domain, so a drain holds in each group that
// has the server.
//
// The zero value drains nothing; a nil *Drains drains nothing and must
// not be changed. It is safe for concurrent use: a trip reads it with
// one atomic load (none drained: a nil set), and a change copies the set.
type Drains struct {
	mu  sync.Mutex                          // serialises changes
	set atomic.Pointer[map[string]struct{}] // the names drained; nil when none
}

// Drain takes the server named name out of rotation, and reports whether
// it was in rotation.
func (d *Drains) Drain(name string) bool {
	return d.change(func(m map[string]struct{}) bool {
		if _, ok := m[name]; ok {
			return false
		}
		m[name] = struct{}{}
		return true
	})
}

// Undrain puts the server named name back in rotation, and reports
// whether it was drained.
func (d *Drains) Undrain(name string) bool {
	return d.change(func(m map[string]struct{}) bool {
		if _, ok := m[name]; !ok {
			return false
		}
		delete(m, name)
		return true
	})
}

// change applies f to a copy of the set and stores the copy if f reports
// a change.
func (d *Drains) change(f func(map[string]struct{}) bool) bool {
	d.mu.Lock()
	defer d.mu.Unlock()
	m := make(map[string]struct{})
	if cur := d.set.Load(); cur != nil {
		maps.Copy(m, *cur)
	}
	if !f(m) {
		return false
	}
	if len(m) == 0 {
		d.set.Store(nil)
	} else {
		d.set.Store(&m)
	}
	return true
}

// drained returns the set of the names drained, nil for none.
func (d *Drains) drained() map[string]struct{} {
	if d == nil {
		return nil
	}
	if m := d.set.Load(); m != nil {
		return *m
	}
	return nil
}

// Drained reports whether the server named name is drained.
func (d *Drains) Drained(name string) bool {
	_, ok := d.drained()[name]
	return ok
}

// Names are the names drained, sorted.
func (d *Drains) Names() []string {
	return slices.Sorted(maps.Keys(d.drained()))
}

// Carry returns a new Drains of the names of d that keep reports true for:
// what a reload keeps (the servers its domain still has). d may be nil.
func (d *Drains) Carry(keep func(name string) bool) *Drains {
	out := new(Drains)
	m := make(map[string]struct{})
	for name := range d.drained() {
		if keep(name) {
			m[name] = struct{}{}
		}
	}
	if len(m) > 0 {
		out.set.Store(&m)
	}
	return out
}
