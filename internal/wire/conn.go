package wire

// Front is what the load balancer in front of edge said of a connection
// in its PROXY protocol header, besides the client's address, which
// becomes the connection's RemoteAddr: set once, before the connection's
// first request, read by every request on it, never changed.
type Front struct {
	// TLS: the balancer terminated TLS from the client (a v2 SSL TLV with
	// its client bit set), so the client's requests are https although
	// edge's own connection is plain.
	TLS bool
}

// Fronted is implemented by a connection whose setup read a PROXY
// protocol header: Front returns what it said, the same value for the
// connection's life.
type Fronted interface {
	Front() *Front
}

// Admission is a decision on a new connection, made before anything is
// read from it (the connection limits of edge's public listener). The
// zero value admits it, with nothing to release.
type Admission struct {
	// Refused: the connection is closed unread.
	Refused bool
	// Release, if not nil, is called once when the admitted connection
	// closes, to end what the decision counted (its client's open
	// connections).
	Release func()
}
