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
