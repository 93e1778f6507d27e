package main

import (
	"bufio"
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/edgerate/edge/internal/pebbletest"
	"github.com/edgerate/edge/internal/redistest"
	"github.com/edgerate/edge/internal/wait"
)

// The ACME tests run edge against Pebble, Let's Encrypt's test CA, on
// loopback, which validates every challenge for real on the ports the
// test gives it (pebbletest). The names a.example.com and b.example.com
// resolve to 127.0.0.1 in Pebble's DNS server.

var acmeNames = []string{"a.example.com", "b.example.com"}

// acmeSite is an edge on fixed loopback ports that Pebble validates on.
type acmeSite struct {
	dir               string // the configuration's directory, with the storage in it
	cfg               string // the configuration file
	httpPort, tlsPort int
	admin             string
	log               *edgeLog
	stop              func()
}

// acmeConfig is the configuration of an edge on httpPort and tlsPort whose
// domain obtains certificates for acmeNames from ca, with challenges, and
// allows one request an hour per client: a validation counted by it would
// refuse the next. rest is more top-level YAML.
func acmeConfig(ca *pebbletest.CA, httpPort, tlsPort int, challenges, rest string) string {
	return fmt.Sprintf(`
listen: "127.0.0.1:%d"
admin_listen: "127.0.0.1:0"
tls:
  listen: "127.0.0.1:%d"
  acme:
    email: ops@example.com
    ca: %q
    ca_root: %q
    storage: acme-data
    challenges: %s
domains:
  - name: site
    hosts: [%s]
    acme: true
    https_redirect: true
    respond: {body: "ok"}
    rules: [{name: per-ip, limit: 1, period: 1h}]
%s`, httpPort, tlsPort, ca.Directory, ca.RootFile, challenges, strings.Join(acmeNames, ", "), rest)
}

// runACMEEdge runs edge in-process on the configuration at cfg until stop.
func runACMEEdge(t *testing.T, cfg string) (log *edgeLog, admin string, stop func()) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan int, 1)
	log = newEdgeLog()
	go func() { done <- run(ctx, []string{"-config", cfg}, io.Discard, log) }()
	stopped := false
	stop = func() {
		if stopped {
			return
		}
		stopped = true
		cancel()
		select {
		case <-done:
		case <-time.After(20 * time.Second):
			t.Error("edge did not stop")
		}
	}
	t.Cleanup(stop)
	_, admin = log.waitStarted(t)
	return log, admin, stop
}

// servedCert dials the TLS listener at addr for name and returns the leaf
// served, verified against roots, or the error.
func servedCert(addr, name string, roots *x509.CertPool) (*x509.Certificate, error) {
	d := &net.Dialer{Timeout: 3 * time.Second}
	c, err := tls.DialWithDialer(d, "tcp", addr, &tls.Config{ServerName: name, RootCAs: roots})
	if err != nil {
		return nil, err
	}
	defer c.Close()
	return c.ConnectionState().PeerCertificates[0], nil
}

// waitServed waits until the TLS listener at addr serves a certificate
// of roots for every name of acmeNames, and returns them by name.
func waitServed(t *testing.T, addr string, roots *x509.CertPool, log fmt.Stringer) map[string]*x509.Certificate {
	t.Helper()
	got := map[string]*x509.Certificate{}
	start := time.Now()
	for len(got) < len(acmeNames) {
		if time.Since(start) > 60*time.Second {
			t.Fatalf("after 60s edge serves certificates for %d of %v; log:\n%s", len(got), acmeNames, log)
		}
		for _, n := range acmeNames {
			if got[n] == nil {
				if c, err := servedCert(addr, n, roots); err == nil {
					got[n] = c
				}
			}
		}
		time.Sleep(100 * time.Millisecond)
	}
	return got
}

