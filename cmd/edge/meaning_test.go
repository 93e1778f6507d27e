package main

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"hash/crc32"
	"io"
	"net/http"
	"net/textproto"
	"slices"
	"strings"
	"testing"
)

// The differential tests of forwarded responses compare what the two
// paths' clients and origins received in meaning, not in bytes: each
// client's bytes are read back as its HTTP client would (http.ReadResponse,
// every response of the connection, 1xx included), and each origin's
// record renders every request head canonically (canonicalRequest). What a client can tell apart is compared; how the
// answer was framed is not.

// answer is what a client made of one response.
type answer struct {
	status    int
	fields    http.Header // less Date and the framing fields
	delimited string      // "yes" (by length or chunked), "none" (no body allowed) or "close"
	chunked   bool        // not compared: for sameMeaning's one allowance
	body      []byte
	trailer   http.Header
}

// heard is what a client made of one connection's bytes: the responses
// it read in full, in order, then whatever did not read as one. A
// response cut off by the end of the stream (its head or body short)
// counts as none: either way the client got no answer and the connection
// closed.
type heard struct {
	answers []answer
	rest    string // "" when the stream ended where a response would begin
}

// framingFields are set aside: how a response is delimited and whether
// its connection stays open may differ between the paths (where the
// connection closes shows in the responses that follow it, or do not).
var framingFields = []string{"Date", "Content-Length", "Transfer-Encoding", "Connection", "Keep-Alive"}

// hear reads raw, the bytes a client received on a connection on which it
// sent steps, as the client's HTTP library would.
func hear(steps []string, raw string) heard {
	methods := requestMethods(strings.Join(steps, ""))
	br := bufio.NewReader(strings.NewReader(raw))
	var h heard
	for i := 0; ; {
		if _, err := br.Peek(1); err == io.EOF {
			return h
		}
		method := http.MethodGet
		if i < len(methods) {
			method = methods[i]
		}
		resp, err := http.ReadResponse(br, &http.Request{Method: method})
		if errors.Is(err, io.ErrUnexpectedEOF) {
			return h // a head cut off
		}
		if err != nil {
			rest, _ := io.ReadAll(br)
			h.rest = fmt.Sprintf("unreadable response (%v), then %q", err, rest)
			return h
		}
		body, err := io.ReadAll(resp.Body)
		if errors.Is(err, io.ErrUnexpectedEOF) {
			return h // a body cut off
		}
		if err != nil {
			rest, _ := io.ReadAll(br)
			h.rest = fmt.Sprintf("unreadable body (%v), then %q", err, rest)
			return h
		}
		a := answer{status: resp.StatusCode, fields: resp.Header.Clone(), body: body, trailer: resp.Trailer}
		switch {
		case method == http.MethodHead || resp.StatusCode < 200 || resp.StatusCode == 204 || resp.StatusCode == 304:
			a.delimited = "none"
		case slices.Contains(resp.TransferEncoding, "chunked"):
			a.delimited, a.chunked = "yes", true
		case resp.ContentLength >= 0:
			a.delimited = "yes"
		default:
			a.delimited = "close"
		}
		for _, k := range framingFields {
			if k == "Content-Length" && method == http.MethodHead {
				continue // the length of the body a GET would get: meaning, not framing
			}
			delete(a.fields, k)
		}
		h.answers = append(h.answers, a)
		if c := resp.StatusCode; c >= 200 || c < 100 || c == http.StatusSwitchingProtocols {
			i++
		}
	}
}

// requestMethods is the method of each request in raw, as far as it reads
// as a sequence of requests; the responses after are read as to a GET
// (edge's sentinel).
func requestMethods(raw string) []string {
	var methods []string
	br := bufio.NewReader(strings.NewReader(raw))
	for {
		req, err := http.ReadRequest(br)
		if err != nil {
			return methods
		}
		methods = append(methods, req.Method)
		if _, err := io.Copy(io.Discard, req.Body); err != nil {
			return methods
		}
	}
}

// render is a's meaning as text: status, fields sorted by name (the values
// of one name in order), body, trailer.
func (a answer) render() string {
	var b strings.Builder
	fmt.Fprintf(&b, "%d, body delimited: %s\n", a.status, a.delimited)
	b.WriteString(renderFields("", a.fields))
	if len(a.body) > 256 {
		fmt.Fprintf(&b, "body: %d bytes, crc %08x\n", len(a.body), crc32.ChecksumIEEE(a.body))
	} else {
		fmt.Fprintf(&b, "body: %q\n", a.body)
	}
	b.WriteString(renderFields("trailer ", a.trailer))
	return b.String()
}

