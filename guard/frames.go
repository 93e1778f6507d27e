package guard

import (
	"bufio"
	"encoding/binary"
	"io"
	"net"
	"sync"
	"sync/atomic"
	"time"

	"github.com/edgerate/edge/internal/wire"
)

// The floods of HTTP/2 frames that cost a server more than the client that
// sends them (docs/hostile-input.md): streams opened and reset at once
// (Rapid Reset, CVE-2023-44487), or reset by the server for the client's
// malformed frames (MadeYouReset, CVE-2025-8671); a header block that
// CONTINUATION frames make endless (2024); and control frames, each of
// which the server must read, and some answer. Go's HTTP/2 server bounds
// what each costs at a time, but keeps the connection open through them
// (20,000 HEADERS and RST_STREAM pairs, say), and its HTTP2Config.CountError
// says what went wrong without saying on which connection. WatchFrames
// reads the frame headers (9 bytes each; no HPACK) of one connection as
// they pass, in both directions, counts what makes a flood, and closes the
// connection when one passes its limit.

// Kinds of flood, as Flood.Kind names them (and the metric
// edge_http2_floods_total counts them).
const (
	FloodRapidReset   = "rapid_reset"  // streams reset, by the client or by the server for the client's frames
	FloodContinuation = "continuation" // a header block too long, or without end, across CONTINUATION frames
	FloodControl      = "control"      // SETTINGS, PING, PRIORITY, WINDOW_UPDATE and empty DATA frames
)

// Flood is a connection WatchFrames closed, as FrameLimits.OnFlood is told.
type Flood struct {
	Kind string
	Peer net.Addr
}

// FrameLimits are what WatchFrames allows on one connection. A limit of 0
// is no limit.
type FrameLimits struct {
	// MaxResets bounds the streams reset a second: every RST_STREAM the
	// client sends (whether or not the response was sent: a
	// well-behaved client resets few), and every one the server sends
	// for the client's frames (an error code other than NO_ERROR,
	// INTERNAL_ERROR and CANCEL, which mean the server's own choice or
	// failure).
	MaxResets int
	// MaxControlFrames bounds the SETTINGS, PING, PRIORITY and
	// WINDOW_UPDATE frames the client sends a second, and its DATA frames
	// that carry no data and do not end their stream.
	MaxControlFrames int
	// MaxHeaderBytes is the HTTP/2 server's bound on a decoded header
	// list (http.Server.MaxHeaderBytes). A header block whose frames
	// (headers, padding and all) hold more than it plus headerBlockSlack,
	// with a CONTINUATION frame or the promise of one, is a flood; so is
	// a block that the server ends the connection on at a CONTINUATION
	// frame (an error GOAWAY just after one).
	MaxHeaderBytes int
	// OnFlood, if set, is told of each connection closed for a flood,
	// once, from the goroutine that read or wrote the frame that passed
	// the limit. It must be quick and must not block.
	OnFlood func(Flood)
	// Now reads the clock; nil means time.Now.
	Now func() time.Time
}

// headerBlockSlack is what a header block may hold on the wire beyond
// MaxHeaderBytes. An encoding no longer than what it decodes to (the one
// HPACK encoders choose, RFC 7541 §4.1 counting 32 bytes a field beside its
// name and value) stays within: Go's server adds 320 bytes to
// MaxHeaderBytes (32 for each of 10 fields), a HEADERS frame carries at
// most 261 bytes of padding and priority, and a block of 1 MiB in the
// clients' 16 KiB frames has 64 frame headers of 9 bytes (576).
const headerBlockSlack = 2048

// Frame types and flags (RFC 9113 §6).
const (
	frameData         = 0x0
	frameHeaders      = 0x1
	framePriority     = 0x2
	frameRSTStream    = 0x3
	frameSettings     = 0x4
	framePing         = 0x6
	frameGoAway       = 0x7
	frameWindowUpdate = 0x8
	frameContinuation = 0x9

	flagEndStream  = 0x1
	flagEndHeaders = 0x4
	flagPadded     = 0x8

	codeNo              = 0x0
	codeInternal        = 0x2
	codeCancel          = 0x8
	codeEnhanceYourCalm = 0xb
)

