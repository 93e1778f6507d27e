package proxy

import (
	"bufio"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/edgerate/edge/guard"
	"github.com/edgerate/edge/internal/hostile"
	"github.com/edgerate/edge/rules"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
)

// wsOrigin upgrades to a line-echo protocol.
func wsOrigin(t *testing.T) *httptest.Server {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Header.Get("Upgrade") != "websocket" {
			http.Error(w, "want upgrade", http.StatusBadRequest)
			return
		}
		conn, brw, err := http.NewResponseController(w).Hijack()
		if err != nil {
			return
		}
		defer conn.Close()
		brw.WriteString("HTTP/1.1 101 Switching Protocols\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n\r\n")
		brw.Flush()
		for {
			line, err := brw.ReadString('\n')
			if err != nil {
				return
			}
			brw.WriteString("echo:" + line)
			brw.Flush()
		}
	}))
	t.Cleanup(srv.Close)
	return srv
}

// listenerEnv serves cfg's Proxy through a Listener on a real server.
func listenerEnv(t *testing.T, cfg rules.Config, lo guard.ListenerOptions) (*hostileServer, *clock) {
	t.Helper()
	table, err := rules.Compile(cfg)
	if err != nil {
		t.Fatal(err)
	}
	clk := newClock()
	transport := newTransport(table.Timeouts)
	t.Cleanup(transport.CloseIdleConnections)
	p, err := New(Options{Table: table, Now: clk.Now, Transport: transport})
	if err != nil {
		t.Fatal(err)
	}
	s := startHostileServer(t, p, table, lo)
	t.Cleanup(func() { s.stop(t) })
	return s, clk
}

func TestListenerWebSocket(t *testing.T) {
	origin := wsOrigin(t)
	s, _ := listenerEnv(t, oneDomain(origin.URL), guard.ListenerOptions{})
	conn, err := net.Dial("tcp", s.addr)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	if err := conn.SetDeadline(time.Now().Add(5 * time.Second)); err != nil {
		t.Fatal(err)
	}
	io.WriteString(conn, hostile.Get("/ws", "Upgrade: websocket", "Connection: Upgrade"))
	br := bufio.NewReader(conn)
	resp, err := http.ReadResponse(br, nil)
	if err != nil || resp.StatusCode != 101 {
		t.Fatalf("upgrade: got %v, %v, want 101", resp, err)
	}
	// Once upgraded, bytes that would be refused as HTTP pass untouched.
	for _, line := range []string{"hello\n", "POST / HTTP/1.1\r\nTransfer-Encoding: chunked\r\nContent-Length: 1\r\n\r\n", "\x00\x01\n"} {
		io.WriteString(conn, line)
		want := "echo:" + line[:strings.IndexByte(line, '\n')+1]
		got := make([]byte, len(want))
		if _, err := io.ReadFull(br, got); err != nil || string(got) != want {
			t.Fatalf("echo: got %q, %v, want %q", got, err, want)
		}
		if rest := line[strings.IndexByte(line, '\n')+1:]; rest != "" {
			// The rest of a multi-line write comes back line by line.
			for _, l := range strings.SplitAfter(rest, "\n") {
				if l == "" {
					continue
				}
				got := make([]byte, len("echo:")+len(l))
				if _, err := io.ReadFull(br, got); err != nil || string(got) != "echo:"+l {
					t.Fatalf("echo: got %q, %v, want %q", got, err, "echo:"+l)
				}
			}
		}
	}
}

