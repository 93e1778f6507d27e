package origin

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"time"
)

// A limit per server (ServerOptions.MaxInFlight) and the queue where a
// request waits when every server that could take it is at its limit, as
// HAProxy's maxconn and its queue do. Both request paths meet them in
// Trip.Next, and a retry's Next as much as a first try's.
//
// A group without a limited server never comes here: its Next and End
// are as they were, an atomic add each. A limited server's slot is taken
// by a compare-and-swap below the bound. In a group whose queue waits
// (Timeout above 0) the slots of its limited servers are taken and given
// back under the queue's lock, so that a slot given back while requests
// wait goes straight to the oldest one that can use it (FIFO, one waiter
// woken per slot, none waking to find the slot gone), and a request that
// finds every server full cannot miss the slot given back as it joins the
// queue. How it behaves, and why: docs/origins.md, "A limit per server".

// ErrBusy is the error of a request that no server took because every
// one that could was at its MaxInFlight, and it could not wait: the group
// has no queue that waits, or the queue held its Max. ErrQueueTimeout is
// that of one that waited the queue's Timeout; it wraps ErrBusy.
var (
	ErrBusy         = errors.New("origin: every server that could take the request is at its max_in_flight")
	ErrQueueTimeout = fmt.Errorf("%w, and it waited the queue's timeout", ErrBusy)
)

// QueueOptions make a Queue: at most Max requests wait at once (at least
// 1), each at most Timeout (0: none waits, a request is refused at once).
type QueueOptions struct {
	Max     int
	Timeout time.Duration
}

// Queue is where the requests of one domain wait for a server below its
// MaxInFlight, in the order they came; the groups of a domain may share
// it (UpstreamOptions.Queue). Its methods are safe for concurrent use.
type Queue struct {
	opts QueueOptions

	mu         sync.Mutex // the list, and the slots of limited servers of the groups that wait here
	head, tail *waiter
	n          int
	waiting    atomic.Int64 // n, read without the lock
}

// NewQueue returns the queue o describes.
func NewQueue(o QueueOptions) (*Queue, error) {
	if o.Max < 1 || o.Timeout < 0 {
		return nil, fmt.Errorf("origin: a queue needs a Max of at least 1 and a Timeout of at least 0, got %d and %s", o.Max, o.Timeout)
	}
	return &Queue{opts: o}, nil
}

// Options are the options the queue was made with.
func (q *Queue) Options() QueueOptions { return q.opts }

// Waiting is how many requests wait now.
func (q *Queue) Waiting() int64 { return q.waiting.Load() }

// waiter is a request waiting in a Queue, until a server's slot is handed
// to it (the server's index in its group, on ready) or it gives up.
// It holds the trip's group and tried servers, not the trip: a pointer to
// the trip would move every trip to the heap.
type waiter struct {
	u          *Upstream
	tried      uint64
	prev, next *waiter
	queued     bool
	ready      chan int
}

func (q *Queue) push(w *waiter) {
	w.prev, w.queued = q.tail, true
	if q.tail != nil {
		q.tail.next = w
	} else {
		q.head = w
	}
	q.tail = w
	q.n++
	q.waiting.Store(int64(q.n))
}

func (q *Queue) remove(w *waiter) {
	if w.prev != nil {
		w.prev.next = w.next
	} else {
		q.head = w.next
	}
	if w.next != nil {
		w.next.prev = w.prev
	} else {
		q.tail = w.prev
	}
	w.prev, w.next, w.queued = nil, nil, false
	q.n--
	q.waiting.Store(int64(q.n))
}

// full reports whether s is at its MaxInFlight.
func (s *Server) full() bool {
	return s.MaxInFlight > 0 && s.st.inFlight.Load() >= s.MaxInFlight
}

// take counts a request in flight on s, if s is below its MaxInFlight.
func (s *Server) take() bool {
	if s.MaxInFlight == 0 {
		s.st.inFlight.Add(1)
		return true
	}
	for {
		n := s.st.inFlight.Load()
		if n >= s.MaxInFlight {
			return false
		}
		if s.st.inFlight.CompareAndSwap(n, n+1) {
			return true
		}
	}
}