// metricValue returns the value of the series of name whose labels
// include each of labels (`result="ok"`) on the admin listener at admin,
// 0 without one.
func metricValue(t *testing.T, admin, name string, labels ...string) float64 {
	t.Helper()
	resp, err := http.Get("http://" + admin + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	sum := 0.0
	sc := bufio.NewScanner(resp.Body)
	sc.Buffer(nil, 1<<20)
	for sc.Scan() {
		line := sc.Text()
		if !strings.HasPrefix(line, name+"{") && !strings.HasPrefix(line, name+" ") {
			continue
		}
		ok := true
		for _, l := range labels {
			ok = ok && strings.Contains(line, l)
		}
		if ok {
			v, _ := strconv.ParseFloat(line[strings.LastIndexByte(line, ' ')+1:], 64)
			sum += v
		}
	}
	return sum
}

// adminJSON decodes the JSON of GET path on the admin listener at admin
// into v.
func adminJSON(t *testing.T, admin, path string, v any) {
	t.Helper()
	resp, err := http.Get("http://" + admin + path)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	if err := json.NewDecoder(resp.Body).Decode(v); err != nil {
		t.Fatalf("GET %s: %v", path, err)
	}
}

// acmeStatus reads GET /v1/certificates's ACME names.
func acmeStatus(t *testing.T, admin string) map[string]map[string]any {
	t.Helper()
	var v struct {
		ACME []map[string]any `json:"acme"`
	}
	adminJSON(t, admin, "/v1/certificates", &v)
	out := map[string]map[string]any{}
	for _, a := range v.ACME {
		out[a["name"].(string)] = a
	}
	return out
}

// newACMESite picks the ports of an edge, starts Pebble validating on
// them (certificates living validity, 0 for 90 days) and writes edge's
// configuration.
func newACMESite(t *testing.T, validity time.Duration, challenges string) (*acmeSite, *pebbletest.CA) {
	t.Helper()
	ports := pebbletest.Reserve(t, 2)
	s := &acmeSite{dir: t.TempDir(), httpPort: ports.Ports[0], tlsPort: ports.Ports[1]}
	ca := pebbletest.Start(t, pebbletest.Options{HTTPPort: s.httpPort, TLSPort: s.tlsPort, Validity: validity})
	ports.Release() // for edge, which starts next
	s.cfg = filepath.Join(s.dir, "edge.yaml")
	must(t, os.WriteFile(s.cfg, []byte(acmeConfig(ca, s.httpPort, s.tlsPort, challenges, "")), 0o600))
	return s, ca
}

func (s *acmeSite) start(t *testing.T) {
	t.Helper()
	s.log, s.admin, s.stop = runACMEEdge(t, s.cfg)
}

func (s *acmeSite) tlsAddr() string { return "127.0.0.1:" + strconv.Itoa(s.tlsPort) }

// TestACMEObtainsCertificates: with each challenge type alone, edge
// obtains a certificate from Pebble for every name of its acme domain,
// validated for real on its own listeners, and serves it; the validations
// were answered before any rule (the rule allows one request an hour, and
// two names were validated), counted as such; the status shows each name
// valid with its renewal time; the account's key is in no log line.
func TestACMEObtainsCertificates(t *testing.T) {
	if testing.Short() {
		t.Skip("runs Pebble")
	}
	tests := []struct {
		name, challenges string
		validations      func(t *testing.T, admin string) float64
	}{
		{"http-01", "[http-01]", func(t *testing.T, admin string) float64 {
			return metricValue(t, admin, "edge_requests_total", `outcome="acme"`)
		}},
		{"tls-alpn-01", "[tls-alpn-01]", func(t *testing.T, admin string) float64 {
			return metricValue(t, admin, "edge_tls_handshakes_total", `result="acme"`)
		}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			s, ca := newACMESite(t, 0, tt.challenges)
			s.start(t)
			roots := ca.Roots(t)
			served := waitServed(t, s.tlsAddr(), roots, s.log)
			for n, c := range served {
				if c.Subject.CommonName != n && !contains(c.DNSNames, n) {
					t.Errorf("%s: served a certificate for %v", n, c.DNSNames)
				}
			}
			if got := metricValue(t, s.admin, "edge_acme_orders_total", `result="ok"`); got != 2 {
				t.Errorf("edge_acme_orders_total{result=\"ok\"} = %v, want 2", got)
			}
			if got := tt.validations(t, s.admin); got < 2 {
				t.Errorf("validations answered by edge: %v, want at least 2 (one a name)", got)
			}
			if got := metricValue(t, s.admin, "edge_requests_total", `outcome="blocked"`); got != 0 {
				t.Errorf("edge_requests_total{outcome=\"blocked\"} = %v: a rule refused a validation", got)
			}
			if got := ca.Issued(); got != 2 {
				t.Errorf("Pebble issued %d certificates, want 2", got)
			}
			st := acmeStatus(t, s.admin)
			for _, n := range acmeNames {
				a := st[n]
				if a == nil || a["state"] != "valid" || a["not_after"] == nil || a["next_renewal"] == nil {
					t.Errorf("status of %s: %v, want valid with not_after and next_renewal", n, a)
				}
			}
			if got := metricValue(t, s.admin, "edge_tls_certificate_expiry_timestamp_seconds", `source="acme"`); got == 0 {
				t.Error("edge_tls_certificate_expiry_timestamp_seconds has no acme series")
			}
			s.stop()
			assertNoKeyInLog(t, s)
		})
	}
}

