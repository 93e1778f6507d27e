package proxy

import (
	"fmt"
	"io"
	"net/http"
	"net/textproto"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/edgerate/edge/internal/wire"
)

// The fast forward's response side (fastforward.go): the origin's response
// head read as ReverseProxy reads it, and the answer framed for the client
// (responseWriter), meaning what the slow path's means.

var (
	excludedNoBody = fieldSet{"Content-Length", "Transfer-Encoding"}
	excluded304    = fieldSet{"Content-Type", "Content-Length", "Transfer-Encoding"}
)

// first is h.Get(key) for a key in canonical form, without canonicalising
// it again.
func first(h http.Header, key string) string {
	if v := h[key]; len(v) > 0 {
		return v[0]
	}
	return ""
}

// containsFold reports whether s contains sub (lower-case ASCII) in any
// case: mime.ParseMediaType, a parse and an allocation, is then asked only
// about a value that may name it.
func containsFold(s, sub string) bool {
	for i := 0; i+len(sub) <= len(s); i++ {
		if wire.EqualFoldLower(s[i:i+len(sub)], sub) {
			return true
		}
	}
	return false
}

// appendHeader appends h's fields as net/http's Header.WriteSubset writes
// them: sorted by name, less exclude's and those whose name is not a token,
// each value with CR and LF made spaces and surrounding whitespace trimmed.
// It writes them itself, without WriteSubset's pooled sorter and the
// Replacer it runs over every value.
func appendHeader(b []byte, h http.Header, exclude fieldSet) []byte {
	var buf [16]string
	keys := buf[:0]
	for k := range h {
		if !exclude.has(k) {
			keys = append(keys, k)
		}
	}
	slices.Sort(keys)
	for _, k := range keys {
		if !wire.IsToken(k) { // httpguts.ValidHeaderFieldName
			continue
		}
		for _, v := range h[k] {
			if strings.IndexByte(v, '\n') >= 0 || strings.IndexByte(v, '\r') >= 0 {
				v = headerNewlineToSpace.Replace(v)
			}
			v = textproto.TrimString(v)
			b = append(b, k...)
			b = append(b, ": "...)
			b = append(b, v...)
			b = append(b, "\r\n"...)
		}
	}
	return b
}

// fieldSet is a few canonical field names: a search of two or three
// strings costs less than a map's hash.
type fieldSet []string

func (s fieldSet) has(k string) bool {
	for _, f := range s {
		if f == k {
			return true
		}
	}
	return false
}

// headerNewlineToSpace is net/http's own, for appendHeader.
var headerNewlineToSpace = strings.NewReplacer("\n", " ", "\r", " ")

// appendStatusLine appends the status line net/http's server writes.
func appendStatusLine(b []byte, code int) []byte {
	if code >= 100 && code < 100+len(statusLines) {
		if line := statusLines[code-100]; line != "" {
			return append(b, line...)
		}
	}
	return fmt.Appendf(b, "HTTP/1.1 %03d status code %d\r\n", code, code)
}

// statusLines are the status lines of the codes net/http names, 100 to
// 599, made once: a refusal's status line is then one copy.
var statusLines = func() (lines [500]string) {
	for i := range lines {
		if text := http.StatusText(100 + i); text != "" {
			lines[i] = "HTTP/1.1 " + strconv.Itoa(100+i) + " " + text + "\r\n"
		}
	}
	return lines
}()

func upgradeOf(h http.Header) string {
	if !containsToken([]byte(h.Get("Connection")), "upgrade") {
		return ""
	}
	return h.Get("Upgrade")
}

// removeHopByHop removes the fields Connection names and the hop-by-hop
// fields (hopHeader), as ReverseProxy does.
func removeHopByHop(h http.Header) {
	for _, f := range h["Connection"] {
		for sf := range strings.SplitSeq(f, ",") {
			switch sf = textproto.TrimString(sf); {
			case sf == "":
			case wire.EqualFoldLower(sf, "keep-alive"):
				delete(h, "Keep-Alive") // Del, without making the canonical name anew
			case wire.EqualFoldLower(sf, "close"):
				delete(h, "Close")
			default:
				h.Del(sf)
			}
		}
	}
	for k := range h { // a few fields: fewer steps than a delete per hop-by-hop name
		if hopHeader(k) {
			delete(h, k)
		}
	}
}

// hopHeader reports whether k is one of ReverseProxy's hop-by-hop fields.
func hopHeader(k string) bool {
	switch k {
	case "Connection", "Proxy-Connection", "Keep-Alive", "Proxy-Authenticate",
		"Proxy-Authorization", "Te", "Trailer", "Transfer-Encoding", "Upgrade":
		return true
	}
	return false
}

// forEachElement calls fn for each comma-separated element of v, as
// net/http's server reads the Trailer field.
func forEachElement(v string, fn func(string)) {
	for f := range strings.SplitSeq(v, ",") {
		if f = textproto.TrimString(f); f != "" {
			fn(f)
		}
	}
}

// validTrailer is httpguts.ValidTrailerHeader.
func validTrailer(k string) bool {
	switch k {
	case "Authorization", "Cache-Control", "Connection", "Content-Encoding", "Content-Length",
		"Content-Range", "Content-Type", "Expect", "Host", "Keep-Alive", "Max-Forwards", "Pragma",
		"Proxy-Authenticate", "Proxy-Authorization", "Proxy-Connection", "Range", "Realm", "Te",
		"Trailer", "Transfer-Encoding", "Www-Authenticate":
		return false
	}
	return true
}

