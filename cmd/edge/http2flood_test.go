package main

import (
	"bufio"
	"bytes"
	"crypto/tls"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"runtime"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/edgerate/edge/internal/wait"
	"golang.org/x/net/http2"
	"golang.org/x/net/http2/hpack"
)

// h2Raw is a client connection that writes HTTP/2 frames as a test says,
// with x/net/http2's Framer, well-formed or not, and reads what the server
// sends in a goroutine of its own, so that the server's writes never wait
// on it.
type h2Raw struct {
	c    net.Conn
	w    *bufio.Writer
	fr   *http2.Framer
	hbuf bytes.Buffer
	enc  *hpack.Encoder

	done    chan struct{} // the server's side ended: EOF, a reset, or an error
	goAway  atomic.Int64  // the code of the server's GOAWAY, +1; 0 for none
	frames  atomic.Int64  // frames read
	pong    atomic.Bool   // the server answered the PING "alive"
	readErr error         // why reading ended, once done is closed
}

// dialH2 opens an HTTP/2 connection to addr: over TLS with ALPN h2 when
// conf is not nil, else in the clear with prior knowledge; it sends the
// preface and its SETTINGS. The connection is bounded by a deadline, and
// closed at the test's end.
func dialH2(t *testing.T, addr string, conf *tls.Config) *h2Raw {
	t.Helper()
	var c net.Conn
	var err error
	if conf != nil {
		conf = conf.Clone()
		conf.NextProtos = []string{"h2"}
		c, err = tls.Dial("tcp", addr, conf)
	} else {
		c, err = net.Dial("tcp", addr)
	}
	must(t, err)
	c.SetDeadline(time.Now().Add(30 * time.Second))
	h := &h2Raw{c: c, w: bufio.NewWriterSize(c, 64<<10), done: make(chan struct{})}
	h.fr = http2.NewFramer(h.w, c)
	h.fr.AllowIllegalWrites = true
	h.enc = hpack.NewEncoder(&h.hbuf)
	io.WriteString(h.w, http2.ClientPreface)
	must(t, h.fr.WriteSettings())
	must(t, h.w.Flush())
	go func() {
		defer close(h.done)
		for {
			f, err := h.fr.ReadFrame()
			if err != nil {
				h.readErr = err
				return
			}
			h.frames.Add(1)
			switch f := f.(type) {
			case *http2.GoAwayFrame:
				h.goAway.Store(int64(f.ErrCode) + 1)
			case *http2.PingFrame:
				if f.IsAck() && f.Data == [8]byte{'a', 'l', 'i', 'v', 'e'} {
					h.pong.Store(true)
				}
			}
		}
	}()
	t.Cleanup(func() {
		c.Close()
		<-h.done
	})
	return h
}

// block is the HPACK block of a GET of path on host, with extra fields.
func (h *h2Raw) block(host, path string, extra ...hpack.HeaderField) []byte {
	h.hbuf.Reset()
	for _, f := range append([]hpack.HeaderField{{Name: ":method", Value: "GET"}, {Name: ":scheme", Value: "http"},
		{Name: ":authority", Value: host}, {Name: ":path", Value: path}}, extra...) {
		h.enc.WriteField(f)
	}
	return bytes.Clone(h.hbuf.Bytes())
}

// flood calls frame n times, flushing every 64 calls, and returns how many
// it made before a write failed (the server closed the connection) or
// the server's side ended.
func (h *h2Raw) flood(n int, frame func(i int) error) int {
	for i := range n {
		if err := frame(i); err != nil {
			return i
		}
		if i%64 == 63 {
			if h.w.Flush() != nil {
				return i
			}
			select {
			case <-h.done:
				return i
			default:
			}
		}
	}
	h.w.Flush()
	return n
}

// ended waits, within the connection's deadline, for the server's side to
// end, and reports whether it did (rather than the deadline pass).
func (h *h2Raw) ended() bool {
	<-h.done
	var ne net.Error
	return !errors.As(h.readErr, &ne) || !ne.Timeout()
}

// floodMetric is edge_http2_floods_total{kind} of e.
func floodMetric(t *testing.T, e *tlsEdge, kind string) int {
	_, body := httpGet(t, "http://"+e.admin+"/metrics")
	return metricSum(body, `edge_http2_floods_total{kind="`+kind+`"`)
}

