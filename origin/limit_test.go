package origin

import (
	"context"
	"errors"
	"fmt"
	"net/url"
	"sync"
	"testing"
	"testing/synctest"
	"time"
)

// limited makes a group of len(max) servers, server i bounded to max[i]
// requests in flight (0: none), waiting in q (nil: none).
func limited(t *testing.T, o UpstreamOptions, q *Queue, max ...int) *Upstream {
	t.Helper()
	for i, m := range max {
		u, _ := url.Parse(fmt.Sprintf("http://10.0.0.%d:80", i+1))
		o.Servers = append(o.Servers, ServerOptions{URL: u, Name: u.String(), Weight: 1, MaxInFlight: m})
	}
	o.Queue = q
	g, err := NewUpstream(o)
	if err != nil {
		t.Fatal(err)
	}
	return g
}

func newQueue(t *testing.T, max int, timeout time.Duration) *Queue {
	t.Helper()
	q, err := NewQueue(QueueOptions{Max: max, Timeout: timeout})
	if err != nil {
		t.Fatal(err)
	}
	return q
}

// hold starts a trip on g and takes its first server, which it keeps.
func hold(t *testing.T, g *Upstream) (*Trip, *Server) {
	t.Helper()
	trip := g.Start(t0, nil)
	s, err := trip.Next(context.Background(), t0)
	if err != nil || s == nil {
		t.Fatalf("hold: got %v, %v, want a server", s, err)
	}
	return &trip, s
}

// TestLimitNotChosen: a server at its max_in_flight is chosen by no
// policy, and is chosen again once its slot is given back.
func TestLimitNotChosen(t *testing.T) {
	for _, b := range []Balance{RoundRobin, LeastRequests, RandomTwo, Hash} {
		t.Run(fmt.Sprint(b), func(t *testing.T) {
			g := limited(t, UpstreamOptions{Balance: b}, nil, 1, 0, 0)
			a := g.Servers()[0]
			// Take a's one slot by trips until one lands on it.
			var held *Trip
			for i := range 100 {
				trip := g.Start(t0, []byte{byte(i)}) // keys for hash
				s := next(&trip, t0)
				if s == a {
					held = &trip
					break
				}
				trip.End(s, 200, 0, 0, t0)
			}
			if held == nil {
				t.Fatal("no trip chose the limited server")
			}
			for i := range 200 {
				key := []byte{byte(i)}
				if s := pick(g, t0, key, 200, 0); s == a {
					t.Fatalf("chose %s at its max_in_flight", s.Name)
				}
			}
			held.End(a, 200, 0, 0, t0)
			seen := false
			for i := range 200 {
				seen = seen || pick(g, t0, []byte{byte(i)}, 200, 0) == a
			}
			if !seen {
				t.Error("the server was not chosen again once below its limit")
			}
		})
	}
}

// TestLimitRefusedAtOnce: without a queue that waits, a request that
// finds every server at its limit gets ErrBusy, and takes no slot.
func TestLimitRefusedAtOnce(t *testing.T) {
	tests := []struct {
		name  string
		queue *Queue
		max   []int
	}{
		{"one server, no queue", nil, []int{1}},
		{"two servers, no queue", nil, []int{1, 1}},
		{"a queue of timeout 0", newQueue(t, 10, 0), []int{1}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			g := limited(t, UpstreamOptions{}, tt.queue, tt.max...)
			for range tt.max {
				hold(t, g)
			}
			trip := g.Start(t0, nil)
			s, err := trip.Next(context.Background(), t0)
			if s != nil || !errors.Is(err, ErrBusy) || errors.Is(err, ErrQueueTimeout) {
				t.Errorf("got %v, %v, want ErrBusy", s, err)
			}
			for _, s := range g.Servers() {
				if n := s.InFlight(); n != 1 {
					t.Errorf("%s has %d in flight, want 1", s.Name, n)
				}
			}
		})
	}
}

// waitFor runs a trip's Next on g in a goroutine, and returns what it
// got on a channel.
type got struct {
	s   *Server
	err error
	at  time.Time
}

func waitFor(ctx context.Context, g *Upstream) <-chan got {
	ch := make(chan got, 1)
	go func() {
		trip := g.Start(t0, nil)
		s, err := trip.Next(ctx, t0)
		ch <- got{s, err, time.Now()}
	}()
	return ch
}

