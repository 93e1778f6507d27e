package main

import (
	"bufio"
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/edgerate/edge/internal/wait"
)

// nginxCombined is nginx's combined line, strictly: every field present,
// a quoted field holding only printable ASCII but for a quote or a
// backslash, which appear as nginx's \xHH escapes.
var nginxCombined = regexp.MustCompile(`^(\S+) - - \[(\d{2}/[A-Z][a-z]{2}/\d{4}:\d{2}:\d{2}:\d{2} [+-]\d{4})\] "((?:[ !#-\[\]-~]|\\x[0-9A-F]{2})*)" (\d{3}) (\d+) "((?:[ !#-\[\]-~]|\\x[0-9A-F]{2})*)" "((?:[ !#-\[\]-~]|\\x[0-9A-F]{2})*)"$`)

// accessLogConfig serves api.test (a rule of 2 requests an hour per
// client) from origin, and quiet.test (not logged), with an access log at
// path in format.
func accessLogConfig(origin, path, format string) string {
	return fmt.Sprintf(`
listen: %q
admin_listen: %q
origin: %s
client_ip: {trusted_proxies: ["127.0.0.0/8"]}
access_log: {path: %q, format: %s, keys: %v}
domains:
  - name: api
    hosts: [api.test]
    rules:
      - {name: per-ip, limit: 2, period: 1h, key: [ip]}
  - name: quiet
    hosts: [quiet.test]
    access_log: false
    respond: {body: "ok"}
`, publicAnyPort, adminAnyPort, origin, path, format, format == "json")
}

func accessOrigin(t *testing.T) *httptest.Server {
	o := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		io.WriteString(w, "hello from the origin\n")
	}))
	t.Cleanup(o.Close)
	return o
}

