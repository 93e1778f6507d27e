package main

import (
	"fmt"
	"strings"
	"testing"

	"github.com/edgerate/edge/internal/hostile"
)

// The differential test of request bodies on the fast forward: every kind
// of body (Content-Length, chunked, trailers, empty, over
// max_request_body, buffered and not, short and broken), Expect, every
// method the fast path forwards and pipelined requests after a body go
// through an edge with fastpath true and one with false; what the origins
// and the clients receive must mean the same (meaning_test.go; the chunk
// sizes of a chunked body follow the client's reads on both paths).

// bodyConfig: domains with every body policy, and one whose rule refuses
// all but the first request.
const bodyConfig = `
origin: ORIGIN
max_keys: 1000
domains:
  - name: plain
    hosts: [plain.example.com]
  - name: limited
    hosts: [limited.example.com]
    rules:
      - {name: per-ip, limit: 1000000, period: 1m, key: [ip]}
  - name: small
    hosts: [small.example.com]
    request_buffer: 1KiB
    max_request_body: 2KiB
  - name: stream
    hosts: [stream.example.com]
    request_buffering: false
  - name: once
    hosts: [once.example.com]
    rules:
      - {name: once, limit: 2, period: 1h, key: [ip]}
`

// withBody is a request with a Content-Length body.
func withBody(method, host, target, body string, fields ...string) string {
	return hostile.Req(append([]string{method + " " + target + " HTTP/1.1", "Host: " + host,
		fmt.Sprintf("Content-Length: %d", len(body))}, fields...)...) + body
}

// withChunks is a request with a chunked body of chunks, and trailer
// lines after it.
func withChunks(method, host, target string, chunks []string, trailer string, fields ...string) string {
	var b strings.Builder
	b.WriteString(hostile.Req(append([]string{method + " " + target + " HTTP/1.1", "Host: " + host,
		"Transfer-Encoding: chunked"}, fields...)...))
	for _, c := range chunks {
		fmt.Fprintf(&b, "%x\r\n%s\r\n", len(c), c)
	}
	b.WriteString("0\r\n" + trailer + "\r\n")
	return b.String()
}

// cutEnd is s without its last n bytes.
func cutEnd(s string, n int) string { return s[:len(s)-n] }

func TestFastForwardBodies(t *testing.T) {
	runBodySeqs(t, bodyConfig, bodySeqs())
}

