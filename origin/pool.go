package origin

import (
	"bufio"
	"crypto/tls"
	"fmt"
	"net"
	"sync"
	"time"

	"github.com/edgerate/edge/internal/netpeek"
)

// The fast path's pools of origin connections: idle connections per
// origin address, checked before they are used and swept while idle.

// Pools holds a pool of idle connections per origin address, all kept
// under one Settings.IdleTotal.
//
// While any pool holds idle connections a sweep runs every second (a
// timer, not a goroutine), closing those idle for Settings.IdleTimeout,
// as the transport's IdleConnTimeout does, and those the origin closed or
// sent anything on (alive), which the transport's reader would have seen:
// a pool left alone keeps no dead descriptors.
//
// Its methods are safe for concurrent use. The zero value is not usable:
// NewPools makes one. Close stops its sweeps.
type Pools struct {
	settings Settings // resolved
	mu       sync.Mutex
	pools    map[string]*Pool
	sweeper  *time.Timer // armed while some pool holds idle connections
	closed   bool
	// idle counts the idle connections of every pool, under
	// settings.IdleTotal; each pool changes it under its own lock.
	idle idleCount
	// readers are the idle TLS connections' readers (tls.go).
	readers sync.WaitGroup
}

// sweepEvery is how often idle origin connections are looked at.
const sweepEvery = time.Second

// NewPools returns pools that keep connections as s says.
func NewPools(s Settings) *Pools {
	return &Pools{settings: s.resolved(), pools: make(map[string]*Pool)}
}

// Pool returns the pool of connections to addr (host:port), made on first
// use: in the clear for a nil t, else TLS connections made as t says
// (tls.go). Pools of the same address and TLS ID are one.
func (o *Pools) Pool(addr string, t *TLS) *Pool {
	key := addr
	if t != nil {
		key = addr + " tls " + t.id
	}
	o.mu.Lock()
	defer o.mu.Unlock()
	if p := o.pools[key]; p != nil {
		return p
	}
	p := &Pool{addr: addr, key: key, owner: o}
	if t != nil {
		p.tls = t.pools
	}
	o.pools[key] = p
	return p
}

// armSweep makes sure a sweep is due.
func (o *Pools) armSweep() {
	o.mu.Lock()
	defer o.mu.Unlock()
	if o.sweeper == nil && !o.closed {
		o.sweeper = time.AfterFunc(sweepEvery, func() { o.sweep(time.Now()) })
	}
}

// sweep closes the idle connections that are dead or too old at now, and
// arms the next sweep while some are left.
func (o *Pools) sweep(now time.Time) {
	o.mu.Lock()
	defer o.mu.Unlock()
	if o.sweeper != nil {
		o.sweeper.Stop()
		o.sweeper = nil
	}
	idle := 0
	for _, p := range o.pools {
		idle += p.sweep(now)
	}
	if idle > 0 && !o.closed {
		o.sweeper = time.AfterFunc(sweepEvery, func() { o.sweep(time.Now()) })
	}
}

// Retain retires the pools whose keys (Pool.Key) are not in keys (a
// reload removed their origins): their idle connections are closed now,
// the others when their requests end.
func (o *Pools) Retain(keys map[string]bool) {
	o.mu.Lock()
	defer o.mu.Unlock()
	for key, p := range o.pools {
		if !keys[key] {
			delete(o.pools, key)
			p.retire()
		}
	}
}

// Close closes every idle connection, stops the sweeps and waits for the
// idle connections' readers to end; connections in use are closed when
// their requests end. It is safe to call more than once.
func (o *Pools) Close() {
	o.mu.Lock()
	o.closed = true
	if o.sweeper != nil {
		o.sweeper.Stop()
		o.sweeper = nil
	}
	for _, p := range o.pools {
		p.retire()
	}
	o.mu.Unlock()
	o.readers.Wait()
}

// idleCount is the number of idle connections of a Pools, bounded.
type idleCount struct {
	mu sync.Mutex
	n  int
}

// reserve counts one more idle connection if fewer than max are.
func (c *idleCount) reserve(max int) bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.n >= max {
		return false
	}
	c.n++
	return true
}

// release counts n idle connections fewer.
func (c *idleCount) release(n int) {
	if n == 0 {
		return
	}
	c.mu.Lock()
	c.n -= n
	c.mu.Unlock()
}

// Pool is the pool of idle connections to one origin, from Pools.Pool.
// Its methods are safe for concurrent use.
type Pool struct {
	addr    string
	key     string
	tls     *tls.Config // nil: in the clear
	owner   *Pools
	mu      sync.Mutex
	idle    []*Conn // the most recently used last
	retired bool    // closed, or removed by a reload: nothing goes back
}

// Addr is the origin's address (host:port).
func (p *Pool) Addr() string { return p.addr }

// Key identifies the pool among its Pools' (Retain): its address, and its
// TLS's ID.
func (p *Pool) Key() string { return p.key }

// retire closes the idle connections, and those put back from now on.
func (p *Pool) retire() {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.retired = true
	for _, c := range p.idle {
		c.Close()
	}
	p.owner.idle.release(len(p.idle))
	p.idle = nil
}