// WatchFrames returns c, the stream of one HTTP/2 server connection
// (decrypted, its client's Preface first), watched for floods as lim
// says: once one passes its limit, the connection gets a GOAWAY with
// ENHANCE_YOUR_CALM (when the server's writes are between frames) and is
// closed, and the frames after the one that passed it are never read by
// the server. Give the server the connection returned: it reads the
// client's frames through it and writes its own. It is the connection's
// TLS (wire.Secure) if c is, and has no ConnectionState method, so that Go's
// server serves it as unencrypted HTTP/2 (http.Server.Protocols).
//
// Its reads must not be concurrent with each other, nor its writes with
// each other (a server reads a connection from one goroutine, and writes
// from one at a time); a read and a write may be.
//
// On a connection without TLS, its reads are buffered: Go's HTTP/2 server
// reads each frame's header and payload with reads of their own, a system
// call each where no TLS record holds them (a flood of empty frames would
// cost one per 9 bytes).
func WatchFrames(c net.Conn, lim FrameLimits) net.Conn {
	fc := &frameConn{Conn: c, lim: lim, preface: len(Preface), in: c}
	if tlsOf(c) == nil {
		fc.in = bufio.NewReaderSize(c, readBuffer)
	}
	if fc.lim.Now == nil {
		fc.lim.Now = time.Now
	}
	fc.start = fc.lim.Now()
	if lim.MaxHeaderBytes > 0 {
		fc.maxBlock = int64(lim.MaxHeaderBytes) + headerBlockSlack
	}
	return fc
}

// frameConn is WatchFrames's connection.
type frameConn struct {
	net.Conn
	lim      FrameLimits
	start    time.Time // the clock's reading at WatchFrames: periods count from it
	maxBlock int64     // a header block's bound on the wire; 0 none

	// The reading goroutine's: the client's frames.
	in      io.Reader // c, or a buffer over it
	preface int       // bytes of the preface still to pass
	scan    frameScanner
	block   int64 // bytes of the header block being read; 0 outside one
	control rate
	// lastStream is the highest stream the client opened, for a GOAWAY.
	lastStream atomic.Uint32
	// atContinuation: the last frame the server read was a CONTINUATION
	// (the server reads frames one at a time, so when it writes a GOAWAY,
	// this says whether a CONTINUATION is what it ended the connection on).
	atContinuation atomic.Bool

	wmu      sync.Mutex   // held by writes; a flood's GOAWAY takes it if it is free
	out      frameScanner // the server's frames, under wmu
	endAfter bool         // under wmu: the write being made ends the connection

	rmu    sync.Mutex // resets are counted by both goroutines
	resets rate

	flooded atomic.Bool
}

// Read returns the client's bytes, up to the frame that passes a limit;
// once one has, it fails.
func (c *frameConn) Read(p []byte) (int, error) {
	if c.flooded.Load() {
		return 0, net.ErrClosed
	}
	n, err := c.in.Read(p)
	b := p[:n]
	if c.preface > 0 {
		k := min(c.preface, len(b))
		c.preface -= k
		b = b[k:]
	}
	if len(b) == 0 {
		return n, err
	}
	at, stopped := c.scan.scan(b, c.clientFrame)
	if stopped {
		// The frames before the one that passed the limit are the
		// server's; the rest is never read, and the next read fails.
		return n - len(b) + at, nil
	}
	return n, err
}

// clientFrame counts a frame of the client's, and reports whether the
// connection goes on.
func (c *frameConn) clientFrame(f *frame) bool {
	c.atContinuation.Store(f.typ == frameContinuation)
	switch f.typ {
	case frameHeaders:
		if f.stream > c.lastStream.Load() {
			c.lastStream.Store(f.stream)
		}
		c.block = 0
		if f.flags&flagEndHeaders == 0 {
			c.block = frameHeaderLen + int64(f.length)
			if c.maxBlock > 0 && c.block > c.maxBlock {
				return c.flood(FloodContinuation)
			}
		}
	case frameContinuation:
		c.block += frameHeaderLen + int64(f.length)
		if c.maxBlock > 0 && c.block > c.maxBlock {
			return c.flood(FloodContinuation)
		}
		if f.flags&flagEndHeaders != 0 {
			c.block = 0
		}
	case frameRSTStream:
		if c.countReset() {
			return c.flood(FloodRapidReset)
		}
	case frameSettings, framePing, framePriority, frameWindowUpdate:
		return c.controlFrame()
	case frameData:
		if f.flags&flagEndStream == 0 && emptyData(f) {
			return c.controlFrame()
		}
	}
	return true
}

// emptyData reports whether a DATA frame carries no data: it is empty, or
// holds only its padding.
func emptyData(f *frame) bool {
	if f.flags&flagPadded == 0 || len(f.payload) == 0 {
		return f.length == 0
	}
	return int64(f.length)-1-int64(f.payload[0]) <= 0
}

