package proxy

import (
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"runtime"
	"testing"
	"time"

	"github.com/edgerate/edge/internal/wire"
	"github.com/edgerate/edge/rules"
	"github.com/prometheus/client_golang/prometheus/testutil"
)

// connConfig is oneDomain with a connections section and a balancer
// (10.0.0.1) whose headers the public listener reads.
func connConfig(c rules.ConnectionsConfig) rules.Config {
	cfg := oneDomain("http://127.0.0.1:9")
	cfg.Connections = c
	cfg.ProxyProtocol = rules.ProxyProtocolConfig{From: []string{"10.0.0.1"}, Listeners: []string{"public"}}
	return cfg
}

// connStep is one connection a test opens (close: one it closes, by its
// index among the steps), and what it must get.
type connStep struct {
	client string // the peer, or the PROXY header's client with header
	header bool   // from the balancer: decided by AdmitClient
	close  int    // 1 + the index of an earlier admitted step to close instead; 0 to connect
	want   string // "ok", RefusedPerClient or RefusedRate
	after  time.Duration
}

func TestConnectionLimits(t *testing.T) {
	rate := func(n int) *rules.ConnectionRateConfig {
		return &rules.ConnectionRateConfig{Limit: n, Period: 10 * time.Second}
	}
	tests := []struct {
		name  string
		c     rules.ConnectionsConfig
		steps []connStep
	}{
		{"max_per_client", rules.ConnectionsConfig{MaxPerClient: 2}, []connStep{
			{client: "192.0.2.1", want: "ok"},
			{client: "192.0.2.1", want: "ok"},
			{client: "192.0.2.1", want: RefusedPerClient},
			{client: "192.0.2.2", want: "ok"}, // another client keeps connecting
			{close: 1},
			{client: "192.0.2.1", want: "ok"},
			{client: "192.0.2.1", want: RefusedPerClient},
		}},
		{"rate_per_client", rules.ConnectionsConfig{RatePerClient: rate(3)}, []connStep{
			{client: "192.0.2.1", want: "ok"},
			{client: "192.0.2.1", want: "ok"},
			{client: "192.0.2.1", want: "ok"},
			{client: "192.0.2.1", want: RefusedRate},
			{client: "192.0.2.2", want: "ok"},
			{client: "192.0.2.1", want: RefusedRate, after: 5 * time.Second},
			// Two periods on, the window holds nothing.
			{client: "192.0.2.1", want: "ok", after: 20 * time.Second},
		}},
		{"a refusal changes no count", rules.ConnectionsConfig{MaxPerClient: 1, RatePerClient: rate(2)}, []connStep{
			{client: "192.0.2.1", want: "ok"},
			{client: "192.0.2.1", want: RefusedPerClient}, // not counted in the rate
			{close: 1},
			{client: "192.0.2.1", want: "ok"},
			{close: 4},
			{client: "192.0.2.1", want: RefusedRate}, // gives its open slot back
			{client: "192.0.2.1", want: RefusedRate},
			{client: "192.0.2.2", want: "ok"},
		}},
		{"an IPv6 client by its /64", rules.ConnectionsConfig{MaxPerClient: 1}, []connStep{
			{client: "2001:db8:1:2::1", want: "ok"},
			{client: "2001:db8:1:2::ffff", want: RefusedPerClient},
			{client: "2001:db8:1:3::1", want: "ok"},
		}},
		{"allow", rules.ConnectionsConfig{MaxPerClient: 1, Allow: &rules.AllowConfig{CIDRs: []string{"198.51.100.0/24"}}}, []connStep{
			{client: "198.51.100.7", want: "ok"},
			{client: "198.51.100.7", want: "ok"},
			{client: "192.0.2.1", want: "ok"},
			{client: "192.0.2.1", want: RefusedPerClient},
		}},
		{"behind the balancer, by the header's client", rules.ConnectionsConfig{MaxPerClient: 1}, []connStep{
			{client: "10.0.0.1", want: "ok"}, // deferred to its header
			{client: "10.0.0.1", want: "ok"},
			{client: "192.0.2.1", header: true, want: "ok"},
			{client: "192.0.2.1", header: true, want: RefusedPerClient},
			{client: "192.0.2.2", header: true, want: "ok"},
			{client: "192.0.2.1", want: RefusedPerClient}, // the same client, direct
		}},
		{"allow compares the header's client", rules.ConnectionsConfig{MaxPerClient: 1, Allow: &rules.AllowConfig{CIDRs: []string{"10.0.0.1"}}}, []connStep{
			{client: "192.0.2.1", header: true, want: "ok"},
			{client: "192.0.2.1", header: true, want: RefusedPerClient},
			{client: "10.0.0.1", header: true, want: "ok"}, // a LOCAL header: the balancer itself
			{client: "10.0.0.1", header: true, want: "ok"},
		}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			e := newEnv(t, connConfig(tt.c))
			p := e.proxy
			admitted := map[int]wire.Admission{}
			refused := map[string]float64{}
			for i, s := range tt.steps {
				e.clock.Advance(s.after)
				if s.close > 0 {
					if r := admitted[s.close-1].Release; r != nil {
						r()
					}
					continue
				}
				perClient, rate := testutil.ToFloat64(p.metrics.connsRefusedPerClient), testutil.ToFloat64(p.metrics.connsRefusedRate)
				var a wire.Admission
				if s.header {
					a = p.AdmitClient(netip.MustParseAddr(s.client))
				} else {
					a = p.AdmitConnection(netip.MustParseAddr(s.client), ListenerPublic)
				}
				got := "ok"
				switch {
				case testutil.ToFloat64(p.metrics.connsRefusedPerClient) > perClient:
					got = RefusedPerClient
				case testutil.ToFloat64(p.metrics.connsRefusedRate) > rate:
					got = RefusedRate
				}
				if a.Refused != (got != "ok") {
					t.Errorf("step %d (%s): refused %v, counted %s", i, s.client, a.Refused, got)
				}
				if got != s.want {
					t.Errorf("step %d (%s): got %s, want %s", i, s.client, got, s.want)
				}
				if got != "ok" {
					refused[got]++
				}
				admitted[i] = a
			}
			if got := testutil.ToFloat64(p.metrics.connsRefusedPerClient); got != refused[RefusedPerClient] {
				t.Errorf("edge_connections_refused_total{reason=per_client}: got %v, want %v", got, refused[RefusedPerClient])
			}
		})
	}
}

