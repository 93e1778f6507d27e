// Command fixed429 is the fastest a Go net/http server can refuse a
// request: it answers every request with the same 429 response edge sends
// for a blocked request (the same fields and body, fixed in advance), and
// decides nothing. bench/proxy.sh runs it on the proxy's core with
// GOMAXPROCS=1; edge's blocking path is measured against it. With -cert
// and -key it serves TLS 1.3 (X25519), HTTP/2 by ALPN as Go's server does:
// bench/h2.sh's floor of a Go HTTP/2 server refusing.
//
//	fixed429 -listen 127.0.0.1:28087
//	fixed429 -listen 127.0.0.1:28189 -cert bench.pem -key bench.key
package main

import (
	"crypto/tls"
	"flag"
	"log"
	"net/http"
	"time"
)

func main() {
	listen := flag.String("listen", "127.0.0.1:28087", "`address` to serve")
	cert := flag.String("cert", "", "PEM certificate `file`: serve TLS (and HTTP/2) with it")
	key := flag.String("key", "", "PEM private key `file` of -cert")
	flag.Parse()
	// The fields of edge's refusal under bench/edge/block.yaml, with fixed
	// values. Value slices are shared between responses: net/http only
	// reads them.
	fixed := map[string][]string{
		"Cache-Control":          {"no-store"},
		"Content-Type":           {"text/plain; charset=utf-8"},
		"Ratelimit":              {`"per-ip";r=0;t=1`},
		"Ratelimit-Policy":       {`"per-ip";q=10;w=10`},
		"Retry-After":            {"1"},
		"X-Content-Type-Options": {"nosniff"},
		"X-Ratelimit-Limit":      {"10"},
		"X-Ratelimit-Remaining":  {"0"},
		"X-Ratelimit-Reset":      {"1"},
	}
	body := []byte("rate limited: retry in 1s\n")
	h := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		hdr := w.Header()
		for k, v := range fixed {
			hdr[k] = v
		}
		w.WriteHeader(http.StatusTooManyRequests)
		if r.Method != http.MethodHead {
			_, _ = w.Write(body)
		}
	})
	srv := &http.Server{Addr: *listen, Handler: h, ReadHeaderTimeout: 10 * time.Second, IdleTimeout: 120 * time.Second}
	if *cert != "" {
		srv.TLSConfig = &tls.Config{MinVersion: tls.VersionTLS13, CurvePreferences: []tls.CurveID{tls.X25519}}
		log.Fatal(srv.ListenAndServeTLS(*cert, *key))
	}
	log.Fatal(srv.ListenAndServe())
}