// rawRequest sends head (the request line and fields, without the empty
// line) on a connection of its own and returns the status.
func rawRequest(t *testing.T, addr, head string) int {
	t.Helper()
	c, err := net.DialTimeout("tcp", addr, 5*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	c.SetDeadline(time.Now().Add(10 * time.Second))
	if _, err := io.WriteString(c, head+"\r\nConnection: close\r\n\r\n"); err != nil {
		t.Fatal(err)
	}
	resp, err := http.ReadResponse(bufio.NewReader(c), nil)
	if err != nil {
		t.Fatalf("%q: %v", head, err)
	}
	io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	return resp.StatusCode
}

// accessRequests are what the access log tests send to api.test and
// around it, with the statuses edge answers them.
var accessRequests = []struct {
	head   string
	status int
	logged bool
}{
	{"GET /a HTTP/1.1\r\nHost: api.test\r\nReferer: https://r.example/?q=\"x\"\r\nUser-Agent: ua \"quoted\" \\ \xff\xfe", 200, true},
	{"GET /b?x=%22y%22&z=\"w\" HTTP/1.1\r\nHost: api.test\r\nX-Forwarded-For: 203.0.113.7", 200, true},
	{"GET /c HTTP/1.1\r\nHost: api.test", 200, true},
	{"GET /d HTTP/1.1\r\nHost: api.test\r\nAccept: application/json", 429, true},
	{"HEAD /e HTTP/1.1\r\nHost: api.test", 429, true},
	{"GET /f HTTP/1.1\r\nHost: nobody.test", 421, true},
	{"GET /g HTTP/1.1\r\nHost: quiet.test", 200, false},
	{"POST /h HTTP/1.1\r\nHost: api.test\r\nContent-Length: 3\r\n\r\nabc", 429, true},
}

// sendAccessRequests sends accessRequests to e and returns how many lines
// they make.
func sendAccessRequests(t *testing.T, e *edgeUnderTest) int {
	t.Helper()
	n := 0
	for _, r := range accessRequests {
		head := r.head
		if i := strings.Index(head, "\r\n\r\n"); i >= 0 { // a body: its fields first
			head = head[:i] + "\r\nConnection: close\r\n\r\n" + head[i+4:]
			c, err := net.Dial("tcp", e.public)
			if err != nil {
				t.Fatal(err)
			}
			io.WriteString(c, head)
			resp, err := http.ReadResponse(bufio.NewReader(c), nil)
			if err != nil {
				t.Fatal(err)
			}
			if resp.StatusCode != r.status {
				t.Errorf("%q: got %d, want %d", r.head, resp.StatusCode, r.status)
			}
			resp.Body.Close()
			c.Close()
		} else if got := rawRequest(t, e.public, head); got != r.status {
			t.Errorf("%q: got %d, want %d", r.head, got, r.status)
		}
		if r.logged {
			n++
		}
	}
	return n
}

func startAccessEdge(t *testing.T, cfg string) (*edgeUnderTest, string) {
	t.Helper()
	path := filepath.Join(t.TempDir(), "edge.yaml")
	must(t, os.WriteFile(path, []byte(cfg), 0o644))
	return startEdge(t, path), path
}

func fileLines(t *testing.T, path string) []string {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil && !os.IsNotExist(err) {
		t.Fatal(err)
	}
	s := strings.TrimSuffix(string(b), "\n")
	if s == "" {
		return nil
	}
	return strings.Split(s, "\n")
}

// TestAccessLogCombined: real requests, quotes and invalid UTF-8 in their
// fields, refused, misdirected and HEAD ones among them, give one line
// each (none for the domain with access_log: false), all written out at
// shutdown; every line matches nginx's combined format strictly, and
// goaccess (--log-format=COMBINED) reads every one as valid.
func TestAccessLogCombined(t *testing.T) {
	logPath := filepath.Join(t.TempDir(), "access.log")
	e, _ := startAccessEdge(t, accessLogConfig(accessOrigin(t).URL, logPath, "combined"))
	want := sendAccessRequests(t, e)
	if code := e.stop(); code != 0 { // shutdown writes out what the buffer holds
		t.Fatalf("exit code %d", code)
	}
	lines := fileLines(t, logPath)
	if len(lines) != want {
		t.Fatalf("got %d lines, want %d:\n%s", len(lines), want, strings.Join(lines, "\n"))
	}
	wantParts := []struct{ addr, request, status, bytes, referer, ua string }{
		{"127.0.0.1", "GET /a HTTP/1.1", "200", "22", `https://r.example/?q=\x22x\x22`, `ua \x22quoted\x22 \x5C \xFF\xFE`},
		{"203.0.113.7", `GET /b?x=%22y%22&z=\x22w\x22 HTTP/1.1`, "200", "22", "-", "-"},
		{"127.0.0.1", "GET /c HTTP/1.1", "200", "22", "-", "-"},
		{"127.0.0.1", "GET /d HTTP/1.1", "429", "", "-", "-"},
		{"127.0.0.1", "HEAD /e HTTP/1.1", "429", "0", "-", "-"},
		{"127.0.0.1", "GET /f HTTP/1.1", "421", "", "-", "-"},
		{"127.0.0.1", "POST /h HTTP/1.1", "429", "", "-", "-"},
	}
	for i, line := range lines {
		m := nginxCombined.FindStringSubmatch(line)
		if m == nil {
			t.Errorf("line %d is not nginx's combined format: %q", i+1, line)
			continue
		}
		w := wantParts[i]
		if m[1] != w.addr || m[3] != w.request || m[4] != w.status || w.bytes != "" && m[5] != w.bytes || m[6] != w.referer || m[7] != w.ua {
			t.Errorf("line %d: got %q\nwant addr %s, request %q, status %s, bytes %s, referer %q, user agent %q", i+1, line, w.addr, w.request, w.status, w.bytes, w.referer, w.ua)
		}
	}
	goaccessReads(t, logPath, len(lines))
}

// goaccessReads checks that goaccess reads every one of the n lines of
// the combined log at path as valid.
func goaccessReads(t *testing.T, path string, n int) {
	t.Helper()
	bin, err := exec.LookPath("goaccess")
	if err != nil {
		if os.Getenv("CI") != "" {
			t.Fatal("goaccess not installed (.ci/run installs it)")
		}
		t.Skip("goaccess not installed (Debian package goaccess)")
	}
	report := filepath.Join(t.TempDir(), "report.json")
	out, err := exec.Command(bin, path, "--log-format=COMBINED", "--no-global-config", "-o", report).CombinedOutput()
	if err != nil {
		t.Fatalf("goaccess: %v\n%s", err, out)
	}
	b, err := os.ReadFile(report)
	if err != nil {
		t.Fatal(err)
	}
	var r struct {
		General struct {
			Total   int `json:"total_requests"`
			Valid   int `json:"valid_requests"`
			Invalid int `json:"failed_requests"`
		} `json:"general"`
	}
	if err := json.Unmarshal(b, &r); err != nil {
		t.Fatalf("goaccess's report: %v", err)
	}
	if r.General.Invalid != 0 || r.General.Valid != n {
		t.Errorf("goaccess: %d valid and %d invalid of %d lines, want all %d valid", r.General.Valid, r.General.Invalid, r.General.Total, n)
	}
}

// accessJSONLine is edge's JSON line, every field.
type accessJSONLine struct {
	Time         string   `json:"time"`
	Peer         string   `json:"peer"`
	Client       string   `json:"client"`
	Host         string   `json:"host"`
	Method       string   `json:"method"`
	Target       string   `json:"target"`
	Proto        string   `json:"proto"`
	Status       int      `json:"status"`
	Bytes        int64    `json:"bytes"`
	DurationMS   *float64 `json:"duration_ms"`
	Domain       *string  `json:"domain"`
	Origin       string   `json:"origin"`
	OriginStatus int      `json:"origin_status"`
	OriginMS     *float64 `json:"origin_ms"`
	Attempts     int      `json:"attempts"`
	Referer      *string  `json:"referer"`
	UserAgent    *string  `json:"user_agent"`
	Outcome      string   `json:"outcome"`
	QueuedMS     float64  `json:"queued_ms"`
	Rules        []struct {
		Name      string `json:"name"`
		Outcome   string `json:"outcome"`
		Limit     int64  `json:"limit"`
		Remaining int64  `json:"remaining"`
		Key       string `json:"key"`
	} `json:"rules"`
	RefusedBy string `json:"refused_by"`
	Sample    int    `json:"sample"`
}

// TestAccessLogJSON: the JSON lines of real requests, read by
// encoding/json with unknown fields refused, field by field.
func TestAccessLogJSON(t *testing.T) {
	origin := accessOrigin(t)
	logPath := filepath.Join(t.TempDir(), "access.log")
	e, _ := startAccessEdge(t, accessLogConfig(origin.URL, logPath, "json"))
	start := time.Now().UTC().Truncate(time.Millisecond)
	want := sendAccessRequests(t, e)
	end := time.Now().UTC()
	if code := e.stop(); code != 0 {
		t.Fatalf("exit code %d", code)
	}
	lines := fileLines(t, logPath)
	if len(lines) != want {
		t.Fatalf("got %d lines, want %d:\n%s", len(lines), want, strings.Join(lines, "\n"))
	}
	var got []accessJSONLine
	for i, line := range lines {
		dec := json.NewDecoder(strings.NewReader(line))
		dec.DisallowUnknownFields()
		var l accessJSONLine
		if err := dec.Decode(&l); err != nil {
			t.Fatalf("line %d: %v\n%s", i+1, err, line)
		}
		tm, err := time.Parse("2006-01-02T15:04:05.000Z", l.Time)
		if err != nil || tm.Before(start) || tm.After(end) {
			t.Errorf("line %d: time %q, want RFC 3339 with milliseconds, UTC, between %v and %v", i+1, l.Time, start, end)
		}
		if l.DurationMS == nil || *l.DurationMS < 0 || l.Domain == nil || l.Referer == nil || l.UserAgent == nil || l.Rules == nil {
			t.Errorf("line %d: a field always written is missing: %s", i+1, line)
		}
		if l.Peer != "127.0.0.1" || l.Proto != "HTTP/1.1" {
			t.Errorf("line %d: peer %q proto %q, want 127.0.0.1 HTTP/1.1", i+1, l.Peer, l.Proto)
		}
		got = append(got, l)
	}
	served := func(i int, target, client string) {
		t.Helper()
		l := got[i]
		if l.Method != "GET" || l.Target != target || l.Host != "api.test" || l.Client != client || l.Status != 200 || l.Bytes != 22 ||
			*l.Domain != "api" || l.Outcome != "served" || l.RefusedBy != "" || l.Sample != 0 {
			t.Errorf("line %d: %+v, want GET %s by %s served 200 with 22 bytes", i+1, l, target, client)
		}
		if l.Origin != origin.URL || l.OriginStatus != 200 || l.OriginMS == nil || *l.OriginMS < 0 || l.Attempts != 1 {
			t.Errorf("line %d: origin %q %d %v attempts %d, want %s 200 after some time, 1 attempt", i+1, l.Origin, l.OriginStatus, l.OriginMS, l.Attempts, origin.URL)
		}
	}
	served(0, "/a", "127.0.0.1")
	if *got[0].Referer != `https://r.example/?q="x"` || *got[0].UserAgent != "ua \"quoted\" \\ \ufffd\ufffd" {
		t.Errorf("line 1: referer %q user agent %q", *got[0].Referer, *got[0].UserAgent)
	}
	served(1, `/b?x=%22y%22&z="w"`, "203.0.113.7")
	served(2, "/c", "127.0.0.1")
	type rule struct {
		name, outcome, key string
		limit, remaining   int64
	}
	rulesOf := func(l accessJSONLine) []rule {
		var rs []rule
		for _, r := range l.Rules {
			rs = append(rs, rule{r.Name, r.Outcome, r.Key, r.Limit, r.Remaining})
		}
		return rs
	}
	if rs := rulesOf(got[0]); len(rs) != 1 || rs[0] != (rule{"per-ip", "allowed", "127.0.0.1", 2, 1}) {
		t.Errorf("line 1 rules: got %+v, want per-ip allowed, 1 remaining, key 127.0.0.1", rs)
	}
	if rs := rulesOf(got[1]); len(rs) != 1 || rs[0] != (rule{"per-ip", "allowed", "203.0.113.7", 2, 1}) {
		t.Errorf("line 2 rules: got %+v, want per-ip allowed for 203.0.113.7", rs)
	}
	for i, method := range map[int]string{3: "GET", 4: "HEAD", 6: "POST"} {
		l := got[i]
		if l.Method != method || l.Status != 429 || l.Outcome != "blocked" || l.RefusedBy != "per-ip" || l.Attempts != 0 || l.Origin != "" {
			t.Errorf("line %d: %+v, want %s refused 429 by per-ip, not forwarded", i+1, l, method)
		}
		if rs := rulesOf(l); len(rs) != 1 || rs[0] != (rule{"per-ip", "limited", "127.0.0.1", 2, 0}) {
			t.Errorf("line %d rules: got %+v, want per-ip limited", i+1, rs)
		}
		if (method == "HEAD") != (l.Bytes == 0) {
			t.Errorf("line %d: %s with %d bytes", i+1, method, l.Bytes)
		}
	}
	if l := got[5]; l.Status != 421 || l.Outcome != "misdirected" || *l.Domain != "" || len(l.Rules) != 0 {
		t.Errorf("line 6: %+v, want 421 misdirected, no domain, no rules", l)
	}
}

// catchUSR1 keeps SIGUSR1 from ending the test process before edge's
// reloader listens for it (signal.Notify: a signal with a channel has no
// default action).
func catchUSR1(t *testing.T) {
	c := make(chan os.Signal, 1)
	signal.Notify(c, syscall.SIGUSR1)
	t.Cleanup(func() { signal.Stop(c) })
}

// TestAccessLogReopen: after logrotate's rename and SIGUSR1, the old file
// gets no new line and the new one every later one.
func TestAccessLogReopen(t *testing.T) {
	catchUSR1(t)
	dir := t.TempDir()
	logPath, rotated := filepath.Join(dir, "access.log"), filepath.Join(dir, "access.log.1")
	e, _ := startAccessEdge(t, accessLogConfig(accessOrigin(t).URL, logPath, "combined"))
	if got := rawRequest(t, e.public, "GET /before HTTP/1.1\r\nHost: api.test"); got != 200 {
		t.Fatalf("got %d", got)
	}
	wait.For(t, 5*time.Second, "the first line written", func() bool { return len(fileLines(t, logPath)) == 1 })
	must(t, os.Rename(logPath, rotated))
	must(t, syscall.Kill(os.Getpid(), syscall.SIGUSR1))
	wait.For(t, 5*time.Second, "the file reopened", func() bool { _, err := os.Stat(logPath); return err == nil })
	for _, p := range []string{"/after1", "/after2"} {
		rawRequest(t, e.public, "GET "+p+" HTTP/1.1\r\nHost: api.test")
	}
	if code := e.stop(); code != 0 {
		t.Fatalf("exit code %d", code)
	}
	old, cur := fileLines(t, rotated), fileLines(t, logPath)
	if len(old) != 1 || !strings.Contains(old[0], "/before") {
		t.Errorf("rotated file: got %q, want the one line before the signal", old)
	}
	if len(cur) != 2 || !strings.Contains(cur[0], "/after1") || !strings.Contains(cur[1], "/after2") {
		t.Errorf("new file: got %q, want the two lines after the signal", cur)
	}
}

// TestAccessLogDiskFull: with /dev/full as the path edge keeps serving;
// the failures are counted, and logged at most once a second.
func TestAccessLogDiskFull(t *testing.T) {
	if _, err := os.Stat("/dev/full"); err != nil {
		t.Skip("no /dev/full")
	}
	e, _ := startAccessEdge(t, accessLogConfig(accessOrigin(t).URL, "/dev/full", "json"))
	start := time.Now()
	for i := range 6 {
		if got := rawRequest(t, e.public, "GET / HTTP/1.1\r\nHost: api.test\r\nX-Forwarded-For: 192.0.2."+fmt.Sprint(i+1)); got != 200 {
			t.Errorf("request %d: got %d, want 200: edge keeps serving", i, got)
		}
		time.Sleep(400 * time.Millisecond) // the writer writes at least once a second
	}
	var failed float64
	wait.For(t, 5*time.Second, "failed writes counted", func() bool {
		_, body := e.adminGet("/metrics")
		m := regexp.MustCompile(`(?m)^edge_access_log_write_errors_total\{[^}]*\} (\S+)$`).FindStringSubmatch(body)
		if m == nil {
			return false
		}
		_, err := fmt.Sscan(m[1], &failed)
		return err == nil && failed >= 2
	})
	elapsed := time.Since(start)
	if n := strings.Count(e.log.String(), "access log write failed"); n < 1 || float64(n) > elapsed.Seconds()+1 {
		t.Errorf("%d failures logged in %v, want at least one, at most one a second", n, elapsed)
	}
	if code := e.stop(); code != 0 {
		t.Fatalf("exit code %d", code)
	}
}

// TestAccessLogReloadSwitches: a reload that changes path and format
// while requests flow loses no line: every answered request is in the
// old file or the new one, in the old format or the new.
func TestAccessLogReloadSwitches(t *testing.T) {
	origin := accessOrigin(t)
	dir := t.TempDir()
	a, b := filepath.Join(dir, "a.log"), filepath.Join(dir, "b.log")
	cfg := strings.Replace(accessLogConfig(origin.URL, a, "combined"), "limit: 2,", "limit: 1000000,", 1)
	e, cfgPath := startAccessEdge(t, cfg)
	hash := loadedHash(t, e)
	var mu sync.Mutex
	answered := 0
	stop := make(chan struct{})
	var wg sync.WaitGroup
	for range 2 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			client := &http.Client{Transport: &http.Transport{}}
			defer client.CloseIdleConnections()
			for {
				select {
				case <-stop:
					return
				default:
				}
				req, _ := http.NewRequest("GET", "http://"+e.public+"/x", nil)
				req.Host = "api.test"
				resp, err := client.Do(req)
				if err != nil {
					continue
				}
				io.Copy(io.Discard, resp.Body)
				resp.Body.Close()
				mu.Lock()
				answered++
				mu.Unlock()
			}
		}()
	}
	time.Sleep(300 * time.Millisecond)
	must(t, os.WriteFile(cfgPath, []byte(strings.Replace(accessLogConfig(origin.URL, b, "json"), "limit: 2,", "limit: 1000000,", 1)), 0o644))
	must(t, syscall.Kill(os.Getpid(), syscall.SIGHUP))
	wait.For(t, 10*time.Second, "the reload", func() bool { return loadedHash(t, e) != hash })
	time.Sleep(300 * time.Millisecond)
	close(stop)
	wg.Wait()
	if code := e.stop(); code != 0 {
		t.Fatalf("exit code %d", code)
	}
	la, lb := fileLines(t, a), fileLines(t, b)
	if len(la)+len(lb) != answered || len(la) == 0 || len(lb) == 0 {
		t.Errorf("%d lines in the old file and %d in the new, want %d together, some in each", len(la), len(lb), answered)
	}
	for _, l := range la {
		if !nginxCombined.MatchString(l) {
			t.Fatalf("old file: %q is not a combined line", l)
		}
	}
	json := 0
	for _, l := range lb {
		if bytes.HasPrefix([]byte(l), []byte("{")) {
			json++
		}
	}
	if json == 0 {
		t.Errorf("the new file has no JSON line")
	}
}

