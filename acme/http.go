package acme

import (
	"bytes"
	"context"
	"net/http"
	"net/url"
)

// certmagic answers HTTP-01 through an http.Handler; edge's hook
// (proxy.ACMEChallenge) wants the key authorization alone, on either
// request path, so the request is made up and the answer kept.

// challengeRequest is the validation request of token for host, as a CA
// sends it.
func challengeRequest(ctx context.Context, host, token string) *http.Request {
	path := "/.well-known/acme-challenge/" + token
	r := (&http.Request{Method: http.MethodGet, Host: host, URL: &url.URL{Path: path}, RequestURI: path,
		Header: http.Header{}, Proto: "HTTP/1.1", ProtoMajor: 1, ProtoMinor: 1}).WithContext(ctx)
	return r
}

// keyAuthWriter is the http.ResponseWriter certmagic writes a key
// authorization to.
type keyAuthWriter struct {
	header http.Header
	status int
	body   bytes.Buffer
}

func newKeyAuthWriter() *keyAuthWriter { return &keyAuthWriter{header: http.Header{}} }

func (w *keyAuthWriter) Header() http.Header { return w.header }

func (w *keyAuthWriter) WriteHeader(status int) { w.status = status }

func (w *keyAuthWriter) Write(b []byte) (int, error) { return w.body.Write(b) }
