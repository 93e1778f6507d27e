package wire

import (
	"net/http"
	"net/netip"
	"time"
)

// Head is a request head that the framing guard offers the fast path,
// before net/http sees it: the seam between the two. Its byte slices point
// into the connection's buffer, valid only while the offer is answered.
//
// What the guard guarantees of an offered head, and the fast path relies
// on: net/http would parse it exactly as these fields say and serve it on
// a connection that stays open. So it is HTTP/1.1; Target is in origin
// form, printable ASCII; there is one Host field, whose bytes net/http
// accepts; no Upgrade; no Expect but one "100-continue" with a body; no
// Connection field other than keep-alive; no field value holds a control
// byte other than HTAB; the head is within the server's MaxHeaderBytes
// and has at most 64 field lines; it is the only request in flight on its
// connection. Its framing (Content-Length or chunked, never both, no
// other Transfer-Encoding) was checked; BodyLen says what it is.
type Head struct {
	Method []byte
	Target []byte // origin-form: starts with '/'
	Host   []byte // the Host field's value, without surrounding whitespace
	// Fields are the head's field lines in order, Host included, values
	// without surrounding whitespace, as net/http keeps them.
	Fields []Field
	// Peer is the client's TCP address, unmapped and without a zone; the
	// zero Addr if the connection is not TCP.
	Peer netip.Addr
	// TLS is the connection's TLS; nil on a connection without it.
	TLS *TLS
	// Front is what a PROXY protocol header said of the connection; nil
	// on a connection without one.
	Front *Front
	// Now is the wall clock when the head was taken up.
	Now time.Time
	// Client writes to the client while the answer is made, for an answer
	// too long to return at once (a forward). Nil: none.
	Client ClientWriter
	// BodyLen is the body's declared length: 0 for none, -1 for chunked;
	// Body reads it (nil for none).
	BodyLen int64
	Body    RequestBody
}

// Field is one field line of a Head.
type Field struct {
	Name, Value []byte
}

// ClientWriter is the client's connection while an answer is made.
type ClientWriter interface {
	Write(b []byte) (int, error)
	// Forwarding says the answer takes time: write bounds and the idle
	// timeout after it run from when it is written.
	Forwarding()
	// CloseAfter closes the connection once the answer is written.
	CloseAfter()
	// Left reports whether the client has closed or reset its side of
	// the connection, without blocking.
	Left() bool
}

// RequestBody is an offered request's body, read as net/http's server
// reads it: with its Close, its trailer once read, and Reuse, which says
// what the server would do with the connection once a response is
// written (keep it; announce Connection: close).
type RequestBody interface {
	Read(p []byte) (int, error)
	Close() error
	Trailer() http.Header
	Reuse() (keep, announce bool)
}
