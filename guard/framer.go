package guard

import (
	"bytes"
	"sync"

	"github.com/edgerate/edge/internal/wire"
)

// frameState is where a framer is in the request stream.
type frameState uint8

const (
	stHead           frameState = iota // reading a request head
	stBody                             // passing remain bytes of a Content-Length body
	stChunkSize                        // reading a chunk-size line
	stChunkData                        // passing remain bytes of chunk data
	stChunkEnd                         // reading the CRLF after chunk data
	stTrailer                          // reading trailer lines
	stUpgradePending                   // an upgrade request is done; its response is not known
	stPassthrough                      // no longer following the framing
	stRejected                         // a head was replaced; nothing more is read
	stBroken                           // a body broke its framing; reads fail
	stFast                             // a head may be offered to the fast path (fast.go)
)

// Limits on what the framer holds; both are net/http's own.
const (
	maxChunkLine   = 4096 // a chunk-size line (net/http's maxLineLength)
	maxTrailer     = 4096 // the trailer section (net/http peeks at most its bufio buffer)
	maxStatusSniff = 4096 // interim responses scanned for an upgrade's answer
)

// rejectLine replaces a rejected head. It is an invalid request line
// whatever (at most one) byte of the stream net/http already read before
// it (see stUpgradePending), so net/http answers 400 and closes.
const rejectLine = "\x00 / HTTP/1.1\r\n\r\n"

// framer follows the request stream of one connection. It holds each
// request head until the head is complete and checked, and passes body
// bytes on as they come, checking chunked framing. It does no I/O and is
// not safe for concurrent use.
type framer struct {
	maxHead  int
	onReject func() // nil for none

	// The fast path (fast.go): fast is set when the Listener has a hook,
	// free while net/http waits for a request and holds none of this
	// connection's bytes, and a head of at most maxSimple bytes found then
	// waits in state stFast, fastEnd bytes long, to be offered, its parts
	// read into simple, with a body of fastBody bytes (-1: chunked).
	fast      bool
	free      bool
	maxSimple int
	fastEnd   int
	simple    *simple // the parts of the head in stFast; made when first needed
	fastBody  int64

	st     frameState
	buf    []byte // buf[lo:hi] is received and not yet delivered
	lo, hi int
	ready  int // buf[lo:lo+ready] may be delivered
	skip   int // buf[lo:lo+skip] was delivered already (stUpgradePending)
	scan   int // bytes of the current head already scanned
	// The current head's request line is complete, ending at
	// in[lineEnd], if lineSeen; checked and valid if lineOK too.
	lineSeen bool
	lineEnd  int
	lineOK   bool
	remain   int64 // bytes left in a body or chunk
	// msgs counts the messages ended (a request's, body and all), and
	// tunnel is set once a 101 switched the connection to another
	// protocol: what the read deadline of a request needs (deadline.go).
	msgs   uint64
	tunnel bool

	trailer int    // trailer bytes so far
	upgrade bool   // an upgrade request's response status is awaited
	status  []byte // response bytes seen while upgrade is set
	repl    string // replacement bytes left to deliver
	reason  string // why the stream was rejected or broken

	// Tests only: consumed counts bytes passed on or cleared for
	// delivery, and ends, when not nil, records it at each message end.
	consumed int64
	ends     *[]int64
}

// space returns room for n more received bytes at buf[hi:]; the caller
// fills some of it and adds the count to hi.
func (f *framer) space(n int) []byte {
	if f.lo == f.hi {
		f.lo, f.hi = 0, 0
	}
	if f.hi+n > len(f.buf) {
		if f.lo > 0 {
			copy(f.buf, f.buf[f.lo:f.hi])
			f.hi -= f.lo
			f.lo = 0
		}
		if f.hi+n > len(f.buf) {
			// Double, but never past what the longest head that is held
			// needs (a longer one passes through): a slow client holding
			// an unfinished 64 KB head then costs 72 KiB here, not 128.
			size := max(2*len(f.buf), 4096)
			if f.maxHead > 0 {
				size = min(size, f.maxHead+4096)
			}
			if len(f.buf) == 0 && f.hi+n <= headBufferSize {
				f.buf = headBuffers.Get().(*[headBufferSize]byte)[:]
				return f.buf[f.hi : f.hi+n]
			}
			nb := make([]byte, max(size, f.hi+n))
			copy(nb, f.buf[:f.hi])
			f.buf = nb
		}
	}
	return f.buf[f.hi : f.hi+n]
}

// feed appends bytes received from the client.
func (f *framer) feed(b []byte) {
	f.hi += copy(f.space(len(b)), b)
}