// replayConfig is a configuration whose rules replay can key from a line
// (the client, the client and path) and one it can only with
// access_log.keys (a header), in front of origin, logging to path.
func replayConfig(origin, path string, keys bool) string {
	return fmt.Sprintf(`
listen: %q
admin_listen: %q
origin: %s
client_ip: {trusted_proxies: ["127.0.0.0/8"]}
access_log: {path: %q, format: json, keys: %v}
domains:
  - name: api
    hosts: [api.test]
    rules:
      - {name: per-ip, limit: 5, period: 1h, key: [ip]}
      - {name: per-path, limit: 2, period: 1h, key: [ip, path], match: {path_prefix: /items/}}
      - {name: per-token, limit: 3, period: 1h, key: ["header:X-Api-Key"], count_blocked: true}
      - {name: watch, limit: 1, period: 1h, key: [ip], action: log}
`, publicAnyPort, adminAnyPort, origin, path, keys)
}

// TestReplayAgreesWithAccessLog: the round trip README's replay section
// shows. edge serves requests and logs them as JSON; edge replay with the
// same configuration (the local store) reads the log back and agrees with
// every decision logged live, whether the lines record keys or not (then
// the header-keyed rule is skipped, with the reason); -suggest reads it
// too.
func TestReplayAgreesWithAccessLog(t *testing.T) {
	origin := accessOrigin(t)
	for _, keys := range []bool{false, true} {
		t.Run(fmt.Sprintf("keys=%v", keys), func(t *testing.T) {
			dir := t.TempDir()
			logPath := filepath.Join(dir, "access.log")
			e, cfgPath := startAccessEdge(t, replayConfig(origin.URL, logPath, keys))
			refused := 0
			for i := range 40 {
				client := fmt.Sprintf("198.51.100.%d", 1+i%3)
				target := fmt.Sprintf("/items/%d", i%4)
				if i%5 == 0 {
					target = "/other"
				}
				head := fmt.Sprintf("GET %s HTTP/1.1\r\nHost: api.test\r\nX-Forwarded-For: %s\r\nX-Api-Key: k%d", target, client, i%2)
				if rawRequest(t, e.public, head) == 429 {
					refused++
				}
			}
			if code := e.stop(); code != 0 {
				t.Fatalf("exit code %d", code)
			}
			if refused == 0 || refused == 40 {
				t.Fatalf("%d of 40 refused: want some of each", refused)
			}
			code, out, errOut := runEdge("replay", "-config", cfgPath, "-json", logPath)
			if code != 0 {
				t.Fatalf("replay: exit %d\n%s", code, errOut)
			}
			var doc struct {
				Agreement *struct {
					Lines     int     `json:"lines"`
					Decisions float64 `json:"decisions"`
					Ratio     float64 `json:"agreement"`
					Rules     []struct {
						Rule      string  `json:"rule"`
						Decisions float64 `json:"decisions"`
						Agreed    float64 `json:"agreed"`
					} `json:"rules"`
					Skips []struct{ Rule, Reason string } `json:"skipped"`
				} `json:"agreement"`
			}
			if err := json.Unmarshal([]byte(out), &doc); err != nil {
				t.Fatalf("%v\n%s", err, out)
			}
			a := doc.Agreement
			if a == nil {
				t.Fatalf("no agreement reported:\n%s", out)
			}
			if a.Lines != 40 || a.Ratio != 1 {
				t.Errorf("agreement %v on %d lines, want 100%% on 40:\n%s", a.Ratio, a.Lines, out)
			}
			wantRules := 4
			if !keys {
				wantRules = 3
				if len(a.Skips) != 1 || a.Skips[0].Rule != "api/per-token" || !strings.Contains(a.Skips[0].Reason, "header") {
					t.Errorf("skips %+v, want api/per-token, keyed by a header", a.Skips)
				}
			} else if len(a.Skips) != 0 {
				t.Errorf("skips %+v, want none with keys", a.Skips)
			}
			if len(a.Rules) != wantRules {
				t.Errorf("rules compared %+v, want %d", a.Rules, wantRules)
			}
			code, out, errOut = runEdge("replay", "-config", cfgPath, "-suggest", logPath)
			if code != 0 || !strings.Contains(out, "agreement with the decisions logged live: 100.00%") || !strings.Contains(out, "api/per-ip") {
				t.Errorf("replay -suggest: exit %d\n%s\n%s", code, out, errOut)
			}
		})
	}
}