// metricSum sums the values of the series of body whose lines start with
// prefix.
func metricSum(body, prefix string) int {
	sum := 0
	for _, l := range strings.Split(body, "\n") {
		if strings.HasPrefix(l, prefix) {
			var v float64
			fmt.Sscan(l[strings.LastIndexByte(l, ' ')+1:], &v)
			sum += int(v)
		}
	}
	return sum
}

// heapInUse is the heap in use once the collector has run.
func heapInUse() uint64 {
	runtime.GC()
	runtime.GC()
	var m runtime.MemStats
	runtime.ReadMemStats(&m)
	return m.HeapInuse
}

// TestHTTP2Floods: each flood of frames, written with x/net/http2's Framer
// on loopback and bounded in count and time, ends with the connection
// closed (by edge's GOAWAY, ENHANCE_YOUR_CALM, where one could be sent, or
// Go's server's own), is counted once in edge_http2_floods_total{kind} and
// logged, cuts the flood short (the requests that reached the rules are a
// few of those sent), and leaves a well-behaved client on another
// connection every answer; edge's goroutines and memory return to where
// they were. Go's server alone keeps a connection open through all 20,000
// HEADERS and RST_STREAM pairs.
func TestHTTP2Floods(t *testing.T) {
	var originHits atomic.Int64
	o := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		originHits.Add(1)
		io.WriteString(w, "origin\n")
	}))
	t.Cleanup(o.Close)
	const n = 20000
	pad := hpack.HeaderField{Name: "x-pad", Value: strings.Repeat("a", 1000)}
	tests := []struct {
		name string
		kind string
		tls  bool
		// attack writes the flood on h, and returns how many frames
		// (or pairs) it wrote.
		attack func(h *h2Raw) int
	}{
		{"HEADERS and RST_STREAM", "rapid_reset", false, func(h *h2Raw) int {
			b := h.block("api.example.com", "/a")
			return h.flood(n, func(i int) error {
				id := uint32(2*i + 1)
				if err := h.fr.WriteHeaders(http2.HeadersFrameParam{StreamID: id, BlockFragment: b, EndStream: true, EndHeaders: true}); err != nil {
					return err
				}
				return h.fr.WriteRSTStream(id, http2.ErrCodeCancel)
			})
		}},
		{"HEADERS and RST_STREAM over TLS", "rapid_reset", true, func(h *h2Raw) int {
			b := h.block("api.example.com", "/a")
			return h.flood(n, func(i int) error {
				id := uint32(2*i + 1)
				if err := h.fr.WriteHeaders(http2.HeadersFrameParam{StreamID: id, BlockFragment: b, EndStream: true, EndHeaders: true}); err != nil {
					return err
				}
				return h.fr.WriteRSTStream(id, http2.ErrCodeCancel)
			})
		}},
		{"MadeYouReset: WINDOW_UPDATE of 0 on open streams", "rapid_reset", false, func(h *h2Raw) int {
			b := h.block("api.example.com", "/a")
			return h.flood(n, func(i int) error {
				id := uint32(2*i + 1)
				if err := h.fr.WriteHeaders(http2.HeadersFrameParam{StreamID: id, BlockFragment: b, EndStream: true, EndHeaders: true}); err != nil {
					return err
				}
				return h.fr.WriteWindowUpdate(id, 0) // a stream error: edge resets the stream
			})
		}},
		{"CONTINUATION without end", "continuation", false, func(h *h2Raw) int {
			if err := h.fr.WriteHeaders(http2.HeadersFrameParam{StreamID: 1, BlockFragment: h.block("api.example.com", "/a"), EndStream: true}); err != nil {
				return 0
			}
			return h.flood(n, func(int) error { return h.fr.WriteContinuation(1, false, nil) })
		}},
		{"CONTINUATION over max_header_bytes", "continuation", false, func(h *h2Raw) int {
			if err := h.fr.WriteHeaders(http2.HeadersFrameParam{StreamID: 1, BlockFragment: h.block("api.example.com", "/a"), EndStream: true}); err != nil {
				return 0
			}
			h.hbuf.Reset()
			for range 16 {
				h.enc.WriteField(pad)
			}
			frag := bytes.Clone(h.hbuf.Bytes())
			return h.flood(n, func(int) error { return h.fr.WriteContinuation(1, false, frag) })
		}},
		{"PING", "control", false, func(h *h2Raw) int {
			return h.flood(n, func(i int) error { return h.fr.WritePing(false, [8]byte{byte(i)}) })
		}},
		{"SETTINGS", "control", false, func(h *h2Raw) int {
			return h.flood(n, func(int) error { return h.fr.WriteSettings() })
		}},
		{"PRIORITY", "control", false, func(h *h2Raw) int {
			return h.flood(n, func(i int) error {
				return h.fr.WritePriority(uint32(2*i+1), http2.PriorityParam{Weight: 1})
			})
		}},
		{"WINDOW_UPDATE", "control", false, func(h *h2Raw) int {
			return h.flood(n, func(int) error { return h.fr.WriteWindowUpdate(0, 1) })
		}},
		{"empty DATA", "control", false, func(h *h2Raw) int {
			b := h.block("api.example.com", "/a", hpack.HeaderField{Name: "content-type", Value: "text/plain"})
			if err := h.fr.WriteHeaders(http2.HeadersFrameParam{StreamID: 1, BlockFragment: b, EndHeaders: true}); err != nil {
				return 0
			}
			return h.flood(n, func(int) error { return h.fr.WriteData(1, false, nil) })
		}},
	}
	e := startTLSEdge(t, h2Config(o.URL, ""))
	good := e.protoClient("h2")
	defer good.CloseIdleConnections()
	ask := func() error {
		resp, err := good.Get("http://static.example.net/good")
		if err != nil {
			return err
		}
		io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		if resp.StatusCode != 203 {
			return fmt.Errorf("status %d", resp.StatusCode)
		}
		return nil
	}
	// Connections that stay open between requests (the well-behaved
	// client's, edge's to the origin, the admin client's) are closed
	// before goroutines are counted: then no goroutine of a connection of
	// net/http's (client or server, HTTP/1 or 2) is left.
	quiet := func() int {
		good.CloseIdleConnections()
		http.DefaultTransport.(*http.Transport).CloseIdleConnections()
		o.CloseClientConnections()
		wait.For(t, 10*time.Second, "every connection's goroutines to end", func() bool {
			buf := make([]byte, 4<<20)
			return !strings.Contains(string(buf[:runtime.Stack(buf, true)]), "created by net/http.(")
		})
		return runtime.NumGoroutine()
	}
	must(t, ask())
	baseGoroutines := quiet()
	baseHeap := heapInUse()
	began := time.Now()
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			requestsBefore := decided(t, e)
			// A flood of WINDOW_UPDATEs that make edge reset streams is
			// also a flood of control frames: whichever limit the pace of
			// the machine reaches first ends it, and either is right.
			kinds := []string{tt.kind}
			if strings.HasPrefix(tt.name, "MadeYouReset") {
				kinds = append(kinds, "control")
			}
			floods := func() (n int) {
				for _, k := range kinds {
					n += floodMetric(t, e, k)
				}
				return n
			}
			before := floods()
			var conf *tls.Config
			addr := e.public
			if tt.tls {
				conf, addr = &tls.Config{RootCAs: e.ca.Pool, ServerName: "api.example.com"}, e.tls
			}
			h := dialH2(t, addr, conf)

			// The well-behaved client asks throughout the flood.
			stop := make(chan struct{})
			var asked int
			var askErr error
			var wg sync.WaitGroup
			wg.Go(func() {
				for {
					select {
					case <-stop:
						if asked >= 5 {
							return
						}
					default:
					}
					if err := ask(); err != nil && askErr == nil {
						askErr = err
					}
					asked++
				}
			})
			start := time.Now()
			sent := tt.attack(h)
			closed := h.ended()
			took := time.Since(start)
			close(stop)
			wg.Wait()

			if !closed {
				t.Fatalf("after %d frames in %v the connection is open (read: %v)", sent, took, h.readErr)
			}
			wait.For(t, 10*time.Second, "the flood's count", func() bool { return floods() == before+1 })
			if askErr != nil {
				t.Errorf("the well-behaved client, after %d answers: %v", asked, askErr)
			}
			if code := h.goAway.Load() - 1; code >= 0 && code != int64(http2.ErrCodeEnhanceYourCalm) && tt.kind != "continuation" {
				t.Errorf("GOAWAY with %v, want ENHANCE_YOUR_CALM", http2.ErrCode(code))
			}
			if got := decided(t, e) - requestsBefore; got > 500 {
				t.Errorf("%d requests of the flood reached the rules, want a few", got)
			}
			t.Logf("%d sent, closed after %v (GOAWAY %d, %d frames read), %d good requests meanwhile", sent, took, h.goAway.Load()-1, h.frames.Load(), asked)
		})
	}
	// Logged at most once a second: the floods above came faster.
	if lines := strings.Count(e.log.String(), `msg="http2 flood: connection closed"`); lines == 0 || lines > int(time.Since(began)/time.Second)+1 {
		t.Errorf("%d log lines of floods in %v, want 1 a second at most", lines, time.Since(began))
	}
	if n := quiet(); n > baseGoroutines {
		buf := make([]byte, 1<<20)
		t.Errorf("%d goroutines after the floods, %d before:\n%s", n, baseGoroutines, buf[:runtime.Stack(buf, true)])
	}
	if heap := heapInUse(); heap > baseHeap+8<<20 {
		t.Errorf("heap in use %d MiB after the floods, %d MiB before", heap>>20, baseHeap>>20)
	}
	if err := ask(); err != nil {
		t.Errorf("after the floods the well-behaved client: %v", err)
	}
	if hits := originHits.Load(); hits > 1000 {
		t.Errorf("the origin got %d requests", hits)
	}
}