// pending returns the received bytes not yet delivered.
func (f *framer) pending() []byte { return f.buf[f.lo:f.hi] }

// deliver copies bytes that may be delivered into p.
func (f *framer) deliver(p []byte) int {
	if f.repl != "" {
		n := copy(p, f.repl)
		f.repl = f.repl[n:]
		return n
	}
	if f.ready == 0 {
		return 0
	}
	if f.skip > 0 {
		f.lo += f.skip
		f.ready -= f.skip
		f.skip = 0
	}
	n := copy(p, f.buf[f.lo:f.lo+f.ready])
	f.lo += n
	f.ready -= n
	f.free = false
	f.release()
	return n
}

// headBufferSize is a framer's first buffer, which most connections never
// outgrow.
const headBufferSize = 4096

// headBuffers and simples recycle the first buffers and head parts of
// connections that ended in their first stage (first.go): a flood of one
// request a connection otherwise allocates each once a connection, and
// the garbage collector's work grows with them.
var (
	headBuffers = sync.Pool{New: func() any { return new([headBufferSize]byte) }}
	simples     = sync.Pool{New: func() any { return new(simple) }}
)

// recycle gives the framer's buffer and head parts back for another
// connection, once nothing reads into them or from them any more.
func (f *framer) recycle() {
	if len(f.buf) == headBufferSize {
		headBuffers.Put((*[headBufferSize]byte)(f.buf))
	}
	f.buf, f.lo, f.hi = nil, 0, 0
	if f.simple != nil {
		*f.simple = simple{}
		simples.Put(f.simple)
		f.simple = nil
	}
}

// release drops a large head's buffer once it is empty, so that an idle
// connection does not keep it.
func (f *framer) release() {
	if f.lo == f.hi && len(f.buf) > 64<<10 {
		f.buf = nil
		f.lo, f.hi = 0, 0
	}
}

// pass clears a head waiting in stFast, end bytes long, for delivery to
// net/http: the fast path declined it.
func (f *framer) pass(end int) {
	f.upgrade = false
	f.clear(end)
	f.beginBody(f.fastBody)
}

// beginBody follows the body of the head just passed or taken up, of
// length n (-1: chunked), or ends the message if it has none.
func (f *framer) beginBody(n int64) {
	f.scan, f.lineSeen, f.lineOK = 0, false, false
	switch {
	case n < 0:
		f.st = stChunkSize
	case n > 0:
		f.st, f.remain = stBody, n
	default:
		f.endMessage()
	}
}

// answered drops a head waiting in stFast, end bytes long, that the fast
// path answered.
func (f *framer) answered(end int) {
	f.lo += end
	f.msgs++
	f.st, f.scan, f.lineSeen, f.lineOK = stHead, 0, false, false
	f.release()
}

// direct reports how many bytes a Read may take straight from the network
// without the framer seeing them first: 0 unless nothing is held back and
// the bytes are body or passthrough bytes.
func (f *framer) direct() int64 {
	if f.lo != f.hi || f.repl != "" {
		return 0
	}
	switch f.st {
	case stBody, stChunkData:
		return f.remain
	case stPassthrough:
		return 1 << 62
	}
	return 0
}

// clear marks the next n pending bytes for delivery.
func (f *framer) clear(n int) {
	f.ready += n
	f.consumed += int64(n)
}

// readDirect accounts for n bytes a Read took straight from the network.
func (f *framer) readDirect(n int) {
	f.consumed += int64(n)
	f.free = false
	switch f.st {
	case stBody:
		f.remain -= int64(n)
		if f.remain == 0 {
			f.endMessage()
		}
	case stChunkData:
		f.remain -= int64(n)
		if f.remain == 0 {
			f.st = stChunkEnd
		}
	}
}

// step processes pending bytes. It reports whether it made progress; if
// not, it needs more input (or the stream is over).
func (f *framer) step() bool {
	in := f.pending()[f.ready:]
	switch f.st {
	case stHead:
		return f.stepHead(in)
	case stBody, stChunkData:
		if len(in) == 0 {
			return false
		}
		n := min(int64(len(in)), f.remain)
		f.clear(int(n))
		f.remain -= n
		if f.remain == 0 {
			if f.st == stBody {
				f.endMessage()
			} else {
				f.st = stChunkEnd
			}
		}
		return true
	case stChunkEnd:
		if len(in) < 2 {
			return false
		}
		if in[0] != '\r' || in[1] != '\n' {
			return f.broken("chunk data not followed by CRLF")
		}
		f.clear(2)
		f.st = stChunkSize
		return true
	case stChunkSize:
		line, ok := f.line(in, maxChunkLine)
		if !ok {
			return line != nil // nil: need more; non-nil: broken already
		}
		size, ok := parseChunkSize(line)
		if !ok {
			return f.broken("malformed chunk size line")
		}
		f.clear(len(line))
		if size == 0 {
			f.st, f.trailer = stTrailer, 0
		} else {
			f.st, f.remain = stChunkData, size
		}
		return true
	case stTrailer:
		line, ok := f.line(in, maxTrailer-f.trailer)
		if !ok {
			return line != nil
		}
		f.trailer += len(line)
		if len(line) == 2 { // CRLF: the end of the message
			f.clear(2)
			f.endMessage()
			return true
		}
		if !validFieldLine(line[:len(line)-2]) {
			return f.broken("malformed trailer field")
		}
		f.clear(len(line))
		return true
	case stUpgradePending:
		return false
	case stPassthrough:
		if len(in) == 0 {
			return false
		}
		f.clear(len(in))
		return true
	}
	return false
}

