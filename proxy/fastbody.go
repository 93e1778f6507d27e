package proxy

import (
	"fmt"
	"io"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/edgerate/edge/internal/wire"
)

// The request side of the fast forward (fastforward.go): an allowed
// request's body read by the plan the slow path reads it by (body.go's
// planBody), and sent to the origin as the transport sends what
// ReverseProxy hands it (docs/performance.md, "Forwarding without
// net/http").

// fastBody is an allowed request's body on its way to the origin.
type fastBody struct {
	src *clientBody
	r   io.Reader // what is sent: a buffered prefix, then the rest of src
	// size is what the origin is told: a Content-Length (0: none, or 0
	// for POST, PUT and PATCH, as the transport says it), or -1: chunked.
	size int64
	// keys are the Trailer field's names (sorted; chunked only) and
	// trailer the fields sent after the last chunk.
	keys    []string
	trailer http.Header
	release func()
	merged  bool // the body went into the head's write (merge)
}

// mergeMax bounds a body written with its head in one write.
const mergeMax = 16 << 10

// merge appends a body of a known length that is buffered whole and
// small to head, to be written with it: the origin receives the same
// bytes, with one write fewer.
func (fb *fastBody) merge(head *[]byte) {
	pr, ok := fb.r.(*prefixReader)
	if !ok || fb.size <= 0 || int64(len(pr.buf)) != fb.size || fb.size > mergeMax {
		return
	}
	*head = append(*head, pr.buf...)
	fb.r, fb.merged = nil, true
	fb.release()
}

// declaredTrailers returns the names a chunked request's Trailer fields
// declare, canonical, as net/http's server keeps them, and false if the
// server refuses the request for them (fixTrailer).
func declaredTrailers(h *Head) ([]string, bool) {
	if h.BodyLen >= 0 {
		return nil, true
	}
	var keys []string
	for _, f := range h.Fields {
		if !wire.EqualFoldLower(f.Name, "trailer") {
			continue
		}
		for k := range strings.SplitSeq(string(f.Value), ",") {
			if k = strings.Trim(k, " \t"); k == "" {
				continue
			}
			k = http.CanonicalHeaderKey(k)
			switch k {
			case "Transfer-Encoding", "Trailer", "Content-Length":
				return nil, false
			}
			if !slices.Contains(keys, k) {
				keys = append(keys, k)
			}
		}
	}
	slices.Sort(keys)
	return keys, true
}

// fastBodyOK reports whether the fast forward may take h's body: not one
// that the slow path answers before reading it (413 for a declared length
// over max_request_body, 400 for a Trailer field net/http refuses).
func fastBodyOK(d *domain, h *Head) bool {
	if h.BodyLen == 0 {
		return true
	}
	if h.Body == nil || d.Body.MaxSize > 0 && h.BodyLen > int64(d.Body.MaxSize) {
		return false
	}
	_, ok := declaredTrailers(h)
	return ok
}

// readFastBody is readBody for the fast forward, under the request's
// configuration st: the same plan (planBody) and reservation, and it says
// how the origin gets the body. A failed read while buffering is
// returned; the request is then answered with bodyRefusal.
func (p *Proxy) readFastBody(st *state, d *domain, h *Head) (fastBody, error) {
	fb := fastBody{release: noRelease}
	size := h.BodyLen
	if size == 0 {
		return fb, nil
	}
	keys, _ := declaredTrailers(h)
	fb.src = &clientBody{src: h.Body, r: h.Body}
	fb.r, fb.size, fb.keys = fb.src, size, keys
	plan := planBody(d, size) // a declared length over the limit does not get here (fastBodyOK)
	if plan.capAt > 0 {
		fb.r = &capReader{r: fb.r, left: plan.capAt}
	}
	release, ok := p.reserve(st, &plan)
	if !ok {
		return fb, nil
	}
	fb.release = release
	buf, err := readPrefix(fb.r, size, plan.buffer)
	if err != nil {
		fb.release()
		return fb, err
	}
	prefix := &prefixReader{buf: buf, done: fb.release}
	if int64(len(buf)) < plan.buffer || size == int64(len(buf)) {
		fb.r = prefix
		if keys == nil {
			fb.size = int64(len(buf))
		} else {
			// Chunked, with the trailer the client sent: ReverseProxy
			// copies the request, trailer and all, once it is read.
			fb.trailer = h.Body.Trailer()
			for k := range fb.trailer {
				if !slices.Contains(keys, k) {
					keys = append(keys, k)
				}
			}
			slices.Sort(keys)
			fb.keys = keys
		}
	} else {
		fb.r = io.MultiReader(prefix, fb.r)
	}
	if fb.size == 0 {
		fb.r = nil // ReverseProxy sends no body for a length of 0
	}
	return fb, nil
}

// contentLengthZero reports whether the transport says "Content-Length: 0"
// for a request of method without a body.
func contentLengthZero(method string) bool {
	return method == http.MethodPost || method == http.MethodPut || method == http.MethodPatch
}

