package main

import (
	"bufio"
	"bytes"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/edgerate/edge/rules"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"
)

// TestEndToEndCheck runs the built binary with a check listener and a
// token: a question without the token is refused, a client gets its limit
// and then 429 with Retry-After, the public listener does not serve the
// check-only domain, the answers are counted by answer, and SIGTERM stops
// edge cleanly with the check listener open.
func TestEndToEndCheck(t *testing.T) {
	bin := buildEdge(t)
	cfgPath := filepath.Join(t.TempDir(), "edge.yaml")
	must(t, os.WriteFile(cfgPath, []byte(fmt.Sprintf(`
listen: %q
admin_listen: %q
check: {listen: "127.0.0.1:0", token: "e2e-token"}
client_ip: {trusted_proxies: ["127.0.0.1"]}
domains:
  - hosts: ["api.example.com"]
    serve: check
    rules: [{name: per-ip, limit: 2, period: 720h, headers: always}]
`, publicAnyPort, adminAnyPort)), 0o644))
	e := startBinary(t, bin, cfgPath)
	e.stderr.mu.Lock()
	check := e.stderr.check
	e.stderr.mu.Unlock()
	if check == "" {
		t.Fatalf("no check_listen in the start line; log:\n%s", e.stderr)
	}

	ask := func(token string) *http.Response {
		req, err := http.NewRequest("GET", "http://"+check+"/", nil)
		must(t, err)
		req.Header.Set("X-Forwarded-Method", "GET")
		req.Header.Set("X-Forwarded-Uri", "/v1/items")
		req.Header.Set("X-Forwarded-Host", "api.example.com")
		req.Header.Set("X-Forwarded-For", "203.0.113.7")
		if token != "" {
			req.Header.Set(rules.CheckTokenHeader, token)
		}
		c := &http.Client{Timeout: 10 * time.Second}
		resp, err := c.Do(req)
		must(t, err)
		io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		return resp
	}
	if resp := ask("wrong"); resp.StatusCode != 429 {
		t.Errorf("wrong token: status %d, want 429 (deny_status)", resp.StatusCode)
	}
	for i, want := range []int{200, 200, 429} {
		resp := ask("e2e-token")
		if resp.StatusCode != want {
			t.Fatalf("question %d: status %d, want %d", i, resp.StatusCode, want)
		}
		if resp.Header.Get("RateLimit-Policy") != `"per-ip";q=2;w=2592000` {
			t.Errorf("question %d: RateLimit-Policy %q", i, resp.Header.Get("RateLimit-Policy"))
		}
		if want == 429 && resp.Header.Get("Retry-After") == "" {
			t.Error("refusal without Retry-After")
		}
	}

	req, err := http.NewRequest("GET", "http://"+e.public+"/", nil)
	must(t, err)
	req.Host = "api.example.com"
	resp, err := http.DefaultClient.Do(req)
	must(t, err)
	resp.Body.Close()
	if resp.StatusCode != http.StatusMisdirectedRequest {
		t.Errorf("check-only domain on the public listener: status %d, want 421", resp.StatusCode)
	}

	// The check listener has its own framing guard: an ambiguous body
	// framing is refused before any handler.
	conn, err := net.DialTimeout("tcp", check, 5*time.Second)
	must(t, err)
	conn.SetDeadline(time.Now().Add(10 * time.Second))
	io.WriteString(conn, "GET / HTTP/1.1\r\nHost: x\r\nContent-Length: 1\r\nTransfer-Encoding: chunked\r\n\r\n0\r\n\r\n")
	line, _ := bufio.NewReader(conn).ReadString('\n')
	conn.Close()
	if !strings.HasPrefix(line, "HTTP/1.1 400 ") {
		t.Errorf("Transfer-Encoding with Content-Length: got %q, want 400", line)
	}

	mresp, err := http.Get("http://" + e.admin + "/metrics")
	must(t, err)
	parser := expfmt.NewTextParser(model.UTF8Validation)
	families, err := parser.TextToMetricFamilies(mresp.Body)
	mresp.Body.Close()
	must(t, err)
	got := map[string]float64{}
	for _, m := range families["edge_check_answers_total"].GetMetric() {
		for _, l := range m.GetLabel() {
			if l.GetName() == "answer" {
				got[l.GetValue()] = m.GetCounter().GetValue()
			}
		}
	}
	for answer, want := range map[string]float64{"allowed": 2, "refused": 1, "unauthorized": 1} {
		if got[answer] != want {
			t.Errorf(`edge_check_answers_total{answer=%q} = %v, want %v`, answer, got[answer], want)
		}
	}
	e.stop(t)
}

// TestWarnIfCheckExposed: edge warns about a check listener beyond
// loopback without a token, and only then.
func TestWarnIfCheckExposed(t *testing.T) {
	for _, tt := range []struct {
		name, listen, token string
		warn                bool
	}{
		{"loopback", "127.0.0.1:8082", "", false},
		{"localhost", "localhost:8082", "", false},
		{"every address without token", ":8082", "", true},
		{"private address without token", "10.0.0.5:8082", "", true},
		{"every address with token", ":8082", "t", false},
	} {
		t.Run(tt.name, func(t *testing.T) {
			var buf bytes.Buffer
			warnIfCheckExposed(slog.New(slog.NewTextHandler(&buf, nil)),
				&rules.Table{Check: &rules.Check{Listen: tt.listen, Token: tt.token}})
			if got := strings.Contains(buf.String(), "check listener is not on loopback"); got != tt.warn {
				t.Errorf("warned %v, want %v; log %q", got, tt.warn, buf.String())
			}
		})
	}
}

// TestCheckTokenFromEnvironment: EDGE_CHECK_TOKEN sets the check
// listener's token, over the file's, at every load (start and reload read
// the configuration through parseConfig), and the check listener then
// takes that token only; without a check section it gives check.token as
// the file would, and check.listen is then missing.
func TestCheckTokenFromEnvironment(t *testing.T) {
	const base = "check: {listen: \"127.0.0.1:0\"TOKEN}\ndomains:\n  - hosts: [api.example.com]\n    serve: check\n    rules: [{name: per-ip, limit: 2, period: 1m}]\n"
	for _, tt := range []struct {
		name, env, file, want string
	}{
		{"environment alone", "from-env", "", "from-env"},
		{"environment over the file", "from-env", "from-file", "from-env"},
		{"file alone", "", "from-file", "from-file"},
		{"neither", "", "", ""},
	} {
		t.Run(tt.name, func(t *testing.T) {
			t.Setenv("EDGE_CHECK_TOKEN", tt.env)
			token := ""
			if tt.file != "" {
				token = ", token: " + tt.file
			}
			table, err := parseConfig([]byte(strings.Replace(base, "TOKEN", token, 1)))
			if err != nil {
				t.Fatal(err)
			}
			if table.Check.Token != tt.want {
				t.Errorf("check token %q, want %q", table.Check.Token, tt.want)
			}
		})
	}
	t.Setenv("EDGE_CHECK_TOKEN", "from-env")
	_, err := parseConfig([]byte("origin: http://127.0.0.1:9\ndomains: [{hosts: [a.example], rules: [{name: r, limit: 1, period: 1m}]}]\n"))
	want := "check.listen: required with the check section (host:port); the file has no check section, EDGE_CHECK_TOKEN gives it"
	if err == nil || err.Error() != want {
		t.Errorf("no check section in the file: got %v, want %q", err, want)
	}
}
