package proxy

import (
	"errors"
	"io"
	"net"
	"net/http"
	"strconv"
	"sync"
	"sync/atomic"
)

// This file reads an allowed request's body before the origin sees it.
//
// A client that sends its body slowly holds whatever carries the body on:
// when edge streams it, an origin connection (and, at most origins, a
// worker) for as long as the client cares to take. So, as nginx does by
// default (proxy_request_buffering on), edge reads the body into memory
// first, up to the domain's request_buffer, and contacts the origin only
// once the body has arrived whole or the buffer is full; then the rest
// streams after the buffered part. A slow client then costs edge a
// goroutine and its buffer, which edge's read timeout bounds, and costs
// the origin nothing.
//
// The rate decision comes first, on the head alone: a refused request
// never buffers, and a client that sent "Expect: 100-continue" is told to
// continue (by net/http, at the first read of the body) only once its
// request is allowed.

// prefetchLimit is how much of a chunked body is read before the origin is
// contacted when the domain does not buffer (request_buffering: false):
// a body whose chunked framing breaks within it is refused with 400 before
// its head reaches the origin. A longer body streams, and if its framing
// breaks later the origin sees an aborted request (a truncated body and a
// closed connection, never a complete request) and the client gets 400.
const prefetchLimit = 64 << 10

// errBodyTooLarge is the read error of a body over max_request_body.
var errBodyTooLarge = errors.New("request body over max_request_body")

// bufferBudget bounds the bytes that request bodies hold in memory at
// once, across all requests: a reservation that would pass the limit
// fails, and that request streams its body instead. It is safe for
// concurrent use; the zero value holds nothing.
type bufferBudget struct{ reserved atomic.Int64 }

// reserve takes n bytes if that keeps the total within limit.
func (b *bufferBudget) reserve(n, limit int64) bool {
	for {
		held := b.reserved.Load()
		if n > limit-held {
			return false
		}
		if b.reserved.CompareAndSwap(held, held+n) {
			return true
		}
	}
}

// bodyPlan is how an allowed request's body goes to the origin, the same
// for both request paths (readBody, readFastBody): what is known of the
// body decides it, with the domain's body settings and max_buffered_bytes.
type bodyPlan struct {
	// tooLarge: the declared length is over max_request_body (413 before
	// a byte is read).
	tooLarge bool
	// capAt cuts a body of unknown length when it passes max_request_body
	// (0: no cap).
	capAt int64
	// buffer is how much is read before the origin is contacted, reserved
	// against max_buffered_bytes (0: the body streams at once); for a body
	// of unknown length one byte more, which tells a body of exactly the
	// limit from a longer one.
	buffer int64
}

// planBody plans a body of size bytes (-1: unknown, chunked) to d's origin.
func planBody(d *domain, size int64) bodyPlan {
	pol := d.Body
	var plan bodyPlan
	if pol.MaxSize > 0 {
		if size > int64(pol.MaxSize) {
			return bodyPlan{tooLarge: true}
		}
		if size < 0 {
			plan.capAt = int64(pol.MaxSize)
		}
	}
	switch {
	case pol.Buffer:
		plan.buffer = int64(pol.BufferSize)
	case size < 0:
		plan.buffer = prefetchLimit
	}
	if size >= 0 {
		plan.buffer = min(plan.buffer, size)
	}
	if size < 0 && plan.buffer > 0 {
		plan.buffer++
	}
	return plan
}

// reserve takes the plan's buffer from the bytes bodies may hold at once
// (st's max_buffered_bytes), and returns the function that gives it back
// (safe to call twice). When the budget has no room the body streams:
// reserve reports false, and the plan buffers nothing.
func (p *Proxy) reserve(st *state, plan *bodyPlan) (func(), bool) {
	if plan.buffer == 0 {
		return noRelease, false
	}
	n := plan.buffer
	if !p.buffered.reserve(n, int64(st.table.MaxBufferedBytes)) {
		p.metrics.bufferFull.Inc()
		plan.buffer = 0
		return noRelease, false
	}
	var released atomic.Bool
	return func() {
		if released.CompareAndSwap(false, true) {
			p.buffered.reserved.Add(-n)
		}
	}, true
}

// readBody enforces the domain's max_request_body and buffers an allowed
// request's body as its plan says (planBody), in place: r's body is then
// ex.body. It returns a function that returns the buffer's reservation
// (call it once the request is done; it is safe to call twice), or nil if
// it has answered (413, or 400/408 for a body that failed while being
// buffered).
//
// A body longer than max_request_body whose length is not declared is cut
// when it passes the limit: if that happens after the buffered part went
// to the origin, the origin sees an aborted request and the client 413.
func (p *Proxy) readBody(w http.ResponseWriter, r *http.Request, ex *exchange) func() {
	if ex.held != nil {
		return noRelease // read whole before the decision (graphql.go)
	}
	cb := wrapBody(r, ex)
	if cb == nil {
		return noRelease // no body
	}
	plan := planBody(ex.d, r.ContentLength)
	if grpcRequest(r.Header) {
		// A gRPC stream's messages go as they come, whatever
		// request_buffering says: a client that waits for an answer to
		// each would wait for ever on a buffer (grpc.go).
		plan.buffer = 0
	}
	if plan.tooLarge {
		p.refuseBody(w, ex.d, errBodyTooLarge)
		return nil
	}
	if plan.capAt > 0 {
		cb.r = &capReader{r: cb.r, left: plan.capAt}
	}
	if ex.d.Respond != nil {
		return noRelease // a static response does not read the body
	}
	release, ok := p.reserve(ex.st, &plan)
	if !ok {
		return noRelease
	}
	buf, err := readPrefix(cb, r.ContentLength, plan.buffer)
	if err != nil {
		release()
		p.refuseBody(w, ex.d, err)
		return nil
	}
	prefix := &prefixReader{buf: buf, done: release}
	if int64(len(buf)) < plan.buffer || r.ContentLength == int64(len(buf)) {
		// The whole body is here: the origin gets it at once, with its
		// length (unless trailers must follow it, which needs chunking).
		cb.r = prefix
		if r.Trailer == nil {
			r.ContentLength = int64(len(buf))
			r.TransferEncoding = nil
		}
	} else {
		cb.r = io.MultiReader(prefix, cb.r)
	}
	return release
}

