package proxyproto

import (
	"bufio"
	"context"
	"encoding/binary"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/netip"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/edgerate/edge/guard"
	"go.uber.org/goleak"
)

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m)
}

// The balancer of the tests is 127.0.0.2; 127.0.0.3 is a client that is
// not one (loopback aliases: Linux answers on all of 127.0.0.0/8).
var (
	balancer = netip.MustParseAddr("127.0.0.2")
	stranger = netip.MustParseAddr("127.0.0.3")
)

// results records what a Reader reports.
type results struct {
	mu  sync.Mutex
	got []string
}

func (r *results) add(s string) {
	r.mu.Lock()
	r.got = append(r.got, s)
	r.mu.Unlock()
}

func (r *results) list() []string {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]string(nil), r.got...)
}

// serve runs an HTTP server behind a guard.Listener whose stage is a
// Reader trusting 127.0.0.2, with stage deadline headerTimeout, answering
// each request with its RemoteAddr and whether its connection's header
// said TLS. It returns the listener's address.
func serve(t *testing.T, headerTimeout time.Duration, res *results) string {
	t.Helper()
	r, err := New(Options{Trusted: func(a netip.Addr) bool { return a == balancer }, OnResult: res.add})
	if err != nil {
		t.Fatal(err)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	gl := guard.NewListener(ln, guard.ListenerOptions{ReadHeaderTimeout: headerTimeout, Stages: []guard.Stage{r.Stage}})
	srv := &http.Server{
		ReadHeaderTimeout: headerTimeout,
		ConnState:         gl.ConnState,
		Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			front := guard.FrontOf(r.Context().Value(connKey{}).(net.Conn))
			fmt.Fprintf(w, "%s tls=%v", r.RemoteAddr, front != nil && front.TLS)
		}),
		ConnContext: func(ctx context.Context, c net.Conn) context.Context { return context.WithValue(ctx, connKey{}, c) },
	}
	done := make(chan struct{})
	go func() {
		defer close(done)
		srv.Serve(gl)
	}()
	t.Cleanup(func() {
		srv.Close()
		<-done
	})
	return ln.Addr().String()
}

// connKey carries a request's connection in its context.
type connKey struct{}

// dialFrom connects to addr from the loopback address from.
func dialFrom(t *testing.T, from netip.Addr, addr string) net.Conn {
	t.Helper()
	d := net.Dialer{LocalAddr: &net.TCPAddr{IP: from.AsSlice()}}
	c, err := d.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	c.SetDeadline(time.Now().Add(10 * time.Second))
	return c
}

// v2 writes a v2 header by hand: the signature, version 2 and command
// (0x21 PROXY, 0x20 LOCAL), family and protocol (0x11 TCP over IPv4, 0x21
// over IPv6, 0x12 UDP over IPv4), the length of what follows, then addr
// and tlvs.
func v2(cmd, fam byte, addr, tlvs []byte) []byte {
	b := []byte("\r\n\r\n\x00\r\nQUIT\n")
	b = append(b, cmd, fam)
	b = binary.BigEndian.AppendUint16(b, uint16(len(addr)+len(tlvs)))
	return append(append(b, addr...), tlvs...)
}

// v4 is an IPv4 address block: 203.0.113.9:4567 to 192.0.2.1:443.
var v4 = []byte{203, 0, 113, 9, 192, 0, 2, 1, 0x11, 0xd7, 0x01, 0xbb}

// v6 is an IPv6 address block: [2001:db8::9]:4567 to [2001:db8::1]:443.
var v6 = func() []byte {
	b := netip.MustParseAddr("2001:db8::9").AsSlice()
	b = append(b, netip.MustParseAddr("2001:db8::1").AsSlice()...)
	return append(b, 0x11, 0xd7, 0x01, 0xbb)
}()

// tlv is one TLV: type, 16-bit length, value.
func tlv(typ byte, value []byte) []byte {
	b := binary.BigEndian.AppendUint16([]byte{typ}, uint16(len(value)))
	return append(b, value...)
}

// ssl is a PP2_TYPE_SSL TLV (0x20) with client bits client, verify 0, and
// a PP2_SUBTYPE_SSL_VERSION sub-TLV (0x21) "TLSv1.3".
func ssl(client byte) []byte {
	return tlv(0x20, append([]byte{client, 0, 0, 0, 0}, tlv(0x21, []byte("TLSv1.3"))...))
}

const get = "GET / HTTP/1.1\r\nHost: a\r\n\r\n"