// TestTopConnections: GET /v1/top/connections lists the clients refused
// most, with the split by reason and their open connections.
func TestTopConnections(t *testing.T) {
	e := newEnv(t, connConfig(rules.ConnectionsConfig{MaxPerClient: 1,
		RatePerClient: &rules.ConnectionRateConfig{Limit: 3, Period: time.Minute}}))
	p := e.proxy
	a := netip.MustParseAddr("192.0.2.1")
	p.AdmitConnection(a, ListenerPublic) // open
	for range 2 {
		p.AdmitConnection(a, ListenerPublic) // per_client
	}
	b := netip.MustParseAddr("2001:db8::1")
	for range 5 {
		if r := p.AdmitConnection(b, ListenerPublic).Release; r != nil {
			r() // 3 ok, 2 rate
		}
	}
	srv := httptest.NewServer(p.AdminHandler())
	t.Cleanup(srv.Close)
	resp, err := http.Get(srv.URL + "/v1/top/connections")
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	var got []refusedClient
	if err := json.Unmarshal(body, &got); err != nil {
		t.Fatalf("%v: %s", err, body)
	}
	want := []refusedClient{
		{Client: "192.0.2.1", Refused: 2, PerClient: 2, Open: 1},
		{Client: "2001:db8::/64", Refused: 2, Rate: 2},
	}
	if fmt.Sprint(got) != fmt.Sprint(want) {
		t.Errorf("got %+v, want %+v", got, want)
	}
}

