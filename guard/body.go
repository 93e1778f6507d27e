package guard

import (
	"bufio"
	"bytes"
	"errors"
	"io"
	"net/http"
	"net/http/httputil"
	"net/textproto"
)

// Body is the body of a Request offered to the fast path, read from the
// connection through the framer (which checks its chunked framing as for
// net/http), while the hook runs. It reads as net/http's server reads a
// request body: chunked bodies decoded by the same chunked reader, their
// trailer read as net/http reads it, the read deadline ReadTimeout from
// the head's first byte (none without one), and "HTTP/1.1 100 Continue"
// written before the first read when the request expects it. Close and
// Reuse say what net/http does with the connection when a handler's
// response is written before the body was read whole. A Close meanwhile
// waits for the answer, body and all, as for any answer (WaitAnswers):
// http.Server.Shutdown takes the connection for idle, and its drain lets
// the upload finish, within ReadTimeout, as net/http's own would. It is
// not safe for concurrent use, and valid only during the hook's call.
type Body struct {
	c       *guardConn
	size    int64 // declared length; -1 for chunked
	left    int64 // bytes of a declared length not yet read
	expect  bool  // "Expect: 100-continue"
	asked   bool  // 100 Continue was written (at the first read)
	started bool
	br      *bufio.Reader
	cr      io.Reader // the chunked reader
	trailer http.Header

	sawEOF     bool // net/http's body.sawEOF
	ecrEOF     bool // its expectContinueReader's sawEOF
	closed     bool
	earlyClose bool
}

// maxPostHandlerReadBytes is net/http's: how much of an unread body the
// server reads to keep the connection, after the handler.
const maxPostHandlerReadBytes = 256 << 10

var continueLine = []byte("HTTP/1.1 100 Continue\r\n\r\n")

// errBodyClosed is net/http's ErrBodyReadAfterClose.
var errBodyClosed = http.ErrBodyReadAfterClose

// Len returns the body's declared length, or -1 for a chunked body.
func (b *Body) Len() int64 { return b.size }

// Read reads the body: net/http's expectContinueReader and body.Read.
func (b *Body) Read(p []byte) (int, error) {
	if b.closed {
		return 0, errBodyClosed
	}
	if b.expect && !b.asked {
		b.asked = true
		_, _ = b.c.fast.w.Write(continueLine) // net/http ignores its failure too
	}
	n, err := b.read(p)
	if err == io.EOF {
		b.ecrEOF = true
	}
	return n, err
}

// read is net/http's body.readLocked.
func (b *Body) read(p []byte) (int, error) {
	if b.sawEOF {
		return 0, io.EOF
	}
	b.start()
	if b.size >= 0 {
		if b.left == 0 {
			b.sawEOF = true
			return 0, io.EOF
		}
		if int64(len(p)) > b.left {
			p = p[:b.left]
		}
		n, err := b.c.readBody(p)
		b.left -= int64(n)
		if err == io.EOF {
			b.sawEOF = true
			if b.left > 0 {
				err = io.ErrUnexpectedEOF
			}
		}
		if err == nil && n > 0 && b.left == 0 {
			err, b.sawEOF = io.EOF, true
		}
		return n, err
	}
	n, err := b.cr.Read(p)
	if err == io.EOF {
		b.sawEOF = true
		if e := b.readTrailer(); e != nil {
			err, b.sawEOF, b.closed = e, false, true
		}
	}
	return n, err
}

// Trailer returns the trailer fields a chunked body ended with, once it
// has been read whole (nil for none).
func (b *Body) Trailer() http.Header { return b.trailer }

