package proxy

import (
	"bytes"
	"fmt"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"strings"
	"testing"
	"time"

	"github.com/edgerate/edge/rules"
	"github.com/prometheus/client_golang/prometheus/testutil"
)

// forwarderProxy is a proxy answering api.example.com itself, with a
// generous per-ip rule, trusting 10.0.0.0/8, on clk, logging into logs.
func forwarderProxy(t *testing.T, clk *clock, logs *bytes.Buffer) *Proxy {
	t.Helper()
	cfg := rules.Config{
		ClientIP: rules.ClientIPConfig{TrustedProxies: []string{"10.0.0.0/8"}},
		Domains: []rules.DomainConfig{{
			Hosts:   []string{"api.example.com"},
			Respond: &rules.ResponseConfig{Body: "ok"},
			Rules:   []rules.RuleConfig{{Name: "per-ip", Limit: 1_000_000, Period: time.Minute}},
		}},
	}
	table, err := rules.Compile(cfg)
	if err != nil {
		t.Fatal(err)
	}
	p, err := New(Options{Table: table, Now: clk.Now, Logger: slog.New(slog.NewTextHandler(logs, nil))})
	if err != nil {
		t.Fatal(err)
	}
	return p
}

// xffStep is one request of a forwarder case: after advancing the clock by
// wait, peer sends X-Forwarded-For xff (none when "").
type xffStep struct {
	wait time.Duration
	peer string
	xff  string
}

// sends returns n steps from peer with the distinct values from, from+1, ...,
// the first after wait and the others at once.
func sends(peer string, from, n int, wait time.Duration) []xffStep {
	var s []xffStep
	for i := range n {
		s = append(s, xffStep{peer: peer, xff: fmt.Sprintf("198.51.100.%d", from+i)})
	}
	s[0].wait = wait
	return s
}

func concat(steps ...[]xffStep) []xffStep {
	var all []xffStep
	for _, s := range steps {
		all = append(all, s...)
	}
	return all
}

// TestUntrustedForwarders: an untrusted peer sending 10 distinct
// X-Forwarded-For values within a minute is counted and logged, naming the
// peer and client_ip.trusted_proxies, once an hour at most, and no more
// than one line a second goes to the log for all peers together.
func TestUntrustedForwarders(t *testing.T) {
	const peer, other = "192.0.2.7", "192.0.2.8"
	tests := []struct {
		name  string
		steps []xffStep
		count int      // edge_untrusted_forwarders_total
		lines []string // peers named in the log, in order
	}{
		{"ten distinct values", sends(peer, 1, 10, 0), 1, []string{peer}},
		{"nine distinct values", sends(peer, 1, 9, 0), 0, nil},
		{"ten values, one repeated", concat(sends(peer, 1, 9, 0), sends(peer, 1, 1, 0)), 0, nil},
		{"no X-Forwarded-For", []xffStep{{peer: peer}, {peer: peer}}, 0, nil},
		{"ten lines of one header are one value", []xffStep{{peer: peer, xff: strings.Repeat("198.51.100.1, ", 9) + "198.51.100.1"}}, 0, nil},
		{"ten values over more than a minute", concat(sends(peer, 1, 5, 0), sends(peer, 6, 5, 61*time.Second)), 0, nil},
		{"a trusted peer", sends("10.1.2.3", 1, 20, 0), 0, nil},
		{"again within the hour", concat(sends(peer, 1, 10, 0), sends(peer, 11, 10, 30*time.Minute)), 1, []string{peer}},
		{"again after an hour", concat(sends(peer, 1, 10, 0), sends(peer, 11, 10, time.Hour)), 2, []string{peer, peer}},
		{"the clock goes back", concat(sends(peer, 1, 10, 0), sends(peer, 11, 10, -time.Minute)), 1, []string{peer}},
		{"two peers in one second", concat(sends(peer, 1, 10, 0), sends(other, 1, 10, 0)), 2, []string{peer}},
		{"two peers a second apart", concat(sends(peer, 1, 10, 0), sends(other, 1, 10, time.Second)), 2, []string{peer, other}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			clk, logs := newClock(), &bytes.Buffer{}
			p := forwarderProxy(t, clk, logs)
			for i, s := range tt.steps {
				clk.Advance(s.wait)
				r := httptest.NewRequest(http.MethodGet, "http://api.example.com/", nil)
				r.RemoteAddr = s.peer + ":4000"
				if s.xff != "" {
					r.Header.Set("X-Forwarded-For", s.xff)
				}
				w := httptest.NewRecorder()
				p.ServeHTTP(w, r)
				if w.Code != http.StatusOK {
					t.Fatalf("request %d: got %d, want 200", i, w.Code)
				}
			}
			if got := int(testutil.ToFloat64(p.metrics.untrustedForwarders)); got != tt.count {
				t.Errorf("edge_untrusted_forwarders_total: got %d, want %d", got, tt.count)
			}
			var named []string
			for _, l := range strings.Split(strings.TrimSpace(logs.String()), "\n") {
				if !strings.Contains(l, "client_ip.trusted_proxies") {
					continue
				}
				if !strings.Contains(l, "level=WARN") {
					t.Errorf("not a warning: %s", l)
				}
				_, after, _ := strings.Cut(l, " peer=")
				named = append(named, strings.Fields(after + " ")[0])
			}
			if fmt.Sprint(named) != fmt.Sprint(tt.lines) {
				t.Errorf("peers logged: got %v, want %v\nlog:\n%s", named, tt.lines, logs)
			}
		})
	}
}

