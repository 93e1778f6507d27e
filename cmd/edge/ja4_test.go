package main

import (
	"bufio"
	"context"
	"crypto/tls"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"net/url"
	"os"
	"os/exec"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/edgerate/edge/internal/ja4"
)

// ja4Config is the config of the JA4 tests: the origin is told the JA4 in
// X-JA4, and api counts by the fingerprint alone and by address and
// fingerprint. The plain listener is on 127.0.0.1, so that a plain
// request's client is 127.0.0.1.
func ja4Config(origin string, fast bool) string {
	return fmt.Sprintf(`
listen: "127.0.0.1:0"
admin_listen: "localhost:0"
origin: %q
fastpath: %v
tls:
  listen: "127.0.0.1:0"
  fingerprint_header: X-JA4
  certificates:
    - {cert_file: api.pem, key_file: api.key}
    - {cert_file: wild.pem, key_file: wild.key}
    - {cert_file: other.pem, key_file: other.key}
domains:
  - name: api
    hosts: [api.example.com, 127.0.0.1]
    rules:
      - {name: by-ja4, limit: 16, period: 1h, key: [ja4]}
      - {name: by-ip-ja4, limit: 12, period: 1h, key: [ip, ja4]}
`, origin, fast)
}

// ja4Origin answers with the X-JA4 and X-Forwarded-Proto fields it
// received: "ja4=[...] proto=https".
func ja4Origin(t *testing.T) *httptest.Server {
	o := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		fmt.Fprintf(w, "ja4=%q proto=%s", r.Header.Values("X-Ja4"), r.Header.Get("X-Forwarded-Proto"))
	}))
	t.Cleanup(o.Close)
	return o
}

// helloCapture is a TLS server that computes the JA4 of each ClientHello
// it receives, as internal/ja4 does from what crypto/tls reports, and ends
// the handshake: what a client's hello is, apart from edge.
type helloCapture struct {
	ln    net.Listener
	hello chan string
	wg    sync.WaitGroup
}

func startHelloCapture(t *testing.T) *helloCapture {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	must(t, err)
	hc := &helloCapture{ln: ln, hello: make(chan string, 1)}
	conf := &tls.Config{GetConfigForClient: func(h *tls.ClientHelloInfo) (*tls.Config, error) {
		hc.hello <- ja4.FromClientHello(h, ja4.TCP).Fingerprint()
		return nil, errors.New("hello captured")
	}}
	hc.wg.Go(func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			hc.wg.Go(func() {
				defer c.Close()
				c.SetDeadline(time.Now().Add(10 * time.Second))
				_ = tls.Server(c, conf).Handshake()
			})
		}
	})
	t.Cleanup(func() {
		ln.Close()
		hc.wg.Wait()
	})
	return hc
}

// fingerprint runs send, a client's attempt to reach the capture's
// address, and returns the JA4 of the hello it sent.
func (hc *helloCapture) fingerprint(t *testing.T, send func(addr string)) string {
	t.Helper()
	send(hc.ln.Addr().String())
	select {
	case fp := <-hc.hello:
		return fp
	case <-time.After(10 * time.Second):
		t.Fatal("no ClientHello reached the capture")
		return ""
	}
}

// ja4Client is a client of the JA4 tests: how it sends a request with
// X-JA4: forged to a TLS address, from a local address (127.0.0.1 unless
// set), and returns the body.
type ja4Client struct {
	name  string
	conf  *tls.Config // a Go client's settings; nil for curl
	local string      // the source address, "" for 127.0.0.1
}