func (c *frameConn) controlFrame() bool {
	if c.lim.MaxControlFrames > 0 && c.control.add(c.elapsed(), c.lim.MaxControlFrames) {
		return c.flood(FloodControl)
	}
	return true
}

// countReset counts a stream reset, from either goroutine, and reports
// whether the resets are over their limit.
func (c *frameConn) countReset() bool {
	if c.lim.MaxResets <= 0 {
		return false
	}
	now := c.elapsed()
	c.rmu.Lock()
	defer c.rmu.Unlock()
	return c.resets.add(now, c.lim.MaxResets)
}

// elapsed is the time since WatchFrames, on its clock.
func (c *frameConn) elapsed() time.Duration { return c.lim.Now().Sub(c.start) }

// Write sends the server's bytes, counting the streams it resets for the
// client's frames. When they pass the limit, the write's whole frames are
// sent, then a GOAWAY, and the connection closes: the end of a frame that
// b does not hold is never sent (the server's buffered writes cut frames
// anywhere), and the next write fails.
func (c *frameConn) Write(b []byte) (int, error) {
	c.wmu.Lock()
	defer c.wmu.Unlock()
	c.out.scan(b, c.serverFrame)
	if !c.endAfter {
		return c.Conn.Write(b)
	}
	c.endAfter = false
	whole := len(b)
	if !c.out.between() {
		whole = c.out.startIn // -1: the frame began in an earlier write
	}
	if whole >= 0 {
		if _, err := c.Conn.Write(b[:whole]); err == nil {
			c.out = frameScanner{} // between frames, as the client has them
			c.end(true)
			return len(b), nil
		}
	}
	c.end(false)
	return len(b), nil
}

// serverFrame counts a frame of the server's, with wmu held. It never
// stops the scan: the whole write is sent, and the scanner must know
// where it ends (a GOAWAY goes between frames).
func (c *frameConn) serverFrame(f *frame) bool {
	switch f.typ {
	case frameRSTStream:
		if len(f.payload) == 4 {
			switch binary.BigEndian.Uint32(f.payload) {
			case codeNo, codeInternal, codeCancel:
				return true
			}
		}
		if c.countReset() && !c.flooded.Swap(true) {
			c.tell(FloodRapidReset)
			c.endAfter = true
		}
	case frameGoAway:
		// The server ends the connection for an error just after a
		// CONTINUATION frame: a block it found too long or broken. It
		// sends its own GOAWAY, and closes the connection after it.
		if len(f.payload) == 8 && binary.BigEndian.Uint32(f.payload[4:]) != codeNo && c.atContinuation.Load() &&
			!c.flooded.Swap(true) {
			c.tell(FloodContinuation)
		}
	}
	return true
}

// flood records that the client's frames passed the limit of kind, and
// ends the connection. It returns false: the scan stops.
func (c *frameConn) flood(kind string) bool {
	if c.flooded.Swap(true) {
		return false
	}
	c.tell(kind)
	// A write in progress (blocked, perhaps, on a client that reads
	// nothing) holds wmu: then the connection closes without a GOAWAY,
	// and the write fails.
	haveW := c.wmu.TryLock()
	c.end(haveW)
	if haveW {
		c.wmu.Unlock()
	}
	return false
}

func (c *frameConn) tell(kind string) {
	if c.lim.OnFlood != nil {
		c.lim.OnFlood(Flood{Kind: kind, Peer: c.RemoteAddr()})
	}
}

// readBuffer is the size of a connection's read buffer without TLS: a
// page, as net/http's HTTP/1 reader has.
const readBuffer = 4096

// goAwayTimeout bounds the write of a flood's GOAWAY.
const goAwayTimeout = time.Second

// end sends a GOAWAY, when haveW (wmu is held) and the server's writes are
// between frames, and closes the connection.
func (c *frameConn) end(haveW bool) {
	if haveW && c.out.between() {
		var f [frameHeaderLen + 8]byte
		f[2], f[3] = 8, frameGoAway // length 8, no flags, stream 0
		binary.BigEndian.PutUint32(f[9:], c.lastStream.Load()&(1<<31-1))
		binary.BigEndian.PutUint32(f[13:], codeEnhanceYourCalm)
		if c.Conn.SetWriteDeadline(time.Now().Add(goAwayTimeout)) == nil {
			_, _ = c.Conn.Write(f[:])
		}
	}
	c.Conn.Close()
}

// TLS returns the TLS of the connection watched, nil without (wire.Secure).
func (c *frameConn) TLS() *wire.TLS { return tlsOf(c.Conn) }

// Front returns what the PROXY header of the connection watched said, nil
// for none (wire.Fronted).
func (c *frameConn) Front() *wire.Front { return FrontOf(c.Conn) }