// bodySeqs are the sequences of the request bodies' differential tests,
// over plain HTTP and over TLS.
func bodySeqs() []bodySeq {
	big := strings.Repeat("b", 100000)
	type seq = bodySeq
	var seqs []seq
	for _, host := range []string{"plain.example.com", "limited.example.com"} {
		var methods []string
		for _, m := range []string{"POST", "PUT", "PATCH", "DELETE", "OPTIONS", "GET", "HEAD"} {
			methods = append(methods,
				withBody(m, host, "/r/cl", "hello"),
				hostile.Req(m+" /r/cl HTTP/1.1", "Host: "+host),
				hostile.Req(m+" /r/cl HTTP/1.1", "Host: "+host, "Content-Length: 0"),
				hostile.Req(m+" /r/cl HTTP/1.1", "Host: "+host, "Idempotency-Key: 1"),
			)
		}
		seqs = append(seqs,
			seq{"methods " + host, methods, true, false, 0},
			seq{"chunked " + host, []string{
				withChunks("POST", host, "/r/cl", []string{"hello", " world"}, ""),
				withChunks("POST", host, "/r/chunked", nil, ""),
				withChunks("PUT", host, "/r/cl", []string{"a"}, "X-Sum: 1\r\n", "Trailer: X-Sum"),
				withChunks("POST", host, "/r/cl", []string{"a"}, "X-Late: 1\r\n"),
				withChunks("POST", host, "/r/cl", []string{"ab"}, "x-b: 2\r\nX-A: 1\r\nX-C: 3\r\n", "trailer: x-a, X-B"),
				withChunks("POST", host, "/r/cl", nil, "X-Sum: 1\r\n", "Trailer: X-Sum"),
				withChunks("POST", host, "/r/cl", []string{"a"}, "", "Trailer: Content-Length"),
			}, true, false, 0},
			seq{"big " + host, []string{
				withBody("POST", host, "/r/cl", big),
				withChunks("POST", host, "/r/big", []string{big[:40000], big[:40000], big[:20000]}, ""),
				withBody("POST", host, "/r/big", big, "Expect: 100-continue"),
			}, true, false, 0},
			seq{"expect " + host, []string{
				withBody("POST", host, "/r/cl", "hello", "Expect: 100-continue"),
				withChunks("POST", host, "/r/cl", []string{"hello"}, "", "Expect: 100-continue"),
				withBody("POST", host, "/r/cl", "hello", "Expect: 100-continue, foo"),
			}, true, false, 0},
			seq{"pipelined " + host, []string{withBody("POST", host, "/r/cl", "hello") + get(host, "/r/cl") +
				withChunks("PUT", host, "/r/chunked", []string{"x"}, "") + withBody("DELETE", host, "/r/trailer", "y")}, true, false, 0},
			seq{"short " + host, []string{cutEnd(withBody("POST", host, "/r/cl", "hello"), 3)}, true, true, 0},
			seq{"short chunked " + host, []string{cutEnd(withChunks("POST", host, "/r/cl", []string{"hello"}, ""), 8)}, true, true, 0},
			seq{"broken chunked " + host, []string{
				strings.Replace(withChunks("POST", host, "/r/cl", []string{"hello"}, ""), "5\r\n", "zz\r\n", 1)}, true, false, 0},
			// A GET after each closed connection: whether net/http's
			// transport has seen the close yet is a race, which it wins
			// for a GET by sending it again (TestFastForwardChecksPooled
			// covers a request it would not send again).
			seq{"origin closes idle " + host, []string{
				withBody("POST", host, "/r/idleclose", "hello"), get(host, "/r/cl"), withBody("POST", host, "/r/cl", "hello"),
				withBody("PUT", host, "/r/idleclose", "hello"), get(host, "/r/cl"), hostile.Req("DELETE /r/cl HTTP/1.1", "Host: "+host),
				get(host, "/r/idleclose"), get(host, "/r/cl")}, true, false, 0},
			seq{"origin fails " + host, []string{
				withBody("POST", host, "/r/cl", "hello"), withBody("POST", host, "/r/hang", "hello"),
				withBody("POST", host, "/r/malformed", "hello")}, true, false, 0},
		)
	}
	seqs = append(seqs,
		seq{"small", []string{
			withBody("POST", "small.example.com", "/r/cl", strings.Repeat("s", 1500)),
			withChunks("POST", "small.example.com", "/r/cl", []string{strings.Repeat("s", 1500)}, ""),
			withBody("POST", "small.example.com", "/r/cl", strings.Repeat("s", 2048)),
			withBody("POST", "small.example.com", "/r/cl", strings.Repeat("s", 3000)), // 413 from net/http
		}, true, false, 0},
		seq{"small chunked over max", []string{
			withChunks("POST", "small.example.com", "/r/cl", []string{strings.Repeat("s", 1500), strings.Repeat("s", 1500)}, "")}, true, false, 0},
		seq{"small chunked over max later", []string{
			withChunks("POST", "small.example.com", "/r/cl", []string{strings.Repeat("s", 500), strings.Repeat("s", 1000), strings.Repeat("s", 1000)}, "")}, true, false, 0},
		seq{"stream", []string{
			withBody("POST", "stream.example.com", "/r/cl", big),
			withChunks("POST", "stream.example.com", "/r/cl", []string{big[:50000], big[:50000]}, "X-Sum: 1\r\n", "Trailer: X-Sum"),
			withChunks("POST", "stream.example.com", "/r/cl", []string{"small"}, "X-Sum: 1\r\n", "Trailer: X-Sum"),
			withBody("POST", "stream.example.com", "/r/cl", "hello", "Expect: 100-continue"),
		}, true, false, 0},
		seq{"stream broken late", []string{strings.Replace(
			withChunks("POST", "stream.example.com", "/r/cl", []string{big[:50000], big[:50000], "x"}, ""), "1\r\nx", "zz\r\nx", 1)}, true, false, 0},
		seq{"refused with a body", []string{
			withBody("POST", "once.example.com", "/r/cl", "hello"),
			withBody("POST", "once.example.com", "/r/cl", "hello"),
			withBody("POST", "once.example.com", "/r/cl", "hello", "Expect: 100-continue"),
		}, true, false, 3},
		seq{"refused with a big body", []string{
			withBody("POST", "once.example.com", "/r/cl", "hello"),
			withBody("POST", "once.example.com", "/r/cl", big+big+big),
			withChunks("POST", "once.example.com", "/r/cl", []string{big}, ""),
		}, true, false, 2},
		seq{"refused with a body, kept", []string{
			withBody("POST", "once.example.com", "/r/cl", "hello"),
			withBody("POST", "once.example.com", "/r/cl", strings.Repeat("k", 200000)),
			withChunks("POST", "once.example.com", "/r/cl", []string{"hello"}, "X-T: 1\r\n"),
			get("once.example.com", "/r/cl"),
		}, true, false, 4},
	)

	// The hostile corpus, each after a request the fast path can take,
	// half-closed after it (some get no answer until then).
	for _, hc := range hostile.Corpus() {
		seqs = append(seqs, seq{"hostile " + hc.Class + "/" + hc.Name,
			[]string{strings.ReplaceAll(hc.Raw, hostile.HostAPI, "Host: plain.example.com")}, true, true, 0})
	}
	return seqs
}

