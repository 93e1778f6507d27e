// Package proxyproto reads the PROXY protocol header (HAProxy's: v1 text,
// v2 binary) that a load balancer in front of edge sends at the start of
// each connection, naming the client it relays: a stage of the public
// listener's sockets (guard.Stage), run in the connection's own goroutine
// before anything else reads it (a TLS handshake included).
//
// Trust fails closed. A connection from a balancer (Options.Trusted) must
// begin with a header, and the header's source address becomes the
// connection's RemoteAddr for everything after: client identity, the
// connection limits, X-Forwarded-For. A connection from any other address
// that begins with a header is refused, since a client must not choose its
// own address; every other connection goes on untouched. The header is
// parsed by github.com/pires/go-proxyproto (docs/connections.md says why
// that version).
package proxyproto

import (
	"bufio"
	"bytes"
	"errors"
	"io"
	"net"
	"net/netip"
	"sync"

	"github.com/edgerate/edge/guard"
	"github.com/edgerate/edge/internal/wire"
	pp "github.com/pires/go-proxyproto"
	"github.com/pires/go-proxyproto/tlvparse"
)

// Results of a connection's stage, as Options.OnResult is told them (and
// the metric edge_proxy_protocol_total counts them). A connection from an
// address outside Options.Trusted that sends no header has no result: it
// is every direct client's.
const (
	ResultV1        = "v1"        // a v1 header from a balancer: its source is the client
	ResultV2        = "v2"        // a v2 PROXY command from a balancer: its source is the client
	ResultLocal     = "local"     // a v2 LOCAL command or v1 UNKNOWN (the balancer's own check): the balancer stays the client
	ResultMissing   = "missing"   // a balancer's connection without a header: closed
	ResultUntrusted = "untrusted" // a header from an address outside Trusted: closed
	ResultMalformed = "malformed" // a header that does not parse (truncated, oversized, an address no client has): closed
	ResultTimeout   = "timeout"   // a balancer's header that did not arrive within the stage's deadline: closed
)

// Options configure a Reader.
type Options struct {
	// Trusted reports whether a connection's peer (unmapped, without
	// zone) is a balancer, which must send a header (proxy_protocol.from).
	// It is asked once per connection, as its stage starts, and may change
	// its answer between connections (a reload). Required.
	Trusted func(peer netip.Addr) bool
	// OnResult, if set, is told each connection's result (see the Result
	// constants). It runs in the connection's goroutine and must be quick.
	OnResult func(result string)
	// Admit, if set, decides on a balancer's connection once its header
	// is read, from the client it names (the balancer, for LOCAL), before
	// anything after the header is read: the connection limits, which a
	// direct client meets as it is accepted (guard.ListenerOptions.Admit).
	// A refused connection is closed; an admitted one's Release is called
	// once when it closes.
	Admit func(client netip.Addr) wire.Admission
}

// Reader reads the PROXY header of each connection of a listener: its
// Stage is the guard.Stage. It is safe for concurrent use.
type Reader struct {
	trusted  func(netip.Addr) bool
	onResult func(string)
	admit    func(netip.Addr) wire.Admission
}

// New returns the Reader of opts.
func New(opts Options) (*Reader, error) {
	if opts.Trusted == nil {
		return nil, errors.New("proxyproto: New needs Options.Trusted")
	}
	return &Reader{trusted: opts.Trusted, onResult: opts.OnResult, admit: opts.Admit}, nil
}

// Errors a Stage refuses a connection with.
var (
	errMissing   = errors.New("proxyproto: a balancer's connection without a PROXY header")
	errUntrusted = errors.New("proxyproto: a PROXY header from an address that is not a balancer")
	errAddress   = errors.New("proxyproto: a PROXY header whose source is no client's address")
	errRefused   = errors.New("proxyproto: the client's connection refused by the connection limits")
)

// headerBuffer is the size of the buffer a balancer's header is read
// into: a v1 header (at most 107 bytes) must arrive in one read of it
// (go-proxyproto refuses one split across reads, which only a sender that
// trickles it does), a v2 header's address block and a usual TLV fit.
const headerBuffer = 512

var readers = sync.Pool{New: func() any { return bufio.NewReaderSize(nil, headerBuffer) }}

// Stage reads c's header, if c must or must not send one, as its
// Options say; see the package comment. It reads nothing past the header:
// bytes that arrive with it are kept for the connection's first reads.
func (r *Reader) Stage(c net.Conn) (guard.StageResult, error) {
	peer := addrOf(c.RemoteAddr())
	if !peer.IsValid() || !r.trusted(peer) {
		return r.untrusted(c)
	}
	br := readers.Get().(*bufio.Reader)
	br.Reset(c)
	defer func() {
		br.Reset(nil)
		readers.Put(br)
	}()
	h, err := pp.Read(br)
	if err != nil {
		switch {
		case errors.Is(err, pp.ErrNoProxyProtocol):
			r.result(ResultMissing)
			return guard.StageResult{}, errMissing
		case isTimeout(err):
			r.result(ResultTimeout)
		default:
			r.result(ResultMalformed)
		}
		return guard.StageResult{}, err
	}
	fc := &frontConn{Conn: c, rest: rest(br)}
	result := ResultV1
	if h.Version == 2 {
		result = ResultV2
	}
	if h.Command.IsLocal() {
		r.result(ResultLocal)
		return r.admitted(fc, peer)
	}
	src, ok := h.SourceAddr.(*net.TCPAddr)
	if !ok || addrOf(src).IsUnspecified() || !addrOf(src).IsValid() {
		// A UDP or unix source in a header on a TCP connection, or the
		// unspecified address: no client to key.
		r.result(ResultMalformed)
		return guard.StageResult{}, errAddress
	}
	fc.remote = src
	if h.Version == 2 {
		tlvs, err := h.TLVs()
		if err != nil {
			r.result(ResultMalformed)
			return guard.StageResult{}, err
		}
		if ssl, ok := tlvparse.FindSSL(tlvs); ok && ssl.ClientSSL() {
			fc.front.TLS = true
		}
	}
	r.result(result)
	return r.admitted(fc, addrOf(src))
}

