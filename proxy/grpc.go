package proxy

import (
	"net/http"
	"net/url"
	"strings"
	"time"
)

// gRPC through edge: a gRPC request is a request like any other (the same
// rules, metrics and logs), but what it is answered with and how its body
// travels follow gRPC over HTTP/2
// (https://github.com/grpc/grpc/blob/master/doc/PROTOCOL-HTTP2.md): a
// refusal is a trailers-only response (answer.go, grpcAnswer), and its
// streams in both directions go to the origin as they come (forward.go).

// grpcRequest reports whether a request's fields make it a gRPC request:
// its Content-Type is application/grpc, alone or with a "+" subtype or
// parameters, as grpc-go's server reads it. gRPC-Web (application/grpc-web)
// is not: its status travels in the body.
func grpcRequest(h http.Header) bool {
	ct := h["Content-Type"]
	return len(ct) > 0 && grpcContentType(ct[0])
}

// grpcContentType reports whether a Content-Type value is gRPC's.
func grpcContentType(v string) bool {
	const prefix = "application/grpc"
	if len(v) < len(prefix) || !strings.EqualFold(v[:len(prefix)], prefix) {
		return false
	}
	rest := v[len(prefix):]
	return rest == "" || rest[0] == '+' || rest[0] == ';'
}

// grpcForward prepares the forward of a gRPC request to d's origin, or
// answers it: an http:// origin, which edge speaks HTTP/1.1 to, cannot
// carry gRPC's trailers, and the request gets UNAVAILABLE
// (grpcOriginAnswer). Otherwise the request's stream is bounded by
// neither timeouts.read nor timeouts.write: a gRPC stream lasts as long
// as its call, which its client's deadline bounds, and the origin's
// timeouts.upstream still bounds the wait for the response's head.
func (p *Proxy) grpcForward(w http.ResponseWriter, d *domain, origin *url.URL) bool {
	if origin.Scheme == "http" {
		var a answer
		a.grpcOriginAnswer()
		d.requests.count(&a)
		a.write(w)
		return false
	}
	rc := http.NewResponseController(w)
	_ = rc.SetReadDeadline(time.Time{}) // both of net/http's servers support them
	_ = rc.SetWriteDeadline(time.Time{})
	return true
}