// assertNoKeyInLog fails t if edge's log holds any private key of its
// storage (the ACME account's, a certificate's) or a PEM key block.
func assertNoKeyInLog(t *testing.T, s *acmeSite) {
	t.Helper()
	log := s.log.String()
	if strings.Contains(log, "PRIVATE KEY") {
		t.Error("the log holds a PEM private key")
	}
	keys := 0
	filepath.Walk(filepath.Join(s.dir, "acme-data"), func(path string, fi os.FileInfo, err error) error {
		if err != nil || fi.IsDir() || !strings.HasSuffix(path, ".key") {
			return nil
		}
		keys++
		b, _ := os.ReadFile(path)
		body := strings.Join(strings.Split(string(b), "\n")[1:3], "")
		if len(body) > 20 && strings.Contains(strings.ReplaceAll(log, "\n", ""), body[:20]) {
			t.Errorf("the log holds the key of %s", path)
		}
		return nil
	})
	if keys < 3 { // the account's and one a name
		t.Errorf("found %d keys in the storage, want at least 3", keys)
	}
}

func contains(list []string, s string) bool {
	for _, x := range list {
		if x == s {
			return true
		}
	}
	return false
}

// TestACMERestartReusesCertificate: a restart serves the certificates in
// storage, the same ones, without a new order.
func TestACMERestartReusesCertificate(t *testing.T) {
	if testing.Short() {
		t.Skip("runs Pebble")
	}
	s, ca := newACMESite(t, 0, "[http-01, tls-alpn-01]")
	s.start(t)
	roots := ca.Roots(t)
	first := waitServed(t, s.tlsAddr(), roots, s.log)
	s.stop()
	issued := ca.Issued()
	s.start(t)
	again := waitServed(t, s.tlsAddr(), roots, s.log)
	for _, n := range acmeNames {
		if again[n].SerialNumber.Cmp(first[n].SerialNumber) != 0 {
			t.Errorf("%s: serial %v after the restart, want %v", n, again[n].SerialNumber, first[n].SerialNumber)
		}
	}
	if got := metricValue(t, s.admin, "edge_acme_orders_total"); got != 0 {
		t.Errorf("edge_acme_orders_total after the restart = %v, want 0", got)
	}
	if got := ca.Issued(); got != issued {
		t.Errorf("Pebble issued %d more certificates after the restart, want 0", got-issued)
	}
}