// appendFraming appends the fields the transport writes after Host and
// User-Agent for the body fb: its length or chunking, and the Trailer
// field. It returns an error where the transport refuses the request.
func (fb *fastBody) appendFraming(b []byte, method string) ([]byte, error) {
	switch {
	case fb.size > 0 || fb.size == 0 && contentLengthZero(method):
		b = append(b, "Content-Length: "...)
		b = strconv.AppendInt(b, fb.size, 10)
		b = append(b, "\r\n"...)
	case fb.size < 0:
		b = append(b, "Transfer-Encoding: chunked\r\n"...)
	}
	if len(fb.keys) > 0 {
		for _, k := range fb.keys {
			switch k {
			case "Transfer-Encoding", "Trailer", "Content-Length":
				return b, fmt.Errorf("net/http: invalid Trailer key %q", k)
			}
		}
		b = append(b, "Trailer: "...)
		b = append(b, strings.Join(fb.keys, ",")...)
		b = append(b, "\r\n"...)
	}
	return b, nil
}

// errClientBody marks a failed read of the client's body while it was
// sent: the client's failure, not the origin's.
type errClientBody struct{ err error }

func (e errClientBody) Error() string { return "reading the request body: " + e.err.Error() }
func (e errClientBody) Unwrap() error { return e.err }

// Send writes the body to the origin after its head (an
// origin.SendBody), as the transport does: a Content-Length body as it is read, a chunked one a chunk per
// read, then the last chunk and the trailer. buf is the copy buffer
// (32 KiB, io.Copy's).
func (fb *fastBody) Send(c io.Writer, buf []byte) error {
	if fb.r == nil {
		return nil
	}
	chunked := fb.size < 0
	var written int64
	for {
		off := 0
		if chunked {
			off = 18 // room for the chunk-size line
		}
		n, rerr := fb.r.Read(buf[off : len(buf)-2])
		if n > 0 {
			var out []byte
			if chunked {
				line := strconv.AppendInt(buf[:0:off], int64(n), 16)
				line = append(line, "\r\n"...)
				start := off - len(line)
				copy(buf[start:], line)
				out = append(buf[start:off+n], "\r\n"...)
			} else {
				out = buf[:n]
				if written+int64(n) > fb.size {
					out = out[:fb.size-written] // io.LimitReader's cut
				}
			}
			written += int64(n)
			if _, err := c.Write(out); err != nil {
				return err
			}
		}
		if rerr == io.EOF {
			break
		}
		if rerr != nil {
			return errClientBody{rerr}
		}
		if !chunked && written >= fb.size {
			break
		}
	}
	if !chunked {
		if written < fb.size {
			return fmt.Errorf("http: ContentLength=%d with Body length %d", fb.size, written)
		}
		return nil
	}
	end := append(buf[:0], "0\r\n"...)
	end = appendHeader(end, fb.trailer, nil)
	end = append(end, "\r\n"...)
	_, err := c.Write(end)
	return err
}

// endBody does what net/http's server does with the body of a request it
// answers without having read all of it (a refusal, or the fast forward's
// own answer to a failure, after the transport closed the body), before
// the answer a is written: it reads up to 256 KiB of it and keeps the
// connection, or closes the connection after the answer, announced with
// "Connection: close" (a longer or failing body, or a client still waiting
// for 100 Continue) or not.
func endBody(h *Head, a *answer) {
	if h.Body == nil {
		return
	}
	keep, announce := h.Body.Reuse()
	if !keep {
		h.Client.CloseAfter()
	}
	a.serverClose = announce
}

// refuseFastBody answers a request whose body failed (bodyRefusal), as
// refuseBody does, after out: the connection closes after it.
func (p *Proxy) refuseFastBody(d *domain, h *Head, method string, err error, out []byte, rep *answerReport) []byte {
	no := bodyRefusal(err)
	p.metrics.refused.WithLabelValues(strconv.Itoa(no.status)).Inc()
	h.Client.CloseAfter()
	var a answer
	a.refusalAnswer(no, outcomeBodyRefused)
	a.strictTransport(d, isHTTPS(h.TLS, h.Front))
	a.altService(p.altSvcOn(h.TLS))
	d.requests.count(&a)
	rep.sentAnswer(&a, method == http.MethodHead)
	return a.appendTo(out, time.Now(), method == http.MethodHead)
}

// replayable reports whether the transport sends a request again on a new
// connection when a reused one failed before the response (net/http's
// Request.isReplayable): no body, and an idempotent method or an
// Idempotency-Key field.
func replayable(h *Head, method string, fb *fastBody) bool {
	if fb.r != nil {
		return false
	}
	switch method {
	case http.MethodGet, http.MethodHead, http.MethodOptions:
		return true
	}
	for _, f := range h.Fields {
		if wire.EqualFoldLower(f.Name, "idempotency-key") || wire.EqualFoldLower(f.Name, "x-idempotency-key") {
			return true
		}
	}
	return false
}