// TestConnectionLimitsMillionClients: a million distinct IPv6 clients (one
// /64 each), every one connecting once, go through a rate_per_client of
// max_clients 100,000 with max_per_client: the limiter's memory stays
// bounded (the store was reserved at start; the open map holds only open
// connections), and a busy client at its limit is never forgotten: it
// stays refused through the flood, while a client new after it connects.
// Under the race detector, a tenth of the flood (the million takes 25 s
// there): .ci/run runs it whole without.
func TestConnectionLimitsMillionClients(t *testing.T) {
	flood := 1_000_000
	if raceEnabled {
		flood = 100_000
	}
	e := newEnv(t, connConfig(rules.ConnectionsConfig{MaxPerClient: 10,
		RatePerClient: &rules.ConnectionRateConfig{Limit: 20, Period: time.Minute}, MaxClients: 100_000}))
	p := e.proxy
	busy := netip.MustParseAddr("2001:db8:ffff:ffff::1")
	for range 20 {
		if r := p.AdmitConnection(busy, ListenerPublic).Release; r != nil {
			r()
		}
	}
	var before, after runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&before)
	var b [16]byte
	b[0], b[1] = 0x20, 0x01
	busyAdmitted := 0
	for i := range flood {
		b[4], b[5], b[6], b[7] = byte(i>>24), byte(i>>16), byte(i>>8), byte(i)
		a := p.AdmitConnection(netip.AddrFrom16(b), ListenerPublic)
		if a.Refused {
			t.Fatalf("client %d of the flood, its first connection, refused", i)
		}
		a.Release()
		if i%1000 == 0 && !p.AdmitConnection(busy, ListenerPublic).Refused {
			busyAdmitted++
		}
		if i%10_000 == 0 {
			e.clock.Advance(time.Millisecond)
		}
	}
	runtime.GC()
	runtime.ReadMemStats(&after)
	if grown := int64(after.HeapAlloc) - int64(before.HeapAlloc); grown > 8<<20 {
		t.Errorf("the heap grew by %d bytes over the flood, want at most 8 MiB: the limiter is not bounded", grown)
	}
	if busyAdmitted != 0 {
		t.Errorf("the busy client was admitted %d times during the flood, want 0: it was forgotten", busyAdmitted)
	}
	if live := p.state.Load().conns.rate.Len(); live > 100_000 {
		t.Errorf("the rate tracks %d clients, want at most max_clients 100,000", live)
	}
	if n := len(p.open.n); n != 0 {
		t.Errorf("the open map holds %d clients with every connection closed, want 0", n)
	}
	if a := p.AdmitConnection(netip.MustParseAddr("2001:db8:eeee::1"), ListenerPublic); a.Refused {
		t.Error("a new client after the flood refused")
	}
	t.Logf("heap %d → %d bytes over %d clients", before.HeapAlloc, after.HeapAlloc, flood)
}

// TestConnectionLimitsReload: a reload changes the limits for new
// connections; the open connections stay counted, and the rate's counts
// carry over while its period stays.
func TestConnectionLimitsReload(t *testing.T) {
	cfg := func(max, rate int) rules.Config {
		return connConfig(rules.ConnectionsConfig{MaxPerClient: max,
			RatePerClient: &rules.ConnectionRateConfig{Limit: rate, Period: time.Minute}})
	}
	e := newEnv(t, cfg(1, 3))
	p := e.proxy
	a := netip.MustParseAddr("192.0.2.1")
	admit := func() bool { return !p.AdmitConnection(a, ListenerPublic).Refused }
	if !admit() || admit() {
		t.Fatal("max_per_client 1: want the first admitted, the second refused")
	}
	table, err := rules.Compile(cfg(2, 3))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := p.Reload(table, "b"); err != nil {
		t.Fatal(err)
	}
	// One open before the reload, one more now; the rate has counted 2 of 3.
	if !admit() {
		t.Error("max_per_client 2 after the reload: the second connection refused")
	}
	if admit() {
		t.Error("max_per_client 2 after the reload: a third connection admitted: the open one was forgotten")
	}
	table, err = rules.Compile(cfg(10, 2))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := p.Reload(table, "c"); err != nil {
		t.Fatal(err)
	}
	if admit() {
		t.Error("rate_per_client 2 after the reload: admitted, though 2 were counted before it")
	}
}