// CloseWrite shuts down the sending side, when the connection can.
func (c *frameConn) CloseWrite() error {
	if cw, ok := c.Conn.(interface{ CloseWrite() error }); ok {
		return cw.CloseWrite()
	}
	return nil
}

// rate counts events in periods of a second, and estimates the count over
// the last second as the current period's and the previous one's
// weighted by the part of it still inside the second, in integers:
// HAProxy's freq_ctr, the estimate the window package's sliding counter
// makes too. Its zero value starts counting at 0.
type rate struct {
	start     time.Duration // the current period's start
	cur, prev int64
}

// add counts an event at now, and reports whether the estimate is over
// limit. A clock that goes back counts in the current period.
func (r *rate) add(now time.Duration, limit int) bool {
	const period = time.Second
	switch since := now - r.start; {
	case since >= 2*period:
		r.start, r.prev, r.cur = now, 0, 0
	case since >= period:
		r.start, r.prev, r.cur = r.start+period, r.cur, 0
	}
	r.cur++
	// since is within [0, period) but for a clock gone back (then the
	// whole of prev is counted); prev ≤ limit+1 ≤ 10⁶, so the product
	// fits.
	since := max(now-r.start, 0)
	est := r.cur + r.prev*int64(period-since)/int64(period)
	return est > int64(limit)
}

// frameHeaderLen is the length of a frame's header (RFC 9113 §4.1).
const frameHeaderLen = 9

// frame is a frame's header and the first payload bytes a scanner keeps
// of it (RST_STREAM's error code, GOAWAY's stream and code, a padded DATA
// frame's pad length).
type frame struct {
	length  uint32
	typ     uint8
	flags   uint8
	stream  uint32
	payload []byte
}

// frameScanner follows the frames of one direction of a connection as its
// bytes pass, in pieces of any length: it parses each frame's 9-byte
// header, keeps the few payload bytes keep asks for, and skips the rest.
// Its zero value is at the start of a frame.
type frameScanner struct {
	hdr  [frameHeaderLen]byte
	have int // bytes of hdr gathered
	f    frame
	want int  // payload bytes to keep before the frame is told
	told bool // tell has had the frame
	// startIn is where the frame being passed began in the bytes of the
	// last scan, -1 if before them.
	startIn int
	keep    [8]byte
	left    uint32 // payload bytes of the frame still to pass
}

// between reports whether the bytes passed so far end at a frame's end.
func (s *frameScanner) between() bool { return s.have == 0 }

// keepFor is how many payload bytes the frame of f's header is told with.
func keepFor(f *frame) int {
	switch {
	case f.typ == frameRSTStream:
		return 4
	case f.typ == frameGoAway:
		return 8
	case f.typ == frameData && f.flags&flagPadded != 0:
		return 1
	}
	return 0
}

// scan passes b, calling tell with each frame once its header and kept
// bytes have passed. When tell returns false, scan stops and returns the
// offset in b of that frame's first byte (0 if it began before b) and
// true; the scanner is then of no more use.
func (s *frameScanner) scan(b []byte, tell func(*frame) bool) (int, bool) {
	s.startIn = -1
	for i := 0; i < len(b); {
		switch {
		case s.have < frameHeaderLen:
			if s.have == 0 {
				s.startIn = i
			}
			k := copy(s.hdr[s.have:], b[i:])
			s.have += k
			i += k
			if s.have < frameHeaderLen {
				return 0, false
			}
			s.parse()
		case len(s.f.payload) < s.want:
			k := copy(s.keep[len(s.f.payload):s.want], b[i:])
			s.f.payload = s.keep[:len(s.f.payload)+k]
			s.left -= uint32(k)
			i += k
		default:
			k := min(s.left, uint32(len(b)-i))
			s.left -= k
			i += int(k)
		}
		if !s.told && len(s.f.payload) == s.want {
			s.told = true
			if !tell(&s.f) {
				return max(s.startIn, 0), true
			}
		}
		if s.left == 0 {
			s.have = 0
		}
	}
	return 0, false
}

// parse reads the frame header gathered in hdr.
func (s *frameScanner) parse() {
	h := s.hdr[:]
	s.f = frame{
		length: uint32(h[0])<<16 | uint32(h[1])<<8 | uint32(h[2]),
		typ:    h[3],
		flags:  h[4],
		stream: binary.BigEndian.Uint32(h[5:]) & (1<<31 - 1),
	}
	s.left = s.f.length
	s.want = min(keepFor(&s.f), int(s.left))
	s.f.payload = s.keep[:0]
	s.told = false
}