// get sends the client's requests for https://api.example.com/ (curl:
// https://127.0.0.1/, so that it sends no SNI, as docs/tls.md's example),
// n of them one after the other on one new connection to addr, trusting
// ca (nil: trusting any certificate), and returns their bodies, joined by
// newlines. The first request of a connection is net/http's, the next may
// be the fast path's.
func (c ja4Client) get(addr string, ca *testCA, n int) (string, error) {
	if c.conf == nil {
		_, port, _ := net.SplitHostPort(addr)
		args := []string{"-sS", "--max-time", "10", "-H", "X-JA4: forged", "-w", "\n"}
		if ca != nil {
			args = append(args, "--cacert", ca.File)
		} else {
			args = append(args, "-k")
		}
		for range n {
			args = append(args, "https://127.0.0.1:"+port+"/")
		}
		out, err := exec.Command("curl", args...).CombinedOutput()
		if err != nil {
			return string(out), fmt.Errorf("curl: %v: %s", err, out)
		}
		return strings.TrimSuffix(string(out), "\n"), nil
	}
	conf := c.conf.Clone()
	if ca != nil {
		conf.RootCAs = ca.Pool
	} else {
		conf.InsecureSkipVerify = true
	}
	d := &net.Dialer{Timeout: 5 * time.Second}
	if c.local != "" {
		d.LocalAddr = &net.TCPAddr{IP: net.ParseIP(c.local)}
	}
	tr := &http.Transport{
		TLSClientConfig: conf,
		// A client offering h2 speaks it when edge chooses it
		// (tls.http2's default).
		ForceAttemptHTTP2: slices.Contains(conf.NextProtos, "h2"),
		MaxConnsPerHost:   1,
		DialContext: func(ctx context.Context, network, _ string) (net.Conn, error) {
			return d.DialContext(ctx, network, addr)
		},
	}
	defer tr.CloseIdleConnections()
	hc := &http.Client{Transport: tr, Timeout: 10 * time.Second}
	var bodies []string
	for range n {
		req, _ := http.NewRequest("GET", "https://api.example.com/", nil)
		req.Header.Set("X-JA4", "forged")
		resp, err := hc.Do(req)
		if err != nil {
			return strings.Join(bodies, "\n"), err
		}
		b, err := io.ReadAll(resp.Body)
		resp.Body.Close()
		bodies = append(bodies, string(b))
		if err == nil && resp.StatusCode != 200 {
			err = fmt.Errorf("status %d", resp.StatusCode)
		}
		if err != nil {
			return strings.Join(bodies, "\n"), err
		}
	}
	return strings.Join(bodies, "\n"), nil
}

// ja4Clients send different ClientHellos, but for default, again and
// curves, whose hellos differ only in the groups offered, which JA4 does
// not read (it hashes the extensions' types, not their contents), and
// other-address, which is default from another address. alpn and curl
// offer h2, and speak HTTP/2 to edge (tls.http2's default): the
// fingerprint reaches its HTTP/2 server too.
var ja4Clients = []ja4Client{
	{name: "default", conf: &tls.Config{}},
	{name: "again", conf: &tls.Config{}},
	{name: "curves", conf: &tls.Config{CurvePreferences: []tls.CurveID{tls.CurveP256}}},
	{name: "other-address", conf: &tls.Config{}, local: "127.0.0.2"},
	{name: "ciphers", conf: &tls.Config{CipherSuites: []uint16{tls.TLS_ECDHE_ECDSA_WITH_AES_128_GCM_SHA256}}},
	{name: "alpn", conf: &tls.Config{NextProtos: []string{"h2", "http/1.1"}}},
	{name: "tls12", conf: &tls.Config{MaxVersion: tls.VersionTLS12}},
	{name: "curl"},
}

// keyCount is previous+current of a key of a rule of api, from the admin
// API: the requests it counted (the period, an hour, is crossed at most
// once in a test); 0 for a key not tracked.
func keyCount(t *testing.T, admin, rule, key string) int64 {
	t.Helper()
	code, body := httpGet(t, "http://"+admin+"/v1/keys/api/"+rule+"/"+url.PathEscape(key))
	if code == http.StatusNotFound {
		return 0
	}
	var ks struct{ Previous, Current int64 }
	if err := json.Unmarshal([]byte(body), &ks); code != 200 || err != nil {
		t.Fatalf("GET /v1/keys/api/%s/%s: %d %s", rule, key, code, body)
	}
	return ks.Previous + ks.Current
}

// topKeys are the key texts of a rule of api's top talkers.
func topKeys(t *testing.T, admin, rule string) []string {
	t.Helper()
	code, body := httpGet(t, "http://"+admin+"/v1/top/api/"+rule)
	var top []struct{ Key string }
	if err := json.Unmarshal([]byte(body), &top); code != 200 || err != nil {
		t.Fatalf("GET /v1/top/api/%s: %d %s", rule, code, body)
	}
	var out []string
	for _, k := range top {
		out = append(out, k.Key)
	}
	return out
}