// TestQueueFIFO: requests wait in the order they came, at most max of
// them (one more is refused at once), and each slot given back admits
// the oldest waiter, and only it.
func TestQueueFIFO(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		q := newQueue(t, 3, time.Minute)
		g := limited(t, UpstreamOptions{}, q, 1)
		held, s := hold(t, g)
		var waiting []<-chan got
		for range 3 {
			waiting = append(waiting, waitFor(t.Context(), g))
			synctest.Wait() // each in the queue before the next comes
		}
		if n := q.Waiting(); n != 3 {
			t.Fatalf("waiting %d, want 3", n)
		}
		over := g.Start(t0, nil)
		if s, err := over.Next(t.Context(), t0); s != nil || !errors.Is(err, ErrBusy) {
			t.Fatalf("the 4th request past max 3: got %v, %v, want ErrBusy at once", s, err)
		}
		held.End(s, 200, 0, 0, t0)
		for i, ch := range waiting {
			synctest.Wait()
			for j, later := range waiting[i+1:] {
				select {
				case r := <-later:
					t.Fatalf("waiter %d woke (%v, %v) before waiter %d's turn", i+1+j, r.s, r.err, i)
				default:
				}
			}
			r := <-ch
			if r.s != s || r.err != nil {
				t.Fatalf("waiter %d: got %v, %v, want the server", i, r.s, r.err)
			}
			if n := s.InFlight(); n != 1 {
				t.Errorf("in flight %d after the hand-over, want 1", n)
			}
			trip := Trip{u: g}
			trip.End(r.s, 200, 0, 0, t0)
		}
		if n := s.InFlight(); n != 0 || q.Waiting() != 0 {
			t.Errorf("in flight %d, waiting %d at the end, want 0, 0", n, q.Waiting())
		}
	})
}

// TestQueueTimeout: a request waits the queue's timeout, no more, and is
// then refused with ErrQueueTimeout, leaving the queue.
func TestQueueTimeout(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		q := newQueue(t, 10, 250*time.Millisecond)
		g := limited(t, UpstreamOptions{}, q, 1)
		hold(t, g)
		start := time.Now()
		r := <-waitFor(t.Context(), g)
		if r.s != nil || !errors.Is(r.err, ErrQueueTimeout) || !errors.Is(r.err, ErrBusy) {
			t.Errorf("got %v, %v, want ErrQueueTimeout", r.s, r.err)
		}
		if waited := r.at.Sub(start); waited != 250*time.Millisecond {
			t.Errorf("waited %s, want the timeout, 250ms", waited)
		}
		if n := q.Waiting(); n != 0 {
			t.Errorf("waiting %d after the timeout, want 0", n)
		}
	})
}

// TestQueueClientLeaves: a request whose client leaves stops waiting at
// once with its context's error, and the next slot given back goes to
// the waiter behind it.
func TestQueueClientLeaves(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		q := newQueue(t, 10, time.Minute)
		g := limited(t, UpstreamOptions{}, q, 1)
		held, s := hold(t, g)
		ctx, cancel := context.WithCancel(t.Context())
		gone := waitFor(ctx, g)
		synctest.Wait()
		next := waitFor(t.Context(), g)
		synctest.Wait()
		cancel()
		if r := <-gone; r.s != nil || !errors.Is(r.err, context.Canceled) {
			t.Fatalf("the client that left: got %v, %v, want context.Canceled", r.s, r.err)
		}
		if n := q.Waiting(); n != 1 {
			t.Fatalf("waiting %d once it left, want 1", n)
		}
		held.End(s, 200, 0, 0, t0)
		if r := <-next; r.s != s || r.err != nil {
			t.Errorf("the waiter behind: got %v, %v, want the server", r.s, r.err)
		}
	})
}

// TestQueueWaitsForAnyServer: with two servers at their limits, a slot
// given back on either admits the waiter; a server it tried already is
// not handed to it.
func TestQueueWaitsForAnyServer(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		q := newQueue(t, 10, time.Minute)
		g := limited(t, UpstreamOptions{Retries: RetryOptions{Attempts: 1, On: FailConnect, Budget: 1}}, q, 1, 1)
		a, b := g.Servers()[0], g.Servers()[1]
		// A trip that tried a (connect error) and retries while a and b
		// are both taken: only b's slot admits it.
		retrying := g.Start(t0, nil)
		first, err := retrying.Next(t.Context(), t0)
		if err != nil {
			t.Fatal(err)
		}
		other := map[*Server]*Server{a: b, b: a}[first]
		heldOther, _ := hold(t, g) // the other server's one slot
		heldFirst := g.Start(t0, nil)
		retrying.End(first, 0, FailConnect, 0, t0)
		if s, err := heldFirst.Next(t.Context(), t0); s != first || err != nil {
			t.Fatalf("got %v, %v, want %s", s, err, first.Name)
		}
		if !retrying.MayRetry(FailConnect, true, t0) {
			t.Fatal("no retry")
		}
		ch := make(chan got, 1)
		go func() {
			s, err := retrying.Next(t.Context(), t0)
			ch <- got{s: s, err: err}
		}()
		synctest.Wait()
		heldFirst.End(first, 200, 0, 0, t0) // tried by the retrying trip: not its
		synctest.Wait()
		select {
		case r := <-ch:
			t.Fatalf("the retry took %v, %v: a server it tried", r.s, r.err)
		default:
		}
		heldOther.End(other, 200, 0, 0, t0)
		if r := <-ch; r.s != other || r.err != nil {
			t.Errorf("the retry got %v, %v, want %s", r.s, r.err, other.Name)
		}
	})
}