// TestAccessLogClientLeaves: an HTTP/1.1 client that leaves while its
// request is at the origin, by closing or by resetting its connection, is
// logged 499 on either path, as nginx logs it. One that only half-closes
// sends the same FIN as one that closed: it is logged 499 too, as by
// nginx, and still gets the answer, as from HAProxy.
func TestAccessLogClientLeaves(t *testing.T) {
	origin := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		select {
		case <-time.After(time.Second):
		case <-r.Context().Done():
		}
		io.WriteString(w, "late\n")
	}))
	defer origin.Close()
	for _, fast := range []bool{true, false} {
		for _, tc := range []struct {
			way    string
			status int
		}{{"close", 499}, {"reset", 499}, {"half-close", 499}} {
			t.Run(fmt.Sprintf("fastpath=%v/%s", fast, tc.way), func(t *testing.T) {
				logPath := filepath.Join(t.TempDir(), "access.log")
				e, _ := startAccessEdge(t, fmt.Sprintf(`
listen: %q
admin_listen: %q
fastpath: %v
access_log: {path: %q, format: json}
domains:
  - {name: api, hosts: [api.test], origin: %q}
`, publicAnyPort, adminAnyPort, fast, logPath, origin.URL))
				c, err := net.Dial("tcp", e.public)
				if err != nil {
					t.Fatal(err)
				}
				defer c.Close()
				c.SetDeadline(time.Now().Add(10 * time.Second))
				io.WriteString(c, "GET /slow HTTP/1.1\r\nHost: api.test\r\n\r\n")
				time.Sleep(200 * time.Millisecond) // the request is at the origin
				switch tc.way {
				case "close":
					c.Close()
				case "reset":
					c.(*net.TCPConn).SetLinger(0)
					c.Close()
				case "half-close":
					c.(*net.TCPConn).CloseWrite()
					resp, err := http.ReadResponse(bufio.NewReader(c), nil)
					if err != nil {
						t.Fatalf("half-closed client: %v, want the answer", err)
					}
					io.Copy(io.Discard, resp.Body)
					if resp.StatusCode != 200 {
						t.Errorf("half-closed client: status %d, want 200", resp.StatusCode)
					}
				}
				time.Sleep(1200 * time.Millisecond) // the origin has answered
				if code := e.stop(); code != 0 {
					t.Fatalf("exit code %d", code)
				}
				lines := fileLines(t, logPath)
				if len(lines) != 1 {
					t.Fatalf("got %d lines, want 1:\n%s", len(lines), strings.Join(lines, "\n"))
				}
				var l accessJSONLine
				if err := json.Unmarshal([]byte(lines[0]), &l); err != nil {
					t.Fatal(err)
				}
				if l.Status != tc.status {
					t.Errorf("status %d (outcome %s), want %d:\n%s", l.Status, l.Outcome, tc.status, lines[0])
				}
			})
		}
	}
}