// TestACMERenewsShortLived: certificates that live 30 seconds are renewed
// before they expire (at the time Pebble's renewal information chose),
// and the new one is served.
func TestACMERenewsShortLived(t *testing.T) {
	if testing.Short() {
		t.Skip("runs Pebble")
	}
	s, ca := newACMESite(t, 30*time.Second, "[http-01]")
	s.start(t)
	roots := ca.Roots(t)
	first := waitServed(t, s.tlsAddr(), roots, s.log)
	wait.For(t, 45*time.Second, "a renewed certificate for "+acmeNames[0], func() bool {
		c, err := servedCert(s.tlsAddr(), acmeNames[0], roots)
		return err == nil && c.SerialNumber.Cmp(first[acmeNames[0]].SerialNumber) != 0
	})
	if got := metricValue(t, s.admin, "edge_acme_renewals_total", `result="ok"`); got < 1 {
		t.Errorf("edge_acme_renewals_total{result=\"ok\"} = %v, want at least 1", got)
	}
	if got := metricValue(t, s.admin, "edge_acme_orders_total", `result="ok"`); got != 2 {
		t.Errorf("edge_acme_orders_total{result=\"ok\"} = %v, want 2: renewals are not orders", got)
	}
}

// TestACMEReloadChangesNames: a reload that adds a host to the acme
// domain obtains its certificate, and one that removes a host stops
// serving its certificate, without a restart.
func TestACMEReloadChangesNames(t *testing.T) {
	if testing.Short() {
		t.Skip("runs Pebble")
	}
	s, ca := newACMESite(t, 0, "[http-01, tls-alpn-01]")
	s.start(t)
	roots := ca.Roots(t)
	waitServed(t, s.tlsAddr(), roots, s.log)
	cfg := acmeConfig(ca, s.httpPort, s.tlsPort, "[http-01, tls-alpn-01]", "")
	cfg = strings.Replace(cfg, "hosts: [a.example.com, b.example.com]", "hosts: [a.example.com, c.example.com]", 1)
	must(t, os.WriteFile(s.cfg, []byte(cfg), 0o600))
	wait.For(t, 30*time.Second, "a certificate for c.example.com after the reload", func() bool {
		_, err := servedCert(s.tlsAddr(), "c.example.com", roots)
		return err == nil
	})
	if _, err := servedCert(s.tlsAddr(), "b.example.com", roots); err == nil {
		t.Error("b.example.com, no longer a host, is still served its certificate")
	}
	if _, ok := acmeStatus(t, s.admin)["b.example.com"]; ok {
		t.Error("the status still lists b.example.com")
	}
}

// TestACMECheckReadsCARoot: edge -check reads tls.acme.ca_root.
func TestACMECheckReadsCARoot(t *testing.T) {
	dir := t.TempDir()
	cfg := filepath.Join(dir, "edge.yaml")
	must(t, os.WriteFile(cfg, []byte(`
listen: "127.0.0.1:0"
tls:
  listen: "127.0.0.1:0"
  acme: {ca: "https://ca.internal/dir", ca_root: missing.pem}
domains:
  - {hosts: [a.example.com], acme: true, respond: {body: ok}}
`), 0o600))
	code, _, stderr := runEdge("-check", "-config", cfg)
	if want := `tls.acme.ca_root "missing.pem": no such file or directory`; code != 1 || !strings.Contains(stderr, want) {
		t.Errorf("edge -check: exit %d, stderr %q; want 1 and %q", code, stderr, want)
	}
}

// forwarder passes each connection it accepts to the address to dials,
// waiting up to 15 s (Pebble's validation timeout) for something to listen
// there, and tells first of its first connection. It stops with the test.
type forwarder struct {
	ln    net.Listener
	to    string
	first chan struct{}
	once  *sync.Once
	wg    sync.WaitGroup
}

func newForwarder(t *testing.T, to string, first chan struct{}, once *sync.Once) *forwarder {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	must(t, err)
	f := &forwarder{ln: ln, to: to, first: first, once: once}
	var conns sync.Map
	f.wg.Add(1)
	go func() {
		defer f.wg.Done()
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			f.once.Do(func() { close(f.first) })
			conns.Store(c, true)
			f.wg.Add(1)
			go func() {
				defer f.wg.Done()
				defer conns.Delete(c)
				defer c.Close()
				var up net.Conn
				for start := time.Now(); time.Since(start) < 15*time.Second; time.Sleep(20 * time.Millisecond) {
					if up, err = net.Dial("tcp", f.to); err == nil {
						break
					}
				}
				if up == nil {
					return
				}
				defer up.Close()
				conns.Store(up, true)
				defer conns.Delete(up)
				done := make(chan struct{})
				go func() { io.Copy(up, c); up.(*net.TCPConn).CloseWrite(); close(done) }()
				io.Copy(c, up)
				<-done
			}()
		}
	}()
	t.Cleanup(func() {
		ln.Close()
		conns.Range(func(k, _ any) bool { k.(net.Conn).Close(); return true })
		f.wg.Wait()
	})
	return f
}