// start takes the body up: the framer follows it from here on, and reads
// are bounded as net/http bounds them.
func (b *Body) start() {
	if b.started {
		return
	}
	b.started = true
	c := b.c
	fc := c.fast
	c.mu.Lock()
	// The Request points into the head's bytes: the body is read into
	// another buffer, and the head's is kept until the hook returns.
	f := &c.f
	rest := f.buf[f.lo+f.fastEnd : f.hi]
	nb := fc.spare[:cap(fc.spare)]
	if len(nb) < max(len(rest), 4096) {
		nb = make([]byte, max(len(rest), 4096))
	}
	fc.held, fc.spare = f.buf, nil
	f.buf, f.lo, f.hi = nb, 0, copy(nb, rest)
	f.beginBody(b.size) // read within ReadTimeout from the request's start (deadline.go)
	c.mu.Unlock()
	if b.size < 0 {
		if fc.br == nil {
			fc.br = bufio.NewReaderSize(bodyRaw{c}, 4096)
		} else {
			fc.br.Reset(bodyRaw{c})
		}
		b.br = fc.br
		b.cr = httputil.NewChunkedReader(b.br)
	}
}

// bodyRaw reads the raw bytes of the body being read.
type bodyRaw struct{ c *guardConn }

func (r bodyRaw) Read(p []byte) (int, error) { return r.c.readBody(p) }

// readTrailer is net/http's body.readTrailer for a request.
func (b *Body) readTrailer() error {
	buf, err := b.br.Peek(2)
	if bytes.Equal(buf, []byte("\r\n")) {
		_, _ = b.br.Discard(2)
		return nil
	}
	if len(buf) < 2 {
		return errTrailerEOF
	}
	if err != nil {
		return err
	}
	if !seeUpcomingDoubleCRLF(b.br) {
		return errors.New("http: suspiciously long trailer after chunked body")
	}
	hdr, err := textproto.NewReader(b.br).ReadMIMEHeader()
	if err != nil {
		if err == io.EOF {
			return errTrailerEOF
		}
		return err
	}
	b.trailer = http.Header(hdr)
	return nil
}

var errTrailerEOF = errors.New("http: unexpected EOF reading trailer")

func seeUpcomingDoubleCRLF(r *bufio.Reader) bool {
	for peekSize := 4; ; peekSize++ {
		buf, err := r.Peek(peekSize)
		if bytes.HasSuffix(buf, []byte("\r\n\r\n")) {
			return true
		}
		if err != nil {
			break
		}
	}
	return false
}

// Close is what net/http's server does when a handler (or the transport
// it forwards with) closes a request body it did not read whole: it reads
// on up to 256 KiB looking for the end, and gives up at once on a
// declared length with more left than that. It does not write 100
// Continue.
func (b *Body) Close() error {
	if b.closed {
		return nil
	}
	var err error
	switch {
	case b.sawEOF:
	case b.size >= 0 && b.left > maxPostHandlerReadBytes:
		b.earlyClose = true
	default:
		var n int64
		n, err = io.CopyN(io.Discard, bodyReader{b}, maxPostHandlerReadBytes)
		if err == io.EOF {
			err = nil
		}
		if n == maxPostHandlerReadBytes {
			b.earlyClose = true
		}
	}
	b.closed = true
	return err
}

// bodyReader reads b without the 100 Continue (net/http's bodyLocked).
type bodyReader struct{ b *Body }

func (r bodyReader) Read(p []byte) (int, error) {
	if r.b.closed {
		return 0, errBodyClosed
	}
	return r.b.read(p)
}

// Reuse says what net/http's server does with the connection once the
// response to this request is written: keep it for the next request, or
// close it, and if so whether the response says "Connection: close"
// (announce). A body the handler neither read whole nor closed is read on
// here, up to 256 KiB, as the server does then. Call it before writing
// the response head, after which the body is not to be read again.
func (b *Body) Reuse() (keep, announce bool) {
	if b.expect {
		// net/http keeps the connection only if the body was read to its
		// end through its expectContinueReader, and reads no more of it.
		return b.ecrEOF, !b.ecrEOF
	}
	if b.closed {
		switch {
		case !b.sawEOF:
			return false, true
		case b.earlyClose:
			return false, false // closed after the response, unannounced
		}
		return true, false
	}
	if b.size >= 0 && b.left >= maxPostHandlerReadBytes {
		return false, true
	}
	_, err := io.CopyN(io.Discard, bodyReader{b}, maxPostHandlerReadBytes+1)
	switch err {
	case nil:
		return false, true // longer still
	case io.EOF:
		b.closed = true
		return true, false
	}
	return false, true
}
