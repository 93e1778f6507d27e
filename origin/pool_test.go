package origin

import (
	"errors"
	"net"
	"sync"
	"testing"
	"time"
)

// idleOrigin accepts connections and keeps them; closing one of the
// origin's ends is the test's to do.
type idleOrigin struct {
	ln    net.Listener
	mu    sync.Mutex
	conns []net.Conn
	done  chan struct{}
}

func startIdleOrigin(t *testing.T) *idleOrigin {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	o := &idleOrigin{ln: ln, done: make(chan struct{})}
	go func() {
		defer close(o.done)
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			o.mu.Lock()
			o.conns = append(o.conns, c)
			o.mu.Unlock()
		}
	}()
	t.Cleanup(func() {
		ln.Close()
		<-o.done
		o.mu.Lock()
		for _, c := range o.conns {
			c.Close()
		}
		o.mu.Unlock()
	})
	return o
}

// dialIdle dials n connections to o and waits until o has accepted them.
func (o *idleOrigin) dialIdle(t *testing.T, n int) []*Conn {
	t.Helper()
	var out []*Conn
	for range n {
		c, err := net.Dial("tcp", o.ln.Addr().String())
		if err != nil {
			t.Fatal(err)
		}
		out = append(out, NewConn(c, Settings{}))
	}
	for {
		o.mu.Lock()
		got := len(o.conns)
		o.mu.Unlock()
		if got >= n {
			return out
		}
		time.Sleep(time.Millisecond)
	}
}

// closedByPeer reports whether c's peer has closed it: a read fails.
func closedByPeer(c net.Conn) bool {
	c.SetReadDeadline(time.Now().Add(100 * time.Millisecond))
	var b [1]byte
	_, err := c.Read(b[:])
	var ne net.Error
	return err != nil && !(errors.As(err, &ne) && ne.Timeout())
}

// TestOriginPoolSweep: idle connections older than the transport's
// IdleConnTimeout, and those the origin closed or wrote to, are closed by
// the sweep; the others stay, and the sweep is armed while any stay.
func TestOriginPoolSweep(t *testing.T) {
	o := startIdleOrigin(t)
	pools := NewPools(Settings{})
	defer pools.Close()
	pool := pools.Pool(o.ln.Addr().String(), nil)
	cs := o.dialIdle(t, 4)
	now := time.Now()
	pool.Put(cs[0], now.Add(-DefaultIdleTimeout-time.Second)) // too old
	pool.Put(cs[1], now)                                      // the origin closes it
	pool.Put(cs[2], now)                                      // the origin writes to it
	pool.Put(cs[3], now)                                      // stays
	o.mu.Lock()
	o.conns[1].Close()
	o.conns[2].Write([]byte("HTTP/1.1 200 OK\r\n\r\n"))
	o.mu.Unlock()
	pools.mu.Lock()
	armed := pools.sweeper != nil
	pools.mu.Unlock()
	if !armed {
		t.Fatal("no sweep armed with idle connections in the pool")
	}
	// The origin's close and write take a moment to arrive.
	for deadline := time.Now().Add(5 * time.Second); ; {
		pools.sweep(now)
		pool.mu.Lock()
		n := len(pool.idle)
		pool.mu.Unlock()
		if n == 1 || time.Now().After(deadline) {
			break
		}
		time.Sleep(time.Millisecond)
	}
	pool.mu.Lock()
	idle := append([]*Conn(nil), pool.idle...)
	pool.mu.Unlock()
	if len(idle) != 1 || idle[0] != cs[3] {
		t.Fatalf("%d idle connections left, want only the live, recent one", len(idle))
	}
	o.mu.Lock()
	for i, want := range []bool{true, false, false, false} {
		if i == 0 || i == 3 {
			if got := closedByPeer(o.conns[i]); got != want {
				t.Errorf("origin's end of connection %d: closed by edge %v, want %v", i, got, want)
			}
		}
	}
	o.mu.Unlock()
	// Once the last one is gone, no sweep stays armed.
	o.mu.Lock()
	o.conns[3].Close()
	o.mu.Unlock()
	for deadline := time.Now().Add(5 * time.Second); ; {
		pools.sweep(now)
		pools.mu.Lock()
		armed = pools.sweeper != nil
		pools.mu.Unlock()
		if !armed || time.Now().After(deadline) {
			break
		}
		time.Sleep(time.Millisecond)
	}
	if armed {
		t.Error("a sweep is still armed with no idle connection left")
	}
}