// bodySeq is one request sequence of TestFastForwardBodies.
type bodySeq struct {
	name      string
	steps     []string
	wait      bool
	halfClose bool
	answered  int64 // at least this many answered by the fast path
}

// runBodySeqs sends each sequence through an edge with configuration cfg
// and fastpath true, and one with false, and compares what their origins
// and clients received.
func runBodySeqs(t *testing.T, cfg string, seqs []bodySeq) {
	runBodySeqsOver(t, cfg, seqs, nil)
}

// runBodySeqsOver is runBodySeqs over TLS when fix is not nil, cfg
// serving its certificate.
func runBodySeqsOver(t *testing.T, cfg string, seqs []bodySeq, fix *diffTLS) {
	runBodySeqsTo(t, cfg, seqs, fix, nil)
}

// runBodySeqsTo is runBodySeqsOver to https origins with of's
// certificate, trusted by of's origin_tls, for an of not nil.
func runBodySeqsTo(t *testing.T, cfg string, seqs []bodySeq, fix *diffTLS, of *originTLSFix) {
	for _, sq := range seqs {
		// Each sequence follows a plain request on its connection, as a
		// client's later requests do.
		host := "plain.example.com"
		if f := strings.Fields(sq.steps[0]); len(f) > 4 && strings.HasSuffix(f[4], ".example.com") {
			host = f[4]
		}
		sq.steps = append([]string{get(host, "/r/cl")}, sq.steps...)
		t.Run(sq.name, func(t *testing.T) {
			t.Parallel()
			var got [2][]heard
			var want, metrics [2]string
			var answered int64
			for i, fast := range []bool{true, false} {
				origin, url, cfg := (*rawOrigin)(nil), "http://", cfg
				if of != nil {
					origin, url, cfg = startRawOriginOf(t, &rawOrigin{tls: of.server}), "https://", of.section+cfg
				} else {
					origin = startRawOrigin(t)
				}
				cfg = strings.NewReplacer("ORIGIN", url+origin.ln.Addr().String()).Replace(cfg)
				ds := startConfigOver(t, cfg, fast, fix)
				got[i] = []heard{hear(sq.steps, exchange(t, ds, sq.steps, sq.wait, sq.halfClose))}
				want[i] = origin.received(t)
				if fast {
					answered = ds.answered.Load()
				}
				metrics[i] = metricsText(t, ds.reg)
			}
			sidesAgree(t, got, want, metrics)
			if answered == 0 && !strings.HasPrefix(sq.name, "hostile") || answered < sq.answered {
				t.Errorf("the fast path answered %d requests, want at least %d", answered, max(sq.answered, 1))
			}
		})
	}
}

// TestFastForwardSlowBody: a body that stops coming gets 408 once
// timeouts.read has passed since its head began, buffered (before the
// origin is contacted) or streamed (the origin's request cut off), on
// both paths alike.
func TestFastForwardSlowBody(t *testing.T) {
	cfg := bodyConfig + "timeouts: {read: 300ms}\n"
	runBodySeqs(t, cfg, []bodySeq{
		{"buffered", []string{cutEnd(withBody("POST", "plain.example.com", "/r/cl", "hello"), 2)}, true, false, 0},
		{"buffered chunked", []string{cutEnd(withChunks("POST", "plain.example.com", "/r/cl", []string{"hello"}, ""), 5)}, true, false, 0},
		{"streamed", []string{cutEnd(withBody("POST", "stream.example.com", "/r/cl", "hello"), 2)}, true, false, 0},
		{"expect", []string{cutEnd(withBody("POST", "plain.example.com", "/r/cl", "hello", "Expect: 100-continue"), 5)}, true, false, 0},
	})
}

// TestFastForwardBodiesOriginTLS is TestFastForwardBodies to https
// origins: bodies written under TLS, with its bounded writes, and an
// origin that answers before a body's end found under TLS too.
func TestFastForwardBodiesOriginTLS(t *testing.T) {
	runBodySeqsTo(t, bodyConfig, bodySeqs(), nil, newOriginTLSFix(t))
}