// line returns the CRLF-terminated line at the start of in, CRLF included,
// and true. When in holds no complete line yet it returns nil, false, or,
// if the line is already longer than limit or ends in a bare LF, marks the
// stream broken and returns a non-nil slice and false.
func (f *framer) line(in []byte, limit int) ([]byte, bool) {
	i := bytes.IndexByte(in, '\n')
	if i < 0 {
		if len(in) > limit {
			f.broken("line too long")
			return in, false
		}
		return nil, false
	}
	if i+1 > limit {
		f.broken("line too long")
		return in, false
	}
	if i == 0 || in[i-1] != '\r' || bytes.IndexByte(in[:i-1], '\r') >= 0 {
		f.broken("line not terminated by CRLF")
		return in, false
	}
	return in[:i+1], true
}

func (f *framer) broken(reason string) bool {
	f.st, f.reason = stBroken, reason
	return true
}

// endMessage moves on after a complete request.
func (f *framer) endMessage() {
	if f.ends != nil {
		*f.ends = append(*f.ends, f.consumed)
	}
	f.msgs++
	if f.upgrade {
		f.st = stUpgradePending
		return
	}
	f.st, f.scan, f.lineSeen, f.lineOK = stHead, 0, false, false
}

// stepHead looks for the end of the head at the start of in and, once it
// has it, checks it.
func (f *framer) stepHead(in []byte) bool {
	// Scan each byte once however the head arrives (a slow client sends
	// it a byte at a time).
	end := -1
	for f.scan < len(in) {
		i := bytes.IndexByte(in[f.scan:], '\n')
		if i < 0 {
			f.scan = len(in)
			break
		}
		nl := f.scan + i
		f.scan = nl + 1
		// Refuse a bare LF as soon as it arrives, not at a head end that
		// may never come.
		if nl == 0 || in[nl-1] != '\r' {
			if reason := f.checkLine(in); reason != "" {
				f.reject(reason) // the earlier line's fault comes first
				return true
			}
			f.reject("bare LF line end")
			return true
		}
		if !f.lineSeen {
			f.lineSeen, f.lineEnd = true, nl
			continue
		}
		// The line before this CRLF is empty when the CR follows the
		// previous line's LF.
		if in[nl-2] == '\n' {
			end = nl + 1
			break
		}
	}
	if end < 0 || end > f.maxHead {
		// Refuse a malformed request line (binary garbage, a TLS
		// handshake) as soon as it is complete, too, not at a head end
		// that may never come; a head that has ended parseHead checks.
		if reason := f.checkLine(in); reason != "" {
			f.reject(reason)
			return true
		}
	}
	if end < 0 {
		if len(in) > f.maxHead {
			// net/http answers 431 and closes before it parses this head.
			f.st = stPassthrough
			return true
		}
		return false
	}
	if end > f.maxHead {
		f.st = stPassthrough
		return true
	}
	var s *simple // where a head the fast path may be offered is read
	if f.fast && f.free && f.ready == 0 && f.skip == 0 && end <= f.maxSimple {
		if f.simple == nil {
			f.simple = simples.Get().(*simple)
		}
		s = f.simple
	}
	h, reason := parseHead(in[:end], s)
	if reason != "" {
		f.reject(reason)
		return true
	}
	if h.simple && !h.upgrade && !h.passthrough {
		f.st, f.fastEnd, f.fastBody = stFast, end, h.bodyLen // offered first (guardConn.offer)
		return true
	}
	f.clear(end)
	f.scan, f.lineSeen, f.lineOK = 0, false, false
	f.upgrade = h.upgrade
	f.status = f.status[:0]
	switch {
	case h.passthrough:
		f.st = stPassthrough
	case h.bodyLen < 0:
		f.st = stChunkSize
	case h.bodyLen > 0:
		f.st, f.remain = stBody, h.bodyLen
	default:
		f.endMessage()
	}
	return true
}

