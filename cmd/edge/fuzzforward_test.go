package main

import (
	"bufio"
	"io"
	"net"
	"net/http"
	"slices"
	"strings"
	"sync"
	"testing"

	"github.com/edgerate/edge/internal/hostile"
)

// FuzzForwardDifferential sends the same requests through an edge with
// fastpath true and one with fastpath false, each in front of a raw origin
// that answers them with the fuzzer's bytes, and asserts that the two
// clients heard the same (meaning_test.go: status, fields, body, trailers,
// responses in order, where the connection closed) and that the origins
// received the same requests; over plain HTTP and, through two more edges
// at the same time, over TLS (difftls_test.go: the origin is told the
// scheme and the client's JA4). The input is the origin's raw answer (any
// 1xx, fields, a body by Content-Length, chunked or up to the close,
// trailers, or something that is none of these), whether the origin
// closes its connection after it, and the client's requests, one a byte:
// the method (GET, HEAD, POST with a body, GET asking for trailers),
// whether it gets the fuzzer's answer or a plain one, and whether it
// carries a Via field of another node's or of the edges' own (a loop,
// answered 508 by both); the top bit of the
// first byte sends them all at once (pipelined); a POST after an answer
// that ended its origin connection goes as a GET (see below). An answer that is not
// one complete response to the request's method is followed by the
// origin's close, so that no input waits for an edge's timeout.
func FuzzForwardDifferential(f *testing.F) {
	names := make([]string, 0, len(rawResponses))
	for name := range rawResponses {
		names = append(names, name)
	}
	slices.Sort(names)
	for i, name := range names {
		f.Add(rawResponses[name], false, []byte{0, 1, 2, 3})
		f.Add(rawResponses[name], i%2 == 0, []byte{0x80, 1, 4, 0})
	}
	f.Add(rawResponses["cl"], false, []byte{8, 17, 2, 18, 11})
	f.Add("HTTP/1.1 200 OK\r\nTrailer: X-B, X-A\r\nTransfer-Encoding: chunked\r\n\r\n1\r\nx\r\n0\r\nX-A: 1\r\nX-B: 2\r\n\r\n", false, []byte{3, 3})
	f.Add("HTTP/1.1 100 Continue\r\n\r\nHTTP/1.1 103 Early Hints\r\nLink: </a>\r\n\r\nHTTP/1.1 200 OK\r\nContent-Length: 1\r\n\r\nx", false, []byte{2, 1, 0})
	f.Add("HTTP/1.1 200 OK\r\nContent-Length: 3000\r\n\r\n"+strings.Repeat("<p>", 500), true, []byte{0, 0})

	var mu sync.Mutex // the current input's answer
	var answer string
	var end bool
	script := func(name, method string) (string, bool, bool) {
		if name != "fuzzed" {
			return "", false, false
		}
		mu.Lock()
		defer mu.Unlock()
		return answer, end || !oneResponse(answer, method), true
	}
	// Four edges, each with a raw origin of its own, so that an input
	// goes through all four at once.
	fix := newDiffTLS(f)
	type side struct {
		ds     *diffServer
		origin *rawOrigin
	}
	start := func(cfg string, fast bool, fix *diffTLS) side {
		o := newRawOrigin(f, nil, nil, script)
		cfg = o.config(f, cfg, "") // three servers
		return side{startConfigOver(f, cfg, fast, fix), o}
	}
	pairs := [][2]side{ // fastpath true and false
		{start(fwdConfig, true, nil), start(fwdConfig, false, nil)},
		{start(fix.fwdConfig(f), true, fix), start(fix.fwdConfig(f), false, fix)},
	}
	via := pairs[0][0].ds.via
	for _, p := range pairs {
		for _, s := range p {
			if s.ds.via != via {
				f.Fatalf("Via pseudonyms %q and %q, want one", via, s.ds.via)
			}
		}
	}
	f.Fuzz(func(t *testing.T, raw string, closeAfter bool, reqs []byte) {
		if len(raw) > 64<<10 || len(reqs) > 6 {
			t.Skip("larger than it needs to be")
		}
		mu.Lock()
		answer, end = raw, closeAfter
		mu.Unlock()
		// The first request is net/http's on both paths (a new
		// connection's); the fast path may take those after it.
		steps := []string{get("plain.example.com", "/r/cl")}
		ended := false // an answer so far ended its origin connection
		for _, b := range reqs {
			path := "/r/fuzzed"
			if b&4 != 0 {
				path = "/r/cl"
			}
			method := [4]string{http.MethodGet, http.MethodHead, http.MethodPost, http.MethodGet}[b%4]
			var fields []string
			switch b >> 3 & 3 {
			case 1:
				fields = []string{"Via: 1.0 fred, 1.1 p.example.net (x, y)"}
			case 2:
				fields = []string{"Via: 1.0 fred", "Via: 1.1 " + via} // the edges' own
			}
			if method == http.MethodPost && ended {
				// The transport's reader races the origin's close: the
				// slow path may send a POST on the connection closing
				// and, unable to send it again, answer 502. Timing, not
				// meaning.
				method = http.MethodGet
			}
			switch {
			case method == http.MethodPost:
				steps = append(steps, hostile.Req(append([]string{"POST " + path + " HTTP/1.1", "Host: plain.example.com", "Content-Length: 3"}, fields...)...)+"abc")
			case b%4 == 3:
				steps = append(steps, get("plain.example.com", path, append(fields, "Te: trailers")...))
			default:
				steps = append(steps, hostile.Req(append([]string{method + " " + path + " HTTP/1.1", "Host: plain.example.com"}, fields...)...))
			}
			if b>>3&3 == 2 {
				continue // answered 508: the origin never sees it
			}
			if path == "/r/fuzzed" && (closeAfter || !oneResponse(raw, method)) {
				ended = true
			}
		}
		wait := len(reqs) == 0 || reqs[0]&0x80 == 0
		if !wait {
			steps = []string{strings.Join(steps, "")}
		}
		// Connections dialled here, exchanges made at once, records
		// read here: only this goroutine may end the test.
		var conns [2][2]net.Conn
		var raws [2][2]string
		for i, p := range pairs {
			for j, s := range p {
				conns[i][j] = s.ds.dial(t)
			}
		}
		var wg sync.WaitGroup
		for i, p := range pairs {
			for j, s := range p {
				wg.Go(func() { raws[i][j] = exchangeOn(t, s.ds, conns[i][j], steps, wait, false) })
			}
		}
		wg.Wait()
		for i, p := range pairs {
			var heards [2][]heard
			var origins [2]string
			for j, s := range p {
				heards[j] = []heard{hear(steps, raws[i][j])}
				origins[j] = s.origin.take(t)
			}
			sidesAgree(t, heards, origins, [2]string{})
		}
	})
}

// oneResponse reports whether raw is exactly one complete response to a
// request with method, after any 1xx, on a connection that may stay open.
func oneResponse(raw, method string) bool {
	r := strings.NewReader(raw)
	br := bufio.NewReader(r)
	for {
		resp, err := http.ReadResponse(br, &http.Request{Method: method})
		if err != nil {
			return false
		}
		if c := resp.StatusCode; c >= 100 && c < 200 && c != http.StatusSwitchingProtocols {
			continue
		}
		if _, err := io.Copy(io.Discard, resp.Body); err != nil || resp.Close {
			return false
		}
		return br.Buffered() == 0 && r.Len() == 0
	}
}
