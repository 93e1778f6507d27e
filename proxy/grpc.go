package proxy

import (
	"net/http"
	"strings"
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