func (f *forwarder) port() int { return f.ln.Addr().(*net.TCPAddr).Port }

// popNode writes the configuration of a node of a PoP sharing rdb, on
// httpPort and tlsPort, in a directory of its own (its own storage).
func popNode(t *testing.T, ca *pebbletest.CA, rdb *redistest.Server, httpPort, tlsPort int) string {
	t.Helper()
	cfg := filepath.Join(t.TempDir(), "edge.yaml")
	cluster := fmt.Sprintf("cluster: {store: redis, redis: {addresses: [%q]}}\n", rdb.Addr)
	must(t, os.WriteFile(cfg, []byte(acmeConfig(ca, httpPort, tlsPort, "[http-01, tls-alpn-01]", cluster)), 0o600))
	return cfg
}

// TestACMEInAPoP: two nodes of a PoP share their ACME state through a real
// redis-server. Node A starts alone and orders each name under its lock
// in Redis, while Pebble validates on node B, which starts only once the
// first validation has arrived (a forwarder holds it until B listens) and
// answers from the tokens in Redis: one order a name in all, A's; B orders
// nothing and serves A's certificates. With Redis stopped both still
// serve, and B restarted serves from its copy in its storage.
func TestACMEInAPoP(t *testing.T) {
	if testing.Short() {
		t.Skip("runs Pebble and edge's binary")
	}
	bin := buildEdge(t)
	rdb := redistest.Start(t)
	portsB := pebbletest.Reserve(t, 2)
	httpB, tlsB := portsB.Ports[0], portsB.Ports[1]
	first, once := make(chan struct{}), &sync.Once{}
	fwdHTTP := newForwarder(t, "127.0.0.1:"+strconv.Itoa(httpB), first, once)
	fwdTLS := newForwarder(t, "127.0.0.1:"+strconv.Itoa(tlsB), first, once)
	portsA := pebbletest.Reserve(t, 2)
	ca := pebbletest.Start(t, pebbletest.Options{HTTPPort: fwdHTTP.port(), TLSPort: fwdTLS.port()})
	roots := ca.Roots(t)
	cfgA, cfgB := popNode(t, ca, rdb, portsA.Ports[0], portsA.Ports[1]), popNode(t, ca, rdb, httpB, tlsB)
	tlsAddrA, tlsAddrB := "127.0.0.1:"+strconv.Itoa(portsA.Ports[1]), "127.0.0.1:"+strconv.Itoa(tlsB)

	portsA.Release()
	a := startBinary(t, bin, cfgA)
	select {
	case <-first:
	case <-time.After(30 * time.Second):
		t.Fatalf("Pebble never validated: node A ordered nothing; its log:\n%s", a.stderr)
	}
	portsB.Release()
	b := startBinary(t, bin, cfgB)
	servedA := waitServed(t, tlsAddrA, roots, a.stderr)
	servedB := waitServed(t, tlsAddrB, roots, b.stderr)
	for _, n := range acmeNames {
		if servedA[n].SerialNumber.Cmp(servedB[n].SerialNumber) != 0 {
			t.Errorf("%s: node A serves serial %v, node B %v: want one certificate", n, servedA[n].SerialNumber, servedB[n].SerialNumber)
		}
	}
	if got := ca.Issued(); got != len(acmeNames) {
		t.Errorf("Pebble issued %d certificates, want %d: one a name", got, len(acmeNames))
	}
	validations := func(admin string) float64 {
		return metricValue(t, admin, "edge_requests_total", `outcome="acme"`) + metricValue(t, admin, "edge_tls_handshakes_total", `result="acme"`)
	}
	for _, c := range []struct {
		node                string
		admin               string
		orders, validations float64
	}{
		{"A", a.admin, 2, 0},
		{"B", b.admin, 0, -1},
	} {
		if got := metricValue(t, c.admin, "edge_acme_orders_total"); got != c.orders {
			t.Errorf("node %s: edge_acme_orders_total = %v, want %v", c.node, got, c.orders)
		}
		got := validations(c.admin)
		if c.validations >= 0 && got != c.validations || c.validations < 0 && got < float64(len(acmeNames)) {
			t.Errorf("node %s answered %v validations, want %v (-1: one a name at least)", c.node, got, c.validations)
		}
	}

	rdb.Kill()
	for _, n := range acmeNames {
		for addr, log := range map[string]fmt.Stringer{tlsAddrA: a.stderr, tlsAddrB: b.stderr} {
			if _, err := servedCert(addr, n, roots); err != nil {
				t.Errorf("with Redis stopped, %s for %s: %v; log:\n%s", addr, n, err, log)
			}
		}
	}
	b.stop(t)
	b = startBinary(t, bin, cfgB)
	again := waitServed(t, tlsAddrB, roots, b.stderr)
	for _, n := range acmeNames {
		if again[n].SerialNumber.Cmp(servedA[n].SerialNumber) != 0 {
			t.Errorf("%s: node B restarted without Redis serves serial %v, want %v", n, again[n].SerialNumber, servedA[n].SerialNumber)
		}
	}
}