func noRelease() {}

// hasBody reports whether r has a body to read.
func hasBody(r *http.Request) bool {
	return r.Body != nil && r.Body != http.NoBody && r.ContentLength != 0
}

// wrapBody wraps r's body, if it has one, so that a failed read can be
// told from an origin failure (see errorLog.handle), and returns the
// wrapped body, also in ex.body (ReverseProxy hands its error handler a
// clone of the request with the body wrapped; the exchange in the
// context is what survives); nil for none. It reads nothing.
func wrapBody(r *http.Request, ex *exchange) *clientBody {
	if !hasBody(r) {
		return nil
	}
	cb := &clientBody{src: r.Body, r: r.Body}
	r.Body, ex.body = cb, cb
	return cb
}

// clientBody is the client's body as edge reads it, on either path: it
// remembers its first read error, so that a failed read can be told from
// an origin failure. Its reads may come from the request's goroutine or
// the transport's.
type clientBody struct {
	src io.Reader // the transport's: net/http's body, or the guard's
	r   io.Reader // what Read reads: src, or a buffered part first (readBody)

	mu  sync.Mutex
	err error
}

func (b *clientBody) Read(p []byte) (int, error) {
	n, err := b.r.Read(p)
	if err != nil && err != io.EOF {
		b.mu.Lock()
		if b.err == nil {
			b.err = err
		}
		b.mu.Unlock()
	}
	return n, err
}

// Close closes the transport's body.
func (b *clientBody) Close() error {
	if c, ok := b.src.(io.Closer); ok {
		return c.Close()
	}
	return nil
}

// failure returns the error the body failed with, or nil.
func (b *clientBody) failure() error {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.err
}

// bodyError returns the error the client's body failed with, or nil.
func bodyError(r *http.Request) error {
	ex := exchangeOf(r.Context())
	if ex == nil || ex.body == nil {
		return nil
	}
	return ex.body.failure()
}

// refuseBody answers a request of d whose body is refused or failed.
func (p *Proxy) refuseBody(w http.ResponseWriter, d *domain, err error) {
	no := bodyRefusal(err)
	p.metrics.refused.WithLabelValues(strconv.Itoa(no.status)).Inc()
	var a answer
	a.refusalAnswer(no, outcomeBodyRefused)
	d.requests.count(&a)
	a.write(w)
}

// bodyRefusal is the answer to a request whose body could not be read:
// 413 when it was over the domain's max_request_body, 408 when the client
// was too slow, 400 when it sent broken framing or stopped early.
func bodyRefusal(err error) refusal {
	var ne net.Error
	if errors.Is(err, errBodyTooLarge) {
		return refusal{http.StatusRequestEntityTooLarge, "request body over the size limit"}
	}
	if errors.As(err, &ne) && ne.Timeout() {
		return refusal{http.StatusRequestTimeout, "request body not received in time"}
	}
	return badRequest("malformed or incomplete request body")
}

// readPrefix reads the start of a body of length size (-1: unknown) from
// src: all of it if it has at most limit bytes, else limit bytes. A body
// of unknown length grows its buffer as it arrives, so a short body costs
// little whatever the limit.
func readPrefix(src io.Reader, size, limit int64) ([]byte, error) {
	if size >= 0 {
		buf := make([]byte, min(size, limit))
		_, err := io.ReadFull(src, buf)
		return buf, err
	}
	buf := make([]byte, 0, min(limit, 16<<10))
	for int64(len(buf)) < limit {
		if len(buf) == cap(buf) {
			grown := make([]byte, len(buf), min(2*int64(cap(buf)), limit))
			copy(grown, buf)
			buf = grown
		}
		n, err := src.Read(buf[len(buf):cap(buf)])
		buf = buf[:len(buf)+n]
		if err == io.EOF {
			break
		}
		if err != nil {
			return nil, err
		}
	}
	return buf, nil
}

// prefixReader reads the buffered start of a body, then calls done and
// lets the buffer go.
type prefixReader struct {
	buf  []byte
	done func()
}

func (pr *prefixReader) Read(p []byte) (int, error) {
	if len(pr.buf) == 0 {
		return 0, io.EOF
	}
	n := copy(p, pr.buf)
	if pr.buf = pr.buf[n:]; len(pr.buf) == 0 {
		pr.buf = nil
		pr.done()
	}
	return n, nil
}

// capReader fails with errBodyTooLarge once more than left bytes have been
// read from r.
type capReader struct {
	r    io.Reader
	left int64
}

func (c *capReader) Read(p []byte) (int, error) {
	if c.left < 0 {
		return 0, errBodyTooLarge
	}
	if int64(len(p)) > c.left+1 {
		p = p[:c.left+1]
	}
	n, err := c.r.Read(p)
	if c.left -= int64(n); c.left < 0 {
		return n + int(c.left), errBodyTooLarge
	}
	return n, err
}
