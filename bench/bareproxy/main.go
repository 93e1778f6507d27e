// Command bareproxy is the barest Go reverse proxy worth comparing edge
// with: httputil.ReverseProxy with the Rewrite the standard library's own
// documentation shows (SetURL and SetXForwarded), in front of one origin,
// over a transport tuned for one busy origin. It is what edge costs when it
// limits nothing: bench/proxy.sh measures edge against it.
//
//	bareproxy -listen 127.0.0.1:28081 -origin http://127.0.0.1:28080
//
// With -cert and -key it serves TLS 1.3 (X25519), HTTP/2 by ALPN as Go's
// server does: bench/h2.sh's floor of a Go HTTP/2 server forwarding.
//
// Run it with GOMAXPROCS=1 pinned to one core, as the harness does.
package main

import (
	"crypto/tls"
	"flag"
	"log"
	"net"
	"net/http"
	"net/http/httputil"
	"net/url"
	"sync"
	"time"
)

func main() {
	listen := flag.String("listen", "127.0.0.1:28081", "`address` to serve")
	origin := flag.String("origin", "http://127.0.0.1:28080", "origin `URL`")
	cert := flag.String("cert", "", "PEM certificate `file`: serve TLS (and HTTP/2) with it")
	key := flag.String("key", "", "PEM private key `file` of -cert")
	flag.Parse()
	target, err := url.Parse(*origin)
	if err != nil {
		log.Fatalf("bareproxy: -origin: %v", err)
	}
	rp := &httputil.ReverseProxy{
		Rewrite: func(pr *httputil.ProxyRequest) {
			pr.SetURL(target)
			pr.Out.Host = pr.In.Host
			pr.SetXForwarded()
		},
		Transport: &http.Transport{
			// The defaults keep 2 idle connections per host: under 64
			// concurrent clients that means a new origin connection for most
			// requests. Keep as many as there are clients.
			DialContext:         (&net.Dialer{Timeout: 5 * time.Second, KeepAlive: 30 * time.Second}).DialContext,
			MaxIdleConns:        1024,
			MaxIdleConnsPerHost: 1024,
			IdleConnTimeout:     90 * time.Second,
			// No transparent gzip: the proxy passes bodies through as sent.
			DisableCompression: true,
		},
		// Without a pool ReverseProxy allocates a 32 KiB copy buffer for
		// every response.
		BufferPool: bufferPool{},
		ErrorLog:   log.Default(),
	}
	srv := &http.Server{Addr: *listen, Handler: rp, ReadHeaderTimeout: 10 * time.Second, IdleTimeout: 120 * time.Second}
	if *cert != "" {
		srv.TLSConfig = &tls.Config{MinVersion: tls.VersionTLS13, CurvePreferences: []tls.CurveID{tls.X25519}}
		log.Fatal(srv.ListenAndServeTLS(*cert, *key))
	}
	log.Fatal(srv.ListenAndServe())
}

// bufferPool recycles ReverseProxy's copy buffers. It pools array
// pointers, so neither Get nor Put allocates.
type bufferPool struct{}

const bufSize = 32 << 10

var buffers = sync.Pool{New: func() any { return new([bufSize]byte) }}

func (bufferPool) Get() []byte { return buffers.Get().(*[bufSize]byte)[:] }

func (bufferPool) Put(b []byte) {
	if cap(b) >= bufSize {
		buffers.Put((*[bufSize]byte)(b[:bufSize]))
	}
}