// TestACMEPoPRenewalPickedUp: with certificates that live 30 seconds, a
// renewal by one node of a PoP is served by the other too, which does not
// renew the certificate itself: every certificate Pebble issued after the
// first two is one node's renewal.
func TestACMEPoPRenewalPickedUp(t *testing.T) {
	if testing.Short() {
		t.Skip("runs Pebble and edge's binary")
	}
	bin := buildEdge(t)
	rdb := redistest.Start(t)
	ports := pebbletest.Reserve(t, 4)
	ca := pebbletest.Start(t, pebbletest.Options{HTTPPort: ports.Ports[0], TLSPort: ports.Ports[1], Validity: 30 * time.Second})
	roots := ca.Roots(t)
	cfgA, cfgB := popNode(t, ca, rdb, ports.Ports[0], ports.Ports[1]), popNode(t, ca, rdb, ports.Ports[2], ports.Ports[3])
	tlsA, tlsB := "127.0.0.1:"+strconv.Itoa(ports.Ports[1]), "127.0.0.1:"+strconv.Itoa(ports.Ports[3])
	ports.Release()
	a, b := startBinary(t, bin, cfgA), startBinary(t, bin, cfgB)
	first := waitServed(t, tlsA, roots, a.stderr)
	name := acmeNames[0]
	wait.For(t, 60*time.Second, "both nodes serving one renewed certificate for "+name, func() bool {
		leafA, errA := servedCert(tlsA, name, roots)
		leafB, errB := servedCert(tlsB, name, roots)
		return errA == nil && errB == nil && leafA.SerialNumber.Cmp(first[name].SerialNumber) != 0 && leafA.SerialNumber.Cmp(leafB.SerialNumber) == 0
	})
	renewals := func() float64 {
		return metricValue(t, a.admin, "edge_acme_renewals_total", `result="ok"`) + metricValue(t, b.admin, "edge_acme_renewals_total", `result="ok"`)
	}
	wait.For(t, 10*time.Second, "every certificate issued after the first two to be one node's renewal", func() bool {
		return float64(ca.Issued()-len(acmeNames)) == renewals()
	})
	if got := renewals(); got < 1 {
		t.Errorf("renewals: %v, want at least 1", got)
	}
	if got := metricValue(t, a.admin, "edge_acme_orders_total", `result="ok"`) + metricValue(t, b.admin, "edge_acme_orders_total", `result="ok"`); got != float64(len(acmeNames)) {
		t.Errorf("orders of the PoP: %v, want %d", got, len(acmeNames))
	}
}