// sweep closes the idle connections dead or too old at now, and returns
// how many are left.
func (p *Pool) sweep(now time.Time) int {
	p.mu.Lock()
	defer p.mu.Unlock()
	kept := p.idle[:0]
	for _, c := range p.idle {
		if now.Sub(c.idleSince) > p.owner.settings.IdleTimeout || !c.alive() {
			c.Close()
			continue
		}
		kept = append(kept, c)
	}
	p.owner.idle.release(len(p.idle) - len(kept))
	clear(p.idle[len(kept):])
	p.idle = kept
	return len(kept)
}

// take returns an idle connection, or nil.
func (p *Pool) take(now time.Time) *Conn {
	p.mu.Lock()
	defer p.mu.Unlock()
	for n := len(p.idle); n > 0; n = len(p.idle) {
		c := p.idle[n-1]
		p.idle[n-1] = nil
		p.idle = p.idle[:n-1]
		p.owner.idle.release(1)
		if now.Sub(c.idleSince) <= p.owner.settings.IdleTimeout {
			return c
		}
		c.Close()
	}
	return nil
}

// Put gives back c, a connection of p's whose response has been read
// whole, at now, or closes it: it is kept only if nothing the origin sent
// outside the responses asked for is left read (a byte more would be read
// as the next request's response; what the origin may yet send, the next
// RoundTrip's check finds), it is not to be used once (Request.Once, or a
// response that began before the request's body was written whole), and
// fewer than Settings.IdlePerHost connections to the origin and
// Settings.IdleTotal in all of p's Pools are idle. (At the total the
// transport closes its least recently used idle connection to make room;
// here the one put back is closed: either way no more stay idle.)
func (p *Pool) Put(c *Conn, now time.Time) {
	if c.once || c.br.Buffered() > 0 {
		c.Close()
		return
	}
	c.idleSince = now
	s := &p.owner.settings
	p.mu.Lock()
	kept := len(p.idle) < s.IdlePerHost && !p.retired && p.owner.idle.reserve(s.IdleTotal)
	if kept {
		if c.tls != nil {
			c.watchIdle(&p.owner.readers) // tls.go
		}
		p.idle = append(p.idle, c)
	}
	p.mu.Unlock()
	if !kept {
		c.Close()
		return
	}
	p.owner.armSweep()
}

// Conn is a connection to an origin, from Pool.RoundTrip. Its reads are
// bounded by Settings.HeadMax while a response head is read, as the
// transport bounds them. It is used by one request at a time.
type Conn struct {
	conn      net.Conn // the TLS connection for https
	tls       *tls.Conn
	stall     *stallConn // under tls: its writes' bound
	idle      idleReader // for tls: run while idle
	br        *bufio.Reader
	limit     int64 // bytes that may yet be read; math.MaxInt64 past the head
	headMax   int64
	idleSince time.Time
	once      bool // closed by Put: used for one response only
}

// NewConn returns c as a Conn, reading through a buffer as s says: for a
// connection dialled elsewhere (or a fake) read with ReadResponse.
func NewConn(c net.Conn, s Settings) *Conn {
	s = s.resolved()
	oc := &Conn{conn: c, limit: s.HeadMax, headMax: s.HeadMax}
	oc.br = bufio.NewReaderSize(oc.bounded(), s.ReadBuffer)
	return oc
}

// Reader is the connection's read buffer: the response's body, and what
// follows it, are read from it.
func (c *Conn) Reader() *bufio.Reader { return c.br }

// NetConn is the network connection under c (under TLS for https):
// closing it ends a response whose body is being read.
func (c *Conn) NetConn() net.Conn {
	if c.stall != nil {
		return c.stall.Conn
	}
	return c.conn
}

// Close closes the connection. Under TLS it closes the network
// connection without a close_notify alert, whose write could wait on an
// origin that stopped reading (origins take a TCP end without one, as
// from most clients).
func (c *Conn) Close() error { return c.NetConn().Close() }

// bounded is c's reader of its network connection, within c.limit.
func (c *Conn) bounded() boundedReader { return boundedReader{c} }

type boundedReader struct{ c *Conn }

func (r boundedReader) Read(b []byte) (int, error) {
	c := r.c
	if c.limit <= 0 {
		return 0, fmt.Errorf("read limit of %d bytes exhausted", c.headMax)
	}
	if int64(len(b)) > c.limit {
		b = b[:c.limit]
	}
	n, err := c.conn.Read(b)
	c.limit -= int64(n)
	return n, err
}

// alive reports whether an idle origin connection is still open and has
// sent nothing: what the transport's reader, which reads every idle
// connection, would know of it. It peeks without waiting; where it cannot,
// it says no (a new connection is dialled instead).
func (c *Conn) alive() bool {
	if c.br != nil && c.br.Buffered() > 0 {
		return false
	}
	if c.tls != nil {
		return c.idleAlive()
	}
	pending, ok := netpeek.Pending(c.conn)
	return ok && !pending
}