// decided is how many requests of domain api reached its rules or its
// origin: every outcome of edge_requests_total, summed.
func decided(t *testing.T, e *tlsEdge) int {
	_, body := httpGet(t, "http://"+e.admin+"/metrics")
	return metricSum(body, `edge_requests_total{domain="api"`)
}

// TestGoHTTP2KeepsRapidReset: Go's HTTP/2 server alone, configured as
// edge's but without the watch of its frames, keeps a connection open
// through 20,000 HEADERS and RST_STREAM pairs sent at the pace it serves
// them (a PING's answer after each 50): the flood TestHTTP2Floods sees
// ended is the watch's doing. (A burst faster than its handlers start
// fills its queue of streams, and it ends the connection itself.)
func TestGoHTTP2KeepsRapidReset(t *testing.T) {
	var protos http.Protocols
	protos.SetUnencryptedHTTP2(true)
	srv := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { io.WriteString(w, "ok\n") }))
	srv.Config.Protocols = &protos
	srv.Config.HTTP2 = &http.HTTP2Config{MaxConcurrentStreams: 100}
	srv.Start()
	defer srv.Close()
	h := dialH2(t, srv.Listener.Addr().String(), nil)
	b := h.block("a.example", "/")
	const n, batch = 20000, 50
	for i := range n {
		id := uint32(2*i + 1)
		must(t, h.fr.WriteHeaders(http2.HeadersFrameParam{StreamID: id, BlockFragment: b, EndStream: true, EndHeaders: true}))
		must(t, h.fr.WriteRSTStream(id, http2.ErrCodeCancel))
		if i%batch == batch-1 {
			h.pong.Store(false)
			must(t, h.fr.WritePing(false, [8]byte{'a', 'l', 'i', 'v', 'e'}))
			must(t, h.w.Flush())
			wait.For(t, 20*time.Second, "the server's answer to a PING", func() bool {
				select {
				case <-h.done:
					t.Fatalf("Go's server closed the connection after %d pairs: %v (GOAWAY %d)", i+1, h.readErr, h.goAway.Load()-1)
				default:
				}
				return h.pong.Load()
			})
		}
	}
	if code := h.goAway.Load() - 1; code >= 0 {
		t.Errorf("Go's server sent GOAWAY %v", http2.ErrCode(code))
	}
}

