package proxy

import (
	"bufio"
	"fmt"
	"net"
	"sync"
	"time"

	"github.com/edgerate/edge/internal/netpeek"
)

// The fast forward's pool of origin connections (fastforward.go says what
// the fast forward is): idle connections per origin address, checked
// before they are used and swept while idle.

// originPools holds a pool of idle connections per origin address.
//
// While any pool holds idle connections a sweep runs every second (a
// timer, not a goroutine), closing those idle for originIdleTimeout, as
// the transport's IdleConnTimeout does, and those the origin closed or
// sent anything on (alive), which the transport's reader would have seen:
// a pool left alone keeps no dead descriptors.
type originPools struct {
	mu      sync.Mutex
	pools   map[string]*originPool
	sweeper *time.Timer // armed while some pool holds idle connections
	closed  bool
}

// sweepEvery is how often idle origin connections are looked at.
const sweepEvery = time.Second

func (o *originPools) get(addr string) *originPool {
	o.mu.Lock()
	defer o.mu.Unlock()
	if o.pools == nil {
		o.pools = make(map[string]*originPool)
	}
	if p := o.pools[addr]; p != nil {
		return p
	}
	p := &originPool{addr: addr, owner: o}
	o.pools[addr] = p
	return p
}

// armSweep makes sure a sweep is due.
func (o *originPools) armSweep() {
	o.mu.Lock()
	defer o.mu.Unlock()
	if o.sweeper == nil && !o.closed {
		o.sweeper = time.AfterFunc(sweepEvery, func() { o.sweep(time.Now()) })
	}
}

// sweep closes the idle connections that are dead or too old at now, and
// arms the next sweep while some are left.
func (o *originPools) sweep(now time.Time) {
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

// retain retires the pools of origins not in addrs (a reload removed
// them): their idle connections are closed now, the others when their
// requests end.
func (o *originPools) retain(addrs map[string]bool) {
	o.mu.Lock()
	defer o.mu.Unlock()
	for addr, p := range o.pools {
		if !addrs[addr] {
			delete(o.pools, addr)
			p.retire()
		}
	}
}

// close closes every idle connection; connections in use are closed when
// their requests end.
func (o *originPools) close() {
	o.mu.Lock()
	defer o.mu.Unlock()
	o.closed = true
	if o.sweeper != nil {
		o.sweeper.Stop()
		o.sweeper = nil
	}
	for _, p := range o.pools {
		p.retire()
	}
}

type originPool struct {
	addr    string
	owner   *originPools
	mu      sync.Mutex
	idle    []*originConn // the most recently used last
	retired bool          // closed, or removed by a reload: nothing goes back
}

// retire closes the idle connections, and those put back from now on.
func (p *originPool) retire() {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.retired = true
	for _, oc := range p.idle {
		oc.conn.Close()
	}
	p.idle = nil
}

// sweep closes the idle connections dead or too old at now, and returns
// how many are left.
func (p *originPool) sweep(now time.Time) int {
	p.mu.Lock()
	defer p.mu.Unlock()
	kept := p.idle[:0]
	for _, oc := range p.idle {
		if now.Sub(oc.idleSince) > originIdleTimeout || !oc.alive() {
			oc.conn.Close()
			continue
		}
		kept = append(kept, oc)
	}
	clear(p.idle[len(kept):])
	p.idle = kept
	return len(kept)
}

// take returns an idle connection, or nil.
func (p *originPool) take(now time.Time) *originConn {
	p.mu.Lock()
	defer p.mu.Unlock()
	for n := len(p.idle); n > 0; n = len(p.idle) {
		oc := p.idle[n-1]
		p.idle[n-1] = nil
		p.idle = p.idle[:n-1]
		if now.Sub(oc.idleSince) <= originIdleTimeout {
			return oc
		}
		oc.conn.Close()
	}
	return nil
}

func (p *originPool) put(oc *originConn, now time.Time) {
	oc.idleSince = now
	p.mu.Lock()
	if len(p.idle) < originIdleMax && !p.retired {
		p.idle = append(p.idle, oc)
		oc = nil
	}
	p.mu.Unlock()
	if oc != nil {
		oc.conn.Close()
		return
	}
	p.owner.armSweep()
}

// originConn is a connection to an origin. Its reads are bounded while a
// response head is read, as the transport bounds them.
type originConn struct {
	conn      net.Conn
	br        *bufio.Reader
	limit     int64
	idleSince time.Time
}

func (oc *originConn) Read(b []byte) (int, error) {
	if oc.limit <= 0 {
		return 0, fmt.Errorf("read limit of %d bytes exhausted", originHeadMax)
	}
	if int64(len(b)) > oc.limit {
		b = b[:oc.limit]
	}
	n, err := oc.conn.Read(b)
	oc.limit -= int64(n)
	return n, err
}

// alive reports whether an idle origin connection is still open and has
// sent nothing: what the transport's reader, which reads every idle
// connection, would know of it. It peeks without waiting; where it cannot,
// it says no (a new connection is dialled instead).
func (oc *originConn) alive() bool {
	if oc.br != nil && oc.br.Buffered() > 0 {
		return false
	}
	pending, ok := netpeek.Pending(oc.conn)
	return ok && !pending
}