// nextLimited is Next for a group with a limited server.
func (t *Trip) nextLimited(ctx context.Context, now time.Time) (*Server, error) {
	u, q := t.u, t.u.queue
	if q != nil {
		q.mu.Lock()
	}
	var c choice
	for {
		c = u.choose(t, now)
		if c.s != nil && !c.s.take() {
			continue // taken meanwhile (a try of a group without this lock): choose again
		}
		if c.s == nil && c.busy && q != nil && q.n < q.opts.Max {
			break // wait
		}
		if q != nil {
			q.mu.Unlock()
		}
		t.chosen(c)
		if c.s == nil && c.busy {
			return nil, ErrBusy
		}
		return c.s, nil
	}
	w := &waiter{u: u, tried: t.tried, ready: make(chan int, 1)}
	q.push(w)
	q.mu.Unlock()
	timer := time.NewTimer(q.opts.Timeout)
	defer timer.Stop()
	var err error
	select {
	case i := <-w.ready:
		return t.handed(i), nil
	case <-timer.C:
		err = ErrQueueTimeout
	case <-ctx.Done():
		err = ctx.Err()
	}
	q.mu.Lock()
	queued := w.queued
	if queued {
		q.remove(w)
	}
	q.mu.Unlock()
	if queued {
		return nil, err
	}
	// A slot was handed over as the wait ended: a request whose time ran
	// out takes it; one whose client left gives it on.
	i := <-w.ready
	if err == ErrQueueTimeout {
		return t.handed(i), nil
	}
	u.release(u.servers[i], now)
	return nil, err
}

// handed counts the try on the server of index i handed to the trip.
func (t *Trip) handed(i int) *Server {
	t.chosen(choice{s: t.u.servers[i], i: i})
	return t.u.servers[i]
}

// release gives back a slot of s at now: to the oldest request waiting
// that can use it, if any (its count in flight stays: the slot changes
// hands), else to no one.
func (u *Upstream) release(s *Server, now time.Time) {
	q := u.queue
	if s.MaxInFlight == 0 || q == nil {
		s.st.inFlight.Add(-1)
		return
	}
	q.mu.Lock()
	defer q.mu.Unlock()
	for w := q.head; w != nil; w = w.next {
		if i := w.u.canTake(w.tried, s.st, now); i >= 0 {
			q.remove(w)
			w.ready <- i // buffered: never blocks
			return
		}
	}
	s.st.inFlight.Add(-1)
}

// canTake returns the index of u's server on st if a trip that tried the
// servers of tried may take the slot given back on it at now (eligible,
// and below its MaxInFlight once the slot is given back), else -1. The
// caller holds the queue's lock.
func (u *Upstream) canTake(tried uint64, st *serverState, now time.Time) int {
	for i, s := range u.servers {
		if s.st != st {
			continue
		}
		if !u.eligible(i, tried, now) || s.MaxInFlight > 0 && st.inFlight.Load() > s.MaxInFlight {
			return -1
		}
		return i
	}
	return -1
}

// eligible reports whether a trip that tried the servers of tried may be
// handed servers[i] at now: not tried, not drained, and healthy or the
// group in panic mode.
func (u *Upstream) eligible(i int, tried uint64, now time.Time) bool {
	if tried&(1<<i) != 0 || u.drainedMask()&(1<<i) != 0 {
		return false
	}
	if u.servers[i].Healthy(now) || len(u.servers) == 1 {
		return true
	}
	healthy := 0
	for _, o := range u.servers {
		if o.Healthy(now) {
			healthy++
		}
	}
	return healthy*2 < len(u.servers) // panic mode: an unhealthy server is chosen too
}

// Offer gives the requests waiting for a server of u the slots free now
// on its servers, the oldest waiter first: for when a server comes back
// in rotation (undrained), which no slot given back would announce.
// Without a queue that waits it does nothing.
func (u *Upstream) Offer(now time.Time) {
	q := u.queue
	if q == nil {
		return
	}
	q.mu.Lock()
	defer q.mu.Unlock()
	for w := q.head; w != nil; {
		next := w.next
		if w.u == u {
			if i := u.free(w.tried, now); i >= 0 {
				q.remove(w)
				w.ready <- i // buffered: never blocks
			}
		}
		w = next
	}
}

// free takes a slot on a server of u that a trip that tried the servers
// of tried may use at now (eligible, and below its MaxInFlight: take)
// and returns its index, or -1 for none. The caller holds the queue's
// lock.
func (u *Upstream) free(tried uint64, now time.Time) int {
	for i, s := range u.servers {
		if u.eligible(i, tried, now) && s.take() {
			return i
		}
	}
	return -1
}