// admitted returns fc, the connection of client, if Options.Admit lets it
// in.
func (r *Reader) admitted(fc *frontConn, client netip.Addr) (guard.StageResult, error) {
	if r.admit != nil {
		a := r.admit(client)
		if a.Refused {
			return guard.StageResult{}, errRefused
		}
		fc.release = a.Release
	}
	return guard.StageResult{Conn: fc}, nil
}

// untrusted looks at the first bytes of a connection from an address that
// is not a balancer: one that begins with a PROXY signature is refused,
// any other goes on with those bytes kept for its first reads. It reads
// at most the 12 bytes of the longer signature, one read of the socket
// for nearly every client (a request or a ClientHello arrives whole).
func (r *Reader) untrusted(c net.Conn) (guard.StageResult, error) {
	rc := &replayConn{Conn: c}
	n := 0
	for {
		m, err := c.Read(rc.first[n:])
		n += m
		switch sig := signed(rc.first[:n]); {
		case sig == isSigned:
			r.result(ResultUntrusted)
			return guard.StageResult{}, errUntrusted
		case sig == notSigned, err != nil && n > 0:
			// Not a header, or a connection that ends within a prefix
			// of one: its own first reads see what it sent.
			rc.rest = rc.first[:n]
			return guard.StageResult{Conn: rc}, nil
		case err != nil:
			return guard.StageResult{}, err
		}
	}
}

// What the first bytes of a connection are.
const (
	notSigned = iota // not a PROXY signature
	mayBe            // a prefix of one
	isSigned         // a whole one
)

// signed says whether b begins with a PROXY signature (v1's "PROXY ",
// v2's 12 bytes).
func signed(b []byte) int {
	for _, sig := range [][]byte{sigV1, pp.SIGV2} {
		switch {
		case len(b) >= len(sig) && bytes.Equal(b[:len(sig)], sig):
			return isSigned
		case len(b) < len(sig) && bytes.Equal(b, sig[:len(b)]):
			return mayBe
		}
	}
	return notSigned
}

// sigV1 is v1's signature with the space that must follow it ("PROXYZ"
// is no header).
var sigV1 = []byte("PROXY ")

// rest returns the bytes br holds past the header, for the connection's
// first reads.
func rest(br *bufio.Reader) []byte {
	if br.Buffered() == 0 {
		return nil
	}
	b := make([]byte, br.Buffered())
	_, _ = io.ReadFull(br, b) // from the buffer: cannot fail
	return b
}

func (r *Reader) result(res string) {
	if r.onResult != nil {
		r.onResult(res)
	}
}

// addrOf is the unmapped address, without zone, of a TCP address; the
// zero Addr for any other.
func addrOf(a net.Addr) netip.Addr {
	if ta, ok := a.(*net.TCPAddr); ok {
		return ta.AddrPort().Addr().Unmap().WithZone("")
	}
	return netip.Addr{}
}

func isTimeout(err error) bool {
	var ne net.Error
	return errors.As(err, &ne) && ne.Timeout()
}

// replayConn is a connection whose first reads return rest, bytes a stage
// read from it before, then read the connection. Its reads, like any
// net.Conn's reader, are not made concurrently.
type replayConn struct {
	net.Conn
	rest  []byte
	first [12]byte // what untrusted read: rest points into it
}

func (c *replayConn) Read(p []byte) (int, error) {
	if len(c.rest) > 0 {
		n := copy(p, c.rest)
		c.rest = c.rest[n:]
		return n, nil
	}
	return c.Conn.Read(p)
}

// CloseWrite shuts down the sending side, when the connection can (the
// framing guard lingers so after a refusal).
func (c *replayConn) CloseWrite() error {
	if cw, ok := c.Conn.(interface{ CloseWrite() error }); ok {
		return cw.CloseWrite()
	}
	return nil
}

// frontConn is a balancer's connection after its header: RemoteAddr is
// the client the header named (the balancer's own, for LOCAL), Front what
// else it said.
type frontConn struct {
	net.Conn
	rest    []byte
	remote  net.Addr // nil: the balancer's
	front   wire.Front
	release func() // Options.Admit's Release; nil for none
	closed  sync.Once
}

// Close closes the connection and ends what its admission counted.
func (c *frontConn) Close() error {
	err := c.Conn.Close()
	c.closed.Do(func() {
		if c.release != nil {
			c.release()
		}
	})
	return err
}

func (c *frontConn) Read(p []byte) (int, error) {
	if len(c.rest) > 0 {
		n := copy(p, c.rest)
		c.rest = c.rest[n:]
		return n, nil
	}
	return c.Conn.Read(p)
}

// RemoteAddr is the client's address, as the header gave it.
func (c *frontConn) RemoteAddr() net.Addr {
	if c.remote != nil {
		return c.remote
	}
	return c.Conn.RemoteAddr()
}

// Front says what the header told beyond the client's address.
func (c *frontConn) Front() *wire.Front { return &c.front }

// CloseWrite shuts down the sending side, when the connection can.
func (c *frontConn) CloseWrite() error {
	if cw, ok := c.Conn.(interface{ CloseWrite() error }); ok {
		return cw.CloseWrite()
	}
	return nil
}