// TestUntrustedForwardersFast: the fast path feeds the detection as
// net/http's path does.
func TestUntrustedForwardersFast(t *testing.T) {
	clk, logs := newClock(), &bytes.Buffer{}
	p := forwarderProxy(t, clk, logs)
	if !p.state.Load().table.FastPath {
		t.Fatal("the fast path is off")
	}
	out := make([]byte, 0, 4096)
	for i := range 10 {
		h := fastHead(fmt.Sprintf("GET / HTTP/1.1\r\nHost: api.example.com\r\nX-Forwarded-For: 198.51.100.%d\r\n\r\n", i))
		h.Peer, h.Now = netip.MustParseAddr("192.0.2.7"), clk.Now()
		p.Answer(h, out[:0])
	}
	if got := testutil.ToFloat64(p.metrics.untrustedForwarders); got != 1 {
		t.Errorf("edge_untrusted_forwarders_total: got %v, want 1\nlog:\n%s", got, logs)
	}
	if !strings.Contains(logs.String(), "peer=192.0.2.7") {
		t.Errorf("the peer is not named in the log:\n%s", logs)
	}
}

// TestUntrustedForwardersBounded: however many peers send X-Forwarded-For,
// at most forwarderPeers are remembered, and one forgotten and seen again
// starts afresh.
func TestUntrustedForwardersBounded(t *testing.T) {
	var f forwarders
	now := time.Unix(1_800_000_000, 0)
	for i := range 3 * forwarderPeers {
		peer := netip.AddrFrom4([4]byte{192, 0, byte(i >> 8), byte(i)})
		for v := range forwarderValues - 1 {
			if f.observe(peer, []string{fmt.Sprint(v)}, now) {
				t.Fatalf("peer %s noticed after %d values", peer, v+1)
			}
		}
	}
	if got := f.len(); got != forwarderPeers {
		t.Errorf("peers remembered: got %d, want %d", got, forwarderPeers)
	}
	first := netip.AddrFrom4([4]byte{192, 0, 0, 0})
	if f.observe(first, []string{"last"}, now) {
		t.Error("a forgotten peer was noticed on its first value since")
	}
}

// TestUntrustedForwardersAllocs: a peer that sends no X-Forwarded-For
// costs the detection nothing, and one it remembers allocates nothing.
func TestUntrustedForwardersAllocs(t *testing.T) {
	clk, logs := newClock(), &bytes.Buffer{}
	p := forwarderProxy(t, clk, logs)
	st := p.state.Load()
	id := Identity{Peer: netip.MustParseAddr("192.0.2.7")}
	xff := []string{"198.51.100.1"}
	now := clk.Now()
	p.noteForwarder(st, id, xff, now)
	for _, tt := range []struct {
		name string
		xff  []string
	}{{"no X-Forwarded-For", nil}, {"a remembered peer", xff}} {
		if n := testing.AllocsPerRun(100, func() { p.noteForwarder(st, id, tt.xff, now) }); n != 0 {
			t.Errorf("%s: got %v allocs, want 0", tt.name, n)
		}
	}
}