// checkLine checks the current head's request line, in[:f.lineEnd], once
// it is complete, if it has not been checked: it returns why the line is
// malformed, or "".
func (f *framer) checkLine(in []byte) string {
	if !f.lineSeen || f.lineOK {
		return ""
	}
	f.lineOK = true
	_, _, _, reason := parseRequestLine(in[:f.lineEnd-1])
	return reason
}

// reject replaces the current head, and drops everything after it.
func (f *framer) reject(reason string) {
	if f.onReject != nil {
		f.onReject()
	}
	f.st, f.reason, f.repl = stRejected, reason, rejectLine
	f.lo, f.hi, f.ready, f.skip = 0, 0, 0, 0
	f.buf = nil
}

// upgradeRead lets net/http's one-byte background read take the first byte
// of whatever follows an upgrade request, before the framer knows whether
// that is a new request or the upgraded protocol. The byte stays in the
// buffer (skip) so that it is checked as part of the next head if the
// upgrade is refused. It returns 0 if the framer cannot give such a byte.
func (f *framer) upgradeRead(p []byte) int {
	in := f.pending()
	if f.st != stUpgradePending || f.ready != 0 || len(in) <= f.skip || len(p) == 0 {
		return 0
	}
	if f.skip > 0 {
		// net/http reads ahead only once while a handler runs. Anything
		// else is not a request read this framer understands: stop
		// following the framing rather than guess.
		f.st = stPassthrough
		f.ready = len(in)
		return 0
	}
	p[0] = in[0]
	f.skip = 1
	f.free = false
	return 1
}

// sawResponse looks at bytes written to the client while an upgrade
// request awaits its answer: a 101 means the connection now carries
// another protocol, anything else but an interim 1xx means the next bytes
// are a request again.
func (f *framer) sawResponse(b []byte) {
	if !f.upgrade {
		return
	}
	f.status = append(f.status, b[:min(len(b), max(maxStatusSniff+1-len(f.status), 0))]...)
	for {
		s := f.status
		if len(s) < len("HTTP/1.1 101") {
			if len(s) > 0 && !bytes.HasPrefix([]byte("HTTP/1."), s[:min(len(s), 7)]) {
				f.upgradeRefused()
			}
			return
		}
		if !bytes.HasPrefix(s, []byte("HTTP/1.")) {
			f.upgradeRefused()
			return
		}
		code := s[9:12]
		switch {
		case string(code) == "101":
			f.upgrade = false
			f.status = nil
			f.st, f.tunnel = stPassthrough, true
			// The byte net/http took early belongs to the new protocol and
			// is net/http's; everything else is passed on.
			f.lo += f.skip
			f.skip = 0
			f.ready = f.hi - f.lo
			return
		case code[0] == '1':
			end := bytes.Index(s, []byte("\r\n\r\n"))
			if end < 0 {
				if len(s) > maxStatusSniff {
					f.upgradeRefused()
				}
				return
			}
			f.status = s[end+4:]
		default:
			f.upgradeRefused()
			return
		}
	}
}

func (f *framer) upgradeRefused() {
	f.upgrade = false
	f.status = nil
	if f.st == stUpgradePending {
		f.st, f.scan, f.lineSeen, f.lineOK = stHead, 0, false, false
	}
}

// parseChunkSize parses a chunk-size line with its CRLF: 1 to 16 hex
// digits with a value below 2⁶³, then optional extensions after ';'
// without control bytes other than HTAB (RFC 9112 §7.1).
func parseChunkSize(line []byte) (int64, bool) {
	line = line[:len(line)-2]
	var n uint64
	i := 0
	for ; i < len(line) && wire.IsHexDigit(line[i]); i++ {
		if i == 16 {
			return 0, false
		}
		n = n<<4 | uint64(wire.Unhex(line[i]))
	}
	if i == 0 || n > 1<<63-1 {
		return 0, false
	}
	if ext := line[i:]; len(ext) > 0 {
		if ext[0] != ';' {
			return 0, false
		}
		for _, c := range ext {
			if c < ' ' && c != '\t' || c == 0x7f {
				return 0, false
			}
		}
	}
	return int64(n), true
}

// validFieldLine reports whether line (without CRLF) is "name: value" with
// a token name, no leading whitespace, and no control bytes but HTAB.
func validFieldLine(line []byte) bool {
	name, value, ok := bytes.Cut(line, []byte(":"))
	if !ok || !wire.IsToken(name) {
		return false
	}
	for _, c := range value {
		if c < ' ' && c != '\t' || c == 0x7f {
			return false
		}
	}
	return true
}