// responseWriter frames a relayed response for an HTTP/1.1 client on a
// connection that stays open: the origin's Content-Length kept, a body of
// unknown length chunked, the fields and the status line written as
// net/http's server writes them (appendHeader, appendStatusLine), Date and
// a sniffed Content-Type added where missing, as net/http adds them to
// what ReverseProxy writes.
type responseWriter struct {
	r             *relay
	hdr           http.Header
	status        int
	contentLength int64 // -1: unknown
	written       int64
	trailers      []string // declared
	wroteHeader   bool
	chunking      bool
}

// sniffLen is what http.DetectContentType considers of a body.
const sniffLen = 512

// copyBody copies the body to the client, and reports whether it ended
// well. What the answer holds is written to the client when the origin's
// next read would wait, and at fastFlushAt. The head is written at once,
// but for a body that needs a Content-Type sniffed: that waits for the
// body's first sniffLen bytes, or its end, when its length is known (as
// net/http's server, which holds a response of known length until more
// is written, sees at least as much); for a body of unknown length, a
// stream that may wait long between its reads, for its first read.
func (w *responseWriter) copyBody(body io.Reader, buf []byte) bool {
	if w.r.isHEAD || body == http.NoBody {
		return true
	}
	if !w.needsSniff() {
		w.writeHeader(nil)
	}
	held := 0 // bytes of buf held for sniffing
	for {
		if held == 0 && len(w.r.out) > 0 && !w.bodyAtHand() {
			w.r.flush()
		}
		nr, rerr := body.Read(buf[held:])
		if rerr != nil && rerr != io.EOF {
			w.r.d.errLog.bodyFailed(string(w.r.h.Method), w.r.h.Target, rerr)
		}
		if !w.wroteHeader {
			held += nr
			if rerr == nil && held < sniffLen && (w.contentLength != -1 || held == 0) {
				continue
			}
			nr, held = held, 0
			w.writeHeader(buf[:nr])
		}
		if nr > 0 && !w.write(buf[:nr]) {
			return false
		}
		if rerr != nil {
			return rerr == io.EOF
		}
		if len(w.r.out) >= fastFlushAt {
			w.r.flush()
		}
	}
}

// bodyAtHand reports whether the next read of the body can likely be
// served without waiting for the origin (then the answer need not be
// written to the client first).
func (w *responseWriter) bodyAtHand() bool {
	return w.r.br != nil && w.r.br.Buffered() > 0
}

func (w *responseWriter) needsSniff() bool {
	_, haveType := w.hdr["Content-Type"]
	return bodyAllowed(w.status) && !haveType && first(w.hdr, "Content-Encoding") == ""
}

// write appends p, the next bytes of the body, and reports whether the
// answer goes on: not past the origin's Content-Length (ReverseProxy's
// copy fails there with http.ErrContentLength), not to a client gone.
func (w *responseWriter) write(p []byte) bool {
	if w.r.failed {
		return false
	}
	w.written += int64(len(p))
	if w.contentLength != -1 && w.written > w.contentLength {
		return false
	}
	if w.chunking {
		w.r.out = strconv.AppendInt(w.r.out, int64(len(p)), 16)
		w.r.out = append(w.r.out, "\r\n"...)
		w.r.out = append(w.r.out, p...)
		w.r.out = append(w.r.out, "\r\n"...)
	} else {
		w.r.out = append(w.r.out, p...)
	}
	return true
}

// writeHeader appends the head; p is the start of the body, to sniff a
// Content-Type from where the origin sent none. Fields a status without
// a body must not have are left out, as net/http's server leaves them.
func (w *responseWriter) writeHeader(p []byte) {
	w.wroteHeader = true
	hdr := w.hdr
	var exclude fieldSet
	var contentType string
	if bodyAllowed(w.status) {
		if len(p) > 0 && w.needsSniff() {
			contentType = http.DetectContentType(p)
		}
	} else if w.status == http.StatusNotModified {
		exclude = excluded304
	} else {
		exclude = excludedNoBody
	}
	w.chunking = !w.r.isHEAD && bodyAllowed(w.status) && w.contentLength == -1
	b := appendStatusLine(w.r.out, w.status)
	b = appendHeader(b, hdr, exclude)
	if !has(hdr, "Date") {
		b = append(b, "Date: "...)
		b = appendDate(b, time.Now())
		b = append(b, "\r\n"...)
	}
	if contentType != "" {
		b = append(b, "Content-Type: "...)
		b = append(b, contentType...)
		b = append(b, "\r\n"...)
	}
	if w.chunking {
		b = append(b, "Transfer-Encoding: chunked\r\n"...)
	}
	w.r.out = append(b, "\r\n"...)
}

func has(h http.Header, key string) bool {
	_, ok := h[key]
	return ok
}

// finish ends the answer: the last chunk and the trailers; and the
// connection closed if the body fell short of its Content-Length.
func (w *responseWriter) finish() {
	if w.chunking {
		w.r.out = append(w.r.out, "0\r\n"...)
		t := http.Header(nil)
		for k, vv := range w.hdr {
			if kk, found := strings.CutPrefix(k, http.TrailerPrefix); found {
				if t == nil {
					t = make(http.Header)
				}
				t[kk] = vv
			}
		}
		for _, k := range w.trailers {
			if t == nil {
				t = make(http.Header)
			}
			for _, v := range w.hdr[k] {
				t.Add(k, v)
			}
		}
		if t != nil {
			w.r.out = appendHeader(w.r.out, t, nil)
		}
		w.r.out = append(w.r.out, "\r\n"...)
	}
	if !w.r.isHEAD && w.contentLength != -1 && bodyAllowed(w.status) && w.contentLength != w.written {
		w.r.client.CloseAfter()
	}
}