func TestStage(t *testing.T) {
	tests := []struct {
		name   string
		from   netip.Addr
		send   []string // written one after the other
		want   string   // the response's body; "" for a connection closed unanswered
		result string   // what the Reader reports; "" none
	}{
		{"v1 TCP4", balancer, []string{"PROXY TCP4 203.0.113.9 192.0.2.1 4567 443\r\n" + get},
			"203.0.113.9:4567 tls=false", ResultV1},
		{"v1 TCP6", balancer, []string{"PROXY TCP6 2001:db8::9 2001:db8::1 4567 443\r\n" + get},
			"[2001:db8::9]:4567 tls=false", ResultV1},
		{"v1 alone, request later", balancer, []string{"PROXY TCP4 203.0.113.9 192.0.2.1 4567 443\r\n", get},
			"203.0.113.9:4567 tls=false", ResultV1},
		{"v1 UNKNOWN", balancer, []string{"PROXY UNKNOWN\r\n" + get}, "127.0.0.2:", ResultLocal},
		{"v2 TCP4", balancer, []string{string(v2(0x21, 0x11, v4, nil)) + get}, "203.0.113.9:4567 tls=false", ResultV2},
		{"v2 TCP6 with TLVs, SSL", balancer, []string{string(v2(0x21, 0x21, v6,
			append(tlv(0x02, []byte("api.example.com")), ssl(0x01)...))) + get},
			"[2001:db8::9]:4567 tls=true", ResultV2},
		{"v2 SSL TLV without the client bit", balancer, []string{string(v2(0x21, 0x11, v4, ssl(0x00))) + get},
			"203.0.113.9:4567 tls=false", ResultV2},
		{"v2 LOCAL", balancer, []string{string(v2(0x20, 0x00, nil, nil)) + get}, "127.0.0.2:", ResultLocal},
		{"v2 LOCAL with addresses", balancer, []string{string(v2(0x20, 0x11, v4, nil)) + get}, "127.0.0.2:", ResultLocal},
		{"v2 UDP source", balancer, []string{string(v2(0x21, 0x12, v4, nil)) + get}, "", ResultMalformed},
		{"v1 unspecified source", balancer, []string{"PROXY TCP4 0.0.0.0 192.0.2.1 4567 443\r\n" + get}, "", ResultMalformed},
		{"balancer without header", balancer, []string{get}, "", ResultMissing},
		{"balancer that sends nothing", balancer, nil, "", ResultTimeout},
		{"v1 truncated", balancer, []string{"PROXY TCP4 203.0.113.9"}, "", ResultMalformed},
		{"v2 truncated", balancer, []string{string(v2(0x21, 0x11, v4, nil)[:20])}, "", ResultMalformed},
		{"v1 oversized", balancer, []string{"PROXY TCP4 " + strings.Repeat("1", 200) + "\r\n" + get}, "", ResultMalformed},
		{"v2 oversized", balancer, []string{string(v2(0x21, 0x11, v4, tlv(0xe0, make([]byte, 5000))))}, "", ResultMalformed},
		{"v2 TLV longer than the header", balancer, []string{string(v2(0x21, 0x11, v4, []byte{0x02, 0x00, 0x40, 'a'})) + get},
			"", ResultMalformed},
		// go-proxyproto refuses a v1 header that does not come in one
		// read at once; a v2 header may take the stage's time.
		{"v1 slow", balancer, []string{"PROXY TCP4 "}, "", ResultMalformed},
		{"v2 slow", balancer, []string{string(v2(0x21, 0x11, v4, nil)[:14])}, "", ResultTimeout},
		{"v1 from a stranger", stranger, []string{"PROXY TCP4 203.0.113.9 192.0.2.1 4567 443\r\n" + get}, "", ResultUntrusted},
		{"v2 from a stranger", stranger, []string{string(v2(0x21, 0x11, v4, nil)) + get}, "", ResultUntrusted},
		{"v2 from a stranger in pieces", stranger, []string{"\r\n\r\n", "\x00\r\nQUIT\n\x21\x11\x00\x0c"}, "", ResultUntrusted},
		{"a stranger's request", stranger, []string{get}, "127.0.0.3:", ""},
		{"a stranger's POST", stranger, []string{"POST / HTTP/1.1\r\nHost: a\r\nContent-Length: 0\r\n\r\n"}, "127.0.0.3:", ""},
		{"a stranger that begins like v1", stranger, []string{"PRO", "PFIND / HTTP/1.1\r\nHost: a\r\n\r\n"}, "127.0.0.3:", ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			timeout := 10 * time.Second
			if tt.result == ResultTimeout {
				timeout = 300 * time.Millisecond
			}
			res := &results{}
			addr := serve(t, timeout, res)
			c := dialFrom(t, tt.from, addr)
			for _, s := range tt.send {
				if _, err := io.WriteString(c, s); err != nil {
					break // closed already
				}
			}
			if tt.name == "v1 truncated" || tt.name == "v2 truncated" {
				c.(*net.TCPConn).CloseWrite()
			}
			body := ""
			if resp, err := http.ReadResponse(bufio.NewReader(c), nil); err == nil {
				b, _ := io.ReadAll(resp.Body)
				resp.Body.Close()
				body = string(b)
			}
			if tt.want == "" && body != "" || !strings.HasPrefix(body, tt.want) {
				t.Errorf("got body %q, want %q", body, tt.want)
			}
			var want []string
			if tt.result != "" {
				want = []string{tt.result}
			}
			if got := res.list(); fmt.Sprint(got) != fmt.Sprint(want) {
				t.Errorf("got results %q, want %q", got, want)
			}
		})
	}
}