// TestJA4EndToEnd: on both request paths, a rule keyed by ja4 counts the
// clients whose ClientHellos have one JA4 together (whatever their
// address) and the others apart, and one keyed by [ip, ja4] also parts
// addresses; the origin receives in X-JA4 what internal/ja4 computes from
// the client's hello, captured apart from edge, and never a client's own
// X-JA4; a plain request is keyed by its client, as a missing header is,
// and reaches the origin without X-JA4; the admin API shows the keys as
// rules.KeyText writes them.
func TestJA4EndToEnd(t *testing.T) {
	if _, err := exec.LookPath("curl"); err != nil {
		t.Skip("curl is not installed")
	}
	if ln, err := net.Listen("tcp", "127.0.0.2:0"); err != nil {
		t.Skipf("no loopback address 127.0.0.2 (%v): a second client address is needed", err)
	} else {
		ln.Close()
	}
	capture := startHelloCapture(t)
	fps := map[string]string{}
	for _, c := range ja4Clients {
		fps[c.name] = capture.fingerprint(t, func(addr string) { c.get(addr, nil, 1) })
	}
	// The premise: which hellos share a JA4.
	for _, name := range []string{"again", "curves", "other-address"} {
		if fps[name] != fps["default"] {
			t.Fatalf("%s's JA4 %s, want default's %s", name, fps[name], fps["default"])
		}
	}
	distinct := []string{fps["default"], fps["ciphers"], fps["alpn"], fps["tls12"], fps["curl"]}
	if s := slices.Compact(slices.Sorted(slices.Values(distinct))); len(s) != len(distinct) {
		t.Fatalf("JA4s %q, want default, ciphers, alpn, tls12 and curl all different", distinct)
	}
	checkDocumentedCurl(t, fps["curl"])

	origin := ja4Origin(t).URL
	for _, fast := range []bool{true, false} {
		t.Run(fmt.Sprintf("fastpath %v", fast), func(t *testing.T) {
			e := startTLSEdge(t, ja4Config(origin, fast))
			for _, c := range ja4Clients {
				body, err := c.get(e.tls, e.ca, 2)
				one := fmt.Sprintf("ja4=[%q] proto=https", fps[c.name])
				if want := one + "\n" + one; err != nil || body != want {
					t.Errorf("%s: the origin received %q (%v), want %s twice", c.name, body, err, one)
				}
			}
			// Plain HTTP, with a client's X-JA4 in two spellings, twice
			// on one connection.
			c, err := net.Dial("tcp", e.public)
			must(t, err)
			br := bufio.NewReader(c)
			for range 2 {
				fmt.Fprint(c, "GET / HTTP/1.1\r\nHost: api.example.com\r\nX-JA4: forged\r\nx-ja4: forged too\r\n\r\n")
				resp, err := http.ReadResponse(br, nil)
				must(t, err)
				body, _ := io.ReadAll(resp.Body)
				if resp.StatusCode != 200 || string(body) != `ja4=[] proto=http` {
					t.Errorf("plain HTTP: %d %q, want 200 and no X-JA4 at the origin", resp.StatusCode, body)
				}
			}
			c.Close()
			def := fps["default"]
			counts := []struct {
				rule, key string
				want      int64
			}{
				{"by-ja4", def, 8}, // default, again, curves, other-address
				{"by-ja4", fps["ciphers"], 2},
				{"by-ja4", fps["alpn"], 2},
				{"by-ja4", fps["tls12"], 2},
				{"by-ja4", fps["curl"], 2},
				{"by-ja4", "-127.0.0.1", 2}, // the plain requests
				{"by-ip-ja4", "127.0.0.1|" + def, 6},
				{"by-ip-ja4", "127.0.0.2|" + def, 2},
				{"by-ip-ja4", "127.0.0.1|" + fps["curl"], 2},
				{"by-ip-ja4", "127.0.0.1|-127.0.0.1", 2},
			}
			for _, c := range counts {
				if got := keyCount(t, e.admin, c.rule, c.key); got != c.want {
					t.Errorf("%s key %s counted %d requests, want %d", c.rule, c.key, got, c.want)
				}
			}
			// Top talkers: keys at half their limit or more.
			if got := topKeys(t, e.admin, "by-ja4"); !slices.Equal(got, []string{def}) {
				t.Errorf("by-ja4's top talkers %q, want [%s]", got, def)
			}
			if got := topKeys(t, e.admin, "by-ip-ja4"); !slices.Equal(got, []string{"127.0.0.1|" + def}) {
				t.Errorf("by-ip-ja4's top talkers %q, want [127.0.0.1|%s]", got, def)
			}
		})
	}
}

// checkDocumentedCurl checks docs/tls.md's example, curl 7.88.1 on
// OpenSSL 3.0 to an address, against fp, the local curl's JA4 doing that,
// when the local curl is that one.
func checkDocumentedCurl(t *testing.T, fp string) {
	t.Helper()
	out, err := exec.Command("curl", "--version").Output()
	if err != nil || !strings.HasPrefix(string(out), "curl 7.88.1 ") || !strings.Contains(string(out), " OpenSSL/3.0.") {
		t.Logf("curl is not 7.88.1 on OpenSSL 3.0 (%.60q): docs/tls.md's example not checked", out)
		return
	}
	doc, err := os.ReadFile("../../docs/tls.md")
	must(t, err)
	text := strings.Join(strings.Fields(string(doc)), " ") // as read, whatever the line breaks
	if want := "curl 7.88.1 on OpenSSL 3.0, connecting to an address rather than a name, sends `" + fp + "`"; !strings.Contains(text, want) {
		t.Errorf("docs/tls.md does not say that curl 7.88.1 sends %s, which it sent", fp)
	}
}