func renderFields(prefix string, h http.Header) string {
	keys := make([]string, 0, len(h))
	for k := range h {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	var b strings.Builder
	for _, k := range keys {
		for _, v := range h[k] {
			fmt.Fprintf(&b, "  %s%s: %s\n", prefix, k, v)
		}
	}
	return b.String()
}

func (h heard) render() string {
	var b strings.Builder
	for i, a := range h.answers {
		fmt.Fprintf(&b, "[%d] %s", i, a.render())
	}
	if h.rest != "" {
		fmt.Fprintf(&b, "then %s\n", h.rest)
	}
	return b.String()
}

// sameMeaning reports whether a client could tell fast from slow, the
// fast and slow path's answers: they must agree in everything render
// shows, but for one race of the slow path. ReverseProxy flushes the head
// of a body of unknown length from a timer set to fire at once, racing its
// first write of the body: a head the timer wrote has no sniffed
// Content-Type, one the write wrote has. So where the slow path chunked the
// body, a Content-Type on one side only that is what http.DetectContentType
// makes of the start of the body is no difference.
func sameMeaning(fast, slow answer) bool {
	if fast.render() == slow.render() {
		return true
	}
	if !slow.chunked {
		return false
	}
	f, s := fast.fields.Clone(), slow.fields.Clone()
	ft, st := f.Values("Content-Type"), s.Values("Content-Type")
	switch {
	case len(ft) == 1 && len(st) == 0 && sniffedFrom(ft[0], fast.body):
		f.Del("Content-Type")
	case len(st) == 1 && len(ft) == 0 && sniffedFrom(st[0], slow.body):
		s.Del("Content-Type")
	default:
		return false
	}
	fast.fields, slow.fields = f, s
	return fast.render() == slow.render()
}

// sniffedFrom reports whether http.DetectContentType gives ct for some
// start of body (the bytes a first write held).
func sniffedFrom(ct string, body []byte) bool {
	for n := 1; n <= min(len(body), 512); n++ {
		if http.DetectContentType(body[:n]) == ct {
			return true
		}
	}
	return false
}

// sameHeard reports whether fast and slow, what two clients heard on each
// of their connections, mean the same.
func sameHeard(fast, slow []heard) bool {
	if len(fast) != len(slow) {
		return false
	}
	for i := range fast {
		if len(fast[i].answers) != len(slow[i].answers) || fast[i].rest != slow[i].rest {
			return false
		}
		for j := range fast[i].answers {
			if !sameMeaning(fast[i].answers[j], slow[i].answers[j]) {
				return false
			}
		}
	}
	return true
}

func renderHeard(hs []heard) string {
	var b strings.Builder
	for i, h := range hs {
		if i > 0 {
			b.WriteString("---\n")
		}
		b.WriteString(h.render())
	}
	return b.String()
}

// canonicalRequest renders a request head as an origin's HTTP library
// would see it: the request line as it came, then the fields sorted by
// canonical name, the values of one name in the order they came, each
// trimmed.
func canonicalRequest(head string) string {
	lines := strings.Split(strings.TrimRight(head, "\r\n"), "\r\n")
	type field struct{ name, value string }
	var fields []field
	for _, l := range lines[1:] {
		name, value, _ := strings.Cut(l, ":")
		fields = append(fields, field{textproto.CanonicalMIMEHeaderKey(name), strings.TrimSpace(value)})
	}
	slices.SortStableFunc(fields, func(a, b field) int { return strings.Compare(a.name, b.name) })
	var b bytes.Buffer
	b.WriteString(lines[0] + "\n")
	for _, f := range fields {
		fmt.Fprintf(&b, "  %s: %s\n", f.name, f.value)
	}
	return b.String()
}

// sidesAgree reports where the fast path's side of a differential test
// differs from the slow path's: what the clients heard (hear), what the
// origin received (canonicalRequest), the metrics. Each argument is {fast
// path, slow path}.
func sidesAgree(t *testing.T, client [2][]heard, origin, metrics [2]string) {
	t.Helper()
	if !sameHeard(client[0], client[1]) {
		t.Errorf("clients heard, fast path:\n%s\nslow path:\n%s", renderHeard(client[0]), renderHeard(client[1]))
	}
	if origin[0] != origin[1] {
		t.Errorf("origin received, fast path:\n%s\nslow path:\n%s", origin[0], origin[1])
	}
	if metrics[0] != metrics[1] {
		t.Errorf("metrics differ:\nfast path\n%s\nslow path\n%s", metrics[0], metrics[1])
	}
}
