package proxy

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
func (o *idleOrigin) dialIdle(t *testing.T, n int) []*originConn {
	t.Helper()
	var out []*originConn
	for range n {
		c, err := net.Dial("tcp", o.ln.Addr().String())
		if err != nil {
			t.Fatal(err)
		}
		out = append(out, &originConn{conn: c})
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
	var pools originPools
	defer pools.close()
	pool := pools.get(o.ln.Addr().String())
	cs := o.dialIdle(t, 4)
	now := time.Now()
	pool.put(cs[0], now.Add(-originIdleTimeout-time.Second)) // too old
	pool.put(cs[1], now)                                     // the origin closes it
	pool.put(cs[2], now)                                     // the origin writes to it
	pool.put(cs[3], now)                                     // stays
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
	idle := append([]*originConn(nil), pool.idle...)
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
	var pools originPools
	defer pools.close()
	kp, gp := pools.get(kept.ln.Addr().String()), pools.get(gone.ln.Addr().String())
	kc, gc := kept.dialIdle(t, 1), gone.dialIdle(t, 2)
	now := time.Now()
	kp.put(kc[0], now)
	gp.put(gc[0], now)
	pools.retain(map[string]bool{kept.ln.Addr().String(): true})
	gp.put(gc[1], now) // a request on the old configuration ends
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
	if pools.get(gone.ln.Addr().String()) == gp {
		t.Error("the removed origin's pool is still handed out")
	}
}

// TestReloadRetiresOriginPool: a reload that changes a domain's origin
// closes the idle connections to the old one (they stayed open until
// shutdown).
func TestReloadRetiresOriginPool(t *testing.T) {
	oldOrigin, _ := newOrigin(t, "old")
	newOrigin, _ := newOrigin(t, "new")
	e := newEnv(t, oneDomain(oldOrigin.URL, rule("r", 100, time.Minute)))
	addr := oldOrigin.Listener.Addr().String()
	c, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	e.proxy.origins.get(addr).put(&originConn{conn: c}, time.Now())
	if _, err := e.proxy.Reload(compile(t, oneDomain(newOrigin.URL, rule("r", 100, time.Minute))), "second"); err != nil {
		t.Fatal(err)
	}
	c.SetReadDeadline(time.Now().Add(time.Second)) // fails at once if closed
	if _, err := c.Read(make([]byte, 1)); !errors.Is(err, net.ErrClosed) {
		t.Errorf("the idle connection to the removed origin: read gave %v, want it closed", err)
	}
	if _, ok := e.proxy.origins.pools[addr]; ok {
		t.Error("the removed origin's pool is still kept")
	}
}
