package cluster

import (
	"math/rand/v2"
	"strconv"
	"sync"
	"sync/atomic"
	"time"
)

// State is the state of the circuit breaker in front of Redis.
type State int32

const (
	// Closed: Redis answers; requests use it.
	Closed State = iota
	// HalfOpen: after an open spell, one probe at a time is let through;
	// its success closes the circuit, its failure opens it again.
	HalfOpen
	// Open: Redis failed repeatedly; nothing waits for it until the open
	// spell ends.
	Open
)

// String returns "closed", "half_open" or "open" (the metric label).
func (s State) String() string {
	switch s {
	case Closed:
		return "closed"
	case HalfOpen:
		return "half_open"
	case Open:
		return "open"
	}
	return "State(" + strconv.Itoa(int(s)) + ")"
}

// Breaker settings. An open spell starts at minOpen and doubles with each
// failed probe up to maxOpen, less up to a fifth at random so that the
// nodes of a PoP do not probe in step. With maxOpen at 500 ms a Redis that
// comes back is in use again well within 2 s (rueidis dials again on the
// next command, within that command's deadline).
const (
	failThreshold = 3
	minOpen       = 100 * time.Millisecond
	maxOpen       = 500 * time.Millisecond
)

// breaker is a circuit breaker: closed until failThreshold consecutive
// failures, then open for a spell, then half-open for one probe. Its state
// is read with one atomic load on the request path; everything else takes
// the lock.
type breaker struct {
	state    atomic.Int32 // State
	failures atomic.Int32 // consecutive failures while closed
	probeFor time.Duration
	onChange func(from, to State)

	mu         sync.Mutex
	openUntil  time.Time     // Open: when a probe may start
	probeUntil time.Time     // HalfOpen: when the current probe is given up
	spell      time.Duration // the last open spell, before jitter
}

func (b *breaker) State() State { return State(b.state.Load()) }

// set changes the state. Caller holds b.mu.
func (b *breaker) set(s State) {
	from := State(b.state.Swap(int32(s)))
	if from != s && b.onChange != nil {
		b.onChange(from, s)
	}
}

// allow reports whether a round trip may go to Redis at now: always while
// closed; while open, once the spell is over, to one probe at a time
// (another may start if a probe has not reported within probeFor).
func (b *breaker) allow(now time.Time) bool {
	if b.State() == Closed {
		return true
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	switch b.State() {
	case Closed:
		return true
	case Open:
		if now.Before(b.openUntil) {
			return false
		}
		b.set(HalfOpen)
	default:
		if now.Before(b.probeUntil) {
			return false
		}
	}
	b.probeUntil = now.Add(b.probeFor)
	return true
}

// success records a round trip Redis answered. It reports whether that
// closed the circuit.
func (b *breaker) success() bool {
	if b.failures.Load() != 0 {
		b.failures.Store(0)
	}
	if b.State() == Closed {
		return false
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.State() == Closed {
		return false
	}
	b.spell = 0
	b.set(Closed)
	return true
}

// failure records a round trip Redis did not answer in time, or answered
// with an error.
func (b *breaker) failure(now time.Time) {
	if b.State() == Closed && b.failures.Add(1) < failThreshold {
		return
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	switch b.State() {
	case Closed:
		if b.failures.Load() >= failThreshold {
			b.open(now)
		}
	case HalfOpen:
		b.open(now) // the probe failed
	}
}

// open starts an open spell. Caller holds b.mu.
func (b *breaker) open(now time.Time) {
	b.spell = min(max(2*b.spell, minOpen), maxOpen)
	b.openUntil = now.Add(b.spell - rand.N(b.spell/5))
	b.failures.Store(0)
	b.set(Open)
}

// untilProbe returns how long until a probe may start: 0 when one may
// start now or the circuit is closed.
func (b *breaker) untilProbe(now time.Time) time.Duration {
	if b.State() == Closed {
		return 0
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	switch b.State() {
	case Open:
		return max(b.openUntil.Sub(now), 0)
	case HalfOpen:
		return max(b.probeUntil.Sub(now), 0)
	}
	return 0
}