// TestOriginPoolRetain: the pools of origins a reload removed close their
// idle connections at once, and those put back later; the others keep
// theirs.
func TestOriginPoolRetain(t *testing.T) {
	kept, gone := startIdleOrigin(t), startIdleOrigin(t)
	pools := NewPools(Settings{})
	defer pools.Close()
	kp, gp := pools.Pool(kept.ln.Addr().String(), nil), pools.Pool(gone.ln.Addr().String(), nil)
	kc, gc := kept.dialIdle(t, 1), gone.dialIdle(t, 2)
	now := time.Now()
	kp.Put(kc[0], now)
	gp.Put(gc[0], now)
	pools.Retain(map[string]bool{kept.ln.Addr().String(): true})
	gp.Put(gc[1], now) // a request on the old configuration ends
	gone.mu.Lock()
	for i, c := range gone.conns {
		if !closedByPeer(c) {
			t.Errorf("connection %d to the removed origin is still open", i)
		}
	}
	gone.mu.Unlock()
	if len(kp.idle) != 1 {
		t.Errorf("the kept origin's pool has %d idle connections, want 1", len(kp.idle))
	}
	if pools.Pool(gone.ln.Addr().String(), nil) == gp {
		t.Error("the removed origin's pool is still handed out")
	}
}

// TestIdleTotal: one Settings.IdleTotal bounds the transport's idle
// connections (MaxIdleConns) and those of all pools of a Pools together:
// a connection put back beyond it is closed, and one taken or swept makes
// room again.
func TestIdleTotal(t *testing.T) {
	s := Settings{IdlePerHost: 2, IdleTotal: 3}
	if got := s.Transport().MaxIdleConns; got != 3 {
		t.Errorf("the transport's MaxIdleConns is %d, want IdleTotal's 3", got)
	}
	a, b := startIdleOrigin(t), startIdleOrigin(t)
	pools := NewPools(s)
	defer pools.Close()
	pa, pb := pools.Pool(a.ln.Addr().String(), nil), pools.Pool(b.ln.Addr().String(), nil)
	ca, cb := a.dialIdle(t, 2), b.dialIdle(t, 3)
	now := time.Now()
	pa.Put(ca[0], now)
	pa.Put(ca[1], now)
	pb.Put(cb[0], now)
	pb.Put(cb[1], now) // a fourth: beyond the total, though b's pool has room
	b.mu.Lock()
	if !closedByPeer(b.conns[1]) {
		t.Error("the connection put back beyond IdleTotal is still open")
	}
	if closedByPeer(b.conns[0]) {
		t.Error("the connection put back within IdleTotal was closed")
	}
	b.mu.Unlock()
	if got := len(pb.idle); got != 1 {
		t.Errorf("b's pool has %d idle connections, want 1", got)
	}
	// One taken from a's pool makes room in b's.
	if pa.take(now) == nil {
		t.Fatal("a's pool gave no idle connection")
	}
	pb.Put(cb[2], now)
	if got := len(pb.idle); got != 2 {
		t.Errorf("after one was taken from a's pool, b's pool has %d idle connections, want 2", got)
	}
	// One swept (its origin closed it) makes room too; so does a retired
	// pool's.
	b.mu.Lock()
	b.conns[0].Close()
	b.mu.Unlock()
	for deadline := time.Now().Add(5 * time.Second); ; {
		pools.sweep(now)
		pb.mu.Lock()
		n := len(pb.idle)
		pb.mu.Unlock()
		if n == 1 || time.Now().After(deadline) {
			break
		}
		time.Sleep(time.Millisecond)
	}
	pools.Retain(map[string]bool{b.ln.Addr().String(): true})
	pools.idle.mu.Lock()
	got := pools.idle.n
	pools.idle.mu.Unlock()
	if got != 1 {
		t.Errorf("%d idle connections counted, want 1 (b's last)", got)
	}
}
