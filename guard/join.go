package guard

import (
	"errors"
	"net"
	"net/netip"
	"sync"
	"sync/atomic"

	"github.com/edgerate/edge/internal/wire"
)

// Socket is one listening socket of a Listener that serves several (see
// Join): the public listener's plain and TLS sockets share one connection
// cap and one server, each with its own setup stages.
type Socket struct {
	net.Listener
	// Name is what ListenerOptions.OnConnections reports for the
	// socket's connections ("public", "tls").
	Name string
	// Stages run on the socket's connections instead of
	// ListenerOptions.Stages (see Stage).
	Stages []Stage
}

// Join returns one net.Listener that accepts from every socket, for
// NewListener: each accepted connection keeps its socket's name and
// stages. Its Addr is the first socket's; its Close closes every socket
// and returns once their accepting goroutines have stopped. It needs at
// least one socket.
func Join(sockets ...Socket) (net.Listener, error) {
	if len(sockets) == 0 {
		return nil, errors.New("guard: Join needs a socket")
	}
	j := &joined{sockets: append([]Socket(nil), sockets...), conns: make(chan joinedResult), stop: make(chan struct{})}
	for i := range j.sockets {
		j.wg.Add(1)
		go j.acceptFrom(&j.sockets[i])
	}
	return j, nil
}

type joined struct {
	sockets []Socket
	conns   chan joinedResult
	stop    chan struct{}
	once    sync.Once
	wg      sync.WaitGroup
	// admit is the Listener's ListenerOptions.Admit, set by NewListener
	// before the first Accept: each socket's goroutine decides on its own
	// connections, so that a refused one is closed there and never passes
	// to the Listener (a goroutine's hand-off, per connection of a flood).
	admit atomic.Pointer[func(netip.Addr, string) wire.Admission]
}

type joinedResult struct {
	c   net.Conn
	err error
}

// joinedConn is an accepted connection with the socket it came from, which
// the Listener unwraps as it accepts it.
type joinedConn struct {
	net.Conn
	socket *Socket
	adm    wire.Admission // what admit decided; zero without it
	asked  bool           // admit decided
}

// acceptFrom accepts s's connections until s fails for good or j closes.
func (j *joined) acceptFrom(s *Socket) {
	defer j.wg.Done()
	for {
		c, err := s.Accept()
		var r joinedResult
		if err != nil {
			r.err = err
		} else {
			jc := &joinedConn{Conn: c, socket: s}
			if admit := j.admit.Load(); admit != nil {
				jc.adm, jc.asked = (*admit)(peerAddr(c), s.Name), true
				if jc.adm.Refused {
					refuse(c)
					continue
				}
			}
			r.c = jc
		}
		select {
		case j.conns <- r:
		case <-j.stop:
			if c != nil {
				c.Close()
			}
			return
		}
		if err != nil && !isTemporary(err) {
			return
		}
	}
}

func (j *joined) Accept() (net.Conn, error) {
	select {
	case r := <-j.conns:
		return r.c, r.err
	case <-j.stop:
		return nil, net.ErrClosed
	}
}

func (j *joined) Close() error {
	var errs []error
	j.once.Do(func() {
		close(j.stop)
		for _, s := range j.sockets {
			errs = append(errs, s.Close())
		}
		j.wg.Wait()
	})
	return errors.Join(errs...)
}

func (j *joined) Addr() net.Addr { return j.sockets[0].Addr() }

// hasStages reports whether any socket of ln, a Join, has stages.
func hasStages(ln net.Listener) bool {
	j, ok := ln.(*joined)
	if !ok {
		return false
	}
	for _, s := range j.sockets {
		if len(s.Stages) > 0 {
			return true
		}
	}
	return false
}