// TestHTTP2ResetStreamsCounted: a stream reset as soon as it is opened
// has been counted by the rules it reached, so that a client's rate limit
// catches a reset flood below http2.max_resets too; the streams the rule
// refuses cost no origin round trip. http2.max_resets is read when a
// connection starts: a reload changes it for the connections after it.
func TestHTTP2ResetStreamsCounted(t *testing.T) {
	var originHits atomic.Int64
	o := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		originHits.Add(1)
		io.WriteString(w, "origin\n")
	}))
	t.Cleanup(o.Close)
	cfg := func(maxResets int) string {
		return strings.Replace(h2Config(o.URL, fmt.Sprintf("http2: {max_resets: %d}", maxResets)),
			"{name: limited, match: {path_prefix: /limited}, limit: 2, period: 1h}", "{name: per-ip, limit: 10, period: 1h}", 1)
	}
	e := startTLSEdge(t, cfg(100))
	h := dialH2(t, e.public, nil)
	b := h.block("api.example.com", "/a")
	const pairs = 40 // under max_resets: no flood
	sent := h.flood(pairs, func(i int) error {
		id := uint32(2*i + 1)
		if err := h.fr.WriteHeaders(http2.HeadersFrameParam{StreamID: id, BlockFragment: b, EndStream: true, EndHeaders: true}); err != nil {
			return err
		}
		return h.fr.WriteRSTStream(id, http2.ErrCodeCancel)
	})
	if sent != pairs {
		t.Fatalf("sent %d pairs of %d", sent, pairs)
	}
	wait.For(t, 10*time.Second, "the rule's decisions", func() bool {
		_, body := httpGet(t, "http://"+e.admin+"/metrics")
		return metricSum(body, `edge_rule_decisions_total{action="block",domain="api"`) == pairs
	})
	_, body := httpGet(t, "http://"+e.admin+"/metrics")
	if got := metricSum(body, `edge_rule_decisions_total{action="block",domain="api",outcome="limited"`); got != pairs-10 {
		t.Errorf("%d of the %d reset streams limited, want %d:\n%s", got, pairs, pairs-10, grepLines(body, "edge_rule_decisions_total"))
	}
	if hits := originHits.Load(); hits > 10 {
		t.Errorf("the origin got %d requests, want at most the 10 the rule allowed", hits)
	}
	if got := floodMetric(t, e, "rapid_reset"); got != 0 {
		t.Errorf("%d floods, want none under max_resets", got)
	}
	resp, err := e.protoClient("h2").Get("http://api.example.com/a")
	must(t, err)
	resp.Body.Close()
	if resp.StatusCode != 429 {
		t.Errorf("the client's next request: %d, want 429: the reset streams spent its limit", resp.StatusCode)
	}

	// A reload to max_resets 5: the open connection keeps 100, a new one
	// has 5.
	before := loadedConfigHash(t, e)
	must(t, os.WriteFile(e.cfg, []byte(cfg(5)), 0o600))
	wait.For(t, 10*time.Second, "the reload", func() bool { return loadedConfigHash(t, e) != before })
	resets := func(h *h2Raw, from, n int) {
		h.flood(n, func(i int) error {
			id := uint32(2*(from+i) + 1)
			if err := h.fr.WriteHeaders(http2.HeadersFrameParam{StreamID: id, BlockFragment: b, EndStream: true, EndHeaders: true}); err != nil {
				return err
			}
			return h.fr.WriteRSTStream(id, http2.ErrCodeCancel)
		})
	}
	resets(h, pairs, 20)
	// The old connection read them all: it answers a PING after them.
	must(t, h.fr.WritePing(false, [8]byte{'a', 'l', 'i', 'v', 'e'}))
	must(t, h.w.Flush())
	wait.For(t, 10*time.Second, "the old connection's answer to a PING", func() bool {
		select {
		case <-h.done:
			t.Fatalf("the connection opened before the reload ended (%v)", h.readErr)
		default:
		}
		return h.pong.Load()
	})
	fresh := dialH2(t, e.public, nil)
	resets(fresh, 0, 20)
	if !fresh.ended() {
		t.Fatalf("the new connection is open after 20 resets (%v)", fresh.readErr)
	}
	wait.For(t, 10*time.Second, "the flood's count", func() bool { return floodMetric(t, e, "rapid_reset") == 1 })
}