// TestListenerRefusalsCounted sends over raw TCP, to a server configured
// as cmd/edge configures its public one, what the Listener refuses before
// net/http parses it: the asterisk-form target (net/http's own OPTIONS *
// answer is off) and heads with bare-LF line ends. Each gets 400, is
// counted in edge_framing_refused_total and not in the screen's
// edge_refused_requests_total, and nothing reaches the origin.
func TestListenerRefusalsCounted(t *testing.T) {
	origin := newHostileOrigin(t)
	table, err := rules.Compile(hostileConfig(origin.srv.URL))
	if err != nil {
		t.Fatal(err)
	}
	transport := newTransport(table.Timeouts)
	t.Cleanup(transport.CloseIdleConnections)
	p, err := New(Options{Table: table, Registerer: prometheus.NewRegistry(), Transport: transport})
	if err != nil {
		t.Fatal(err)
	}
	s := startHostileServer(t, p, table, guard.ListenerOptions{OnReject: p.FramingRefused})
	t.Cleanup(func() { s.stop(t) })

	tests := []struct {
		name      string
		raw       string
		want      []int // statuses, in order
		refused   float64
		forwarded int
	}{
		{"OPTIONS *", hostile.Req("OPTIONS * HTTP/1.1", hostile.HostAPI), []int{400}, 1, 0},
		{"OPTIONS * with an invalid Host", hostile.Req("OPTIONS * HTTP/1.1", "Host: a b"), []int{400}, 1, 0},
		{"OPTIONS * without Host", hostile.Req("OPTIONS * HTTP/1.1"), []int{400}, 1, 0},
		{"OPTIONS * in HTTP/1.0", hostile.Req("OPTIONS * HTTP/1.0"), []int{400}, 1, 0},
		{"GET *", hostile.Req("GET * HTTP/1.1", hostile.HostAPI), []int{400}, 1, 0},
		{"bare LF everywhere", "GET / HTTP/1.1\n" + hostile.HostAPI + "\n\n", []int{400}, 1, 0},
		{"bare LF ends the request line", "GET / HTTP/1.1\n" + hostile.HostAPI + "\r\n\r\n", []int{400}, 1, 0},
		{"bare LF ends a field line", "GET / HTTP/1.1\r\n" + hostile.HostAPI + "\nAccept: */*\r\n\r\n", []int{400}, 1, 0},
		{"bare LF ends the head", "GET / HTTP/1.1\r\n" + hostile.HostAPI + "\r\n\n", []int{400}, 1, 0},
		{"bare LF in a pipelined second request", hostile.Get("/") + "GET / HTTP/1.1\n" + hostile.HostAPI + "\n\n", []int{200, 400}, 1, 1},
		{"CRLF throughout", hostile.Get("/") + hostile.Req("OPTIONS /x HTTP/1.1", hostile.HostAPI), []int{200, 200}, 0, 2},
	}
	for _, tt := range tests {
		framing0 := testutil.ToFloat64(p.metrics.framing)
		screen0 := testutil.ToFloat64(p.metrics.refused.WithLabelValues("400"))
		origin.settle(t)
		_, c0, _ := origin.counts()
		got, bodies := sendRaw(t, s.addr, hostile.Case{Raw: tt.raw, Want: tt.want})
		if fmt.Sprint(got) != fmt.Sprint(tt.want) {
			t.Errorf("%s: got %v (%q), want %v", tt.name, got, bodies, tt.want)
		}
		if got := testutil.ToFloat64(p.metrics.framing) - framing0; got != tt.refused {
			t.Errorf("%s: edge_framing_refused_total grew by %v, want %v", tt.name, got, tt.refused)
		}
		if got := testutil.ToFloat64(p.metrics.refused.WithLabelValues("400")) - screen0; got != 0 {
			t.Errorf("%s: edge_refused_requests_total{code=\"400\"} grew by %v, want 0", tt.name, got)
		}
		origin.settle(t)
		if _, c1, _ := origin.counts(); c1-c0 != tt.forwarded {
			t.Errorf("%s: origin got %d requests, want %d", tt.name, c1-c0, tt.forwarded)
		}
	}
}

// TestHTTP2FloodsAreTheGuards: the kinds edge_http2_floods_total shows at
// 0 from the start are the ones the listener reports.
func TestHTTP2FloodsAreTheGuards(t *testing.T) {
	if want := []string{guard.FloodRapidReset, guard.FloodContinuation, guard.FloodControl}; !slices.Equal(HTTP2Floods, want) {
		t.Errorf("HTTP2Floods = %q, want %q", HTTP2Floods, want)
	}
}