// TestRetryRespectsLimit: a retry is not sent to a server at its limit:
// with no other server free and no queue, it is refused with ErrBusy.
func TestRetryRespectsLimit(t *testing.T) {
	g := limited(t, UpstreamOptions{Retries: RetryOptions{Attempts: 2, On: FailConnect, Budget: 1}}, nil, 1, 1)
	trip := g.Start(t0, nil)
	first := next(&trip, t0)
	hold(t, g) // the other server's slot
	trip.End(first, 0, FailConnect, 0, t0)
	if !trip.MayRetry(FailConnect, true, t0) {
		t.Fatal("no retry")
	}
	if s, err := trip.Next(context.Background(), t0); s != nil || !errors.Is(err, ErrBusy) {
		t.Errorf("the retry: got %v, %v, want ErrBusy", s, err)
	}
}

// TestLimitHoldsUnderLoad: many requests at once on a group of limited
// servers with a queue never put more than a server's limit in flight on
// it, and every one is served (the queue is long enough and waits).
func TestLimitHoldsUnderLoad(t *testing.T) {
	q := newQueue(t, 1000, time.Minute)
	g := limited(t, UpstreamOptions{Balance: LeastRequests}, q, 2, 3)
	var over sync.Map
	var wg sync.WaitGroup
	for range 64 {
		wg.Go(func() {
			for range 50 {
				trip := g.Start(t0, nil)
				s, err := trip.Next(context.Background(), t0)
				if err != nil {
					over.Store("error", err)
					return
				}
				if n := s.InFlight(); n > s.MaxInFlight {
					over.Store(s.Name, n)
				}
				trip.End(s, 200, 0, 0, t0)
			}
		})
	}
	wg.Wait()
	over.Range(func(k, v any) bool {
		t.Errorf("%v: %v", k, v)
		return true
	})
	for _, s := range g.Servers() {
		if n := s.InFlight(); n != 0 {
			t.Errorf("%s: %d in flight at the end, want 0", s.Name, n)
		}
	}
}

// BenchmarkTripLimit is BenchmarkTrip's three servers without a limit,
// beside a limit never reached (without and with a queue that waits).
func BenchmarkTripLimit(b *testing.B) {
	for _, c := range []struct {
		name  string
		max   int
		queue bool
	}{{"max_in_flight=none", 0, false}, {"max_in_flight=1000", 1000, false}, {"max_in_flight=1000,queue", 1000, true}} {
		b.Run(c.name, func(b *testing.B) {
			var t testing.T
			var q *Queue
			if c.queue {
				q = newQueue(&t, 1000, time.Second)
			}
			g := limited(&t, UpstreamOptions{}, q, c.max, c.max, c.max)
			b.ReportAllocs()
			b.RunParallel(func(pb *testing.PB) {
				ctx := context.Background()
				for pb.Next() {
					trip := g.Start(t0, nil)
					s, _ := trip.Next(ctx, t0)
					trip.End(s, 200, 0, time.Millisecond, t0)
				}
			})
		})
	}
}

// TestOfferAfterUndrain: a request waiting while the group's other
// server is drained takes that server once it is undrained and offered,
// without waiting for a slot to be given back.
func TestOfferAfterUndrain(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		drains := new(Drains)
		q := newQueue(t, 10, time.Minute)
		g := limited(t, UpstreamOptions{Drains: drains}, q, 1, 1)
		drains.Drain(name(1))
		_, a := hold(t, g)
		if a.Name != name(0) {
			t.Fatalf("held %s, want %s (the other is drained)", a.Name, name(0))
		}
		ch := waitFor(t.Context(), g)
		synctest.Wait()
		if n := q.Waiting(); n != 1 {
			t.Fatalf("waiting %d, want 1", n)
		}
		g.Offer(t0) // nothing free yet: it waits on
		synctest.Wait()
		if n := q.Waiting(); n != 1 {
			t.Fatalf("after an offer with nothing free: waiting %d, want 1", n)
		}
		drains.Undrain(name(1))
		g.Offer(t0)
		r := <-ch
		if r.err != nil || r.s == nil || r.s.Name != name(1) {
			t.Fatalf("the waiter: got %v, %v, want %s", r.s, r.err, name(1))
		}
		if n := r.s.InFlight(); n != 1 || q.Waiting() != 0 {
			t.Errorf("in flight %d, waiting %d, want 1, 0", n, q.Waiting())
		}
	})
}
