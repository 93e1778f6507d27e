package main

import (
	"bufio"
	"fmt"
	"io"
	"net"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"
)

// The origin connections both forwarders keep between requests must never
// hand one client what an origin sent for another. A naive origin (as
// Python's http.server is: its do_GET never reads a body) gives an
// attacker the means: a GET whose body holds a second request, answered
// as one; and so does an origin that sends more than the response it was
// asked for (a body on HEAD, 204 or 304, bytes beyond its Content-Length).
// Each response here names, in X-For and in its body, the request it
// answers, and every client must get its own.

// naiveAction is what a naiveOrigin does for one request.
type naiveAction struct {
	status   int           // of the response (0: 200)
	extra    bool          // a whole response to "/extra" follows the answer
	headBody bool          // a HEAD's answer carries a body, a smuggled response
	close    bool          // the origin closes without answering
	lie      int           // the Content-Length claims this many bytes more than are sent
	late     time.Duration // the answer to a request read from a GET's body waits this long
	early    bool          // a body is not read before the answer, then read as requests
}

// naiveOrigin answers each request by its path (script), reading a body
// only for methods other than GET, HEAD and OPTIONS: a body there is read
// as the next request.
type naiveOrigin struct {
	ln     net.Listener
	mu     sync.Mutex
	script map[string]naiveAction
	wg     sync.WaitGroup
	conns  map[net.Conn]bool
}

func startNaiveOrigin(t testing.TB) *naiveOrigin {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	o := &naiveOrigin{ln: ln, script: map[string]naiveAction{}, conns: map[net.Conn]bool{}}
	o.wg.Add(1)
	go func() {
		defer o.wg.Done()
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			o.mu.Lock()
			o.conns[c] = true
			o.mu.Unlock()
			o.wg.Add(1)
			go func() {
				defer o.wg.Done()
				o.serve(c)
				o.mu.Lock()
				delete(o.conns, c)
				o.mu.Unlock()
			}()
		}
	}()
	t.Cleanup(func() {
		ln.Close()
		o.mu.Lock()
		for c := range o.conns {
			c.Close()
		}
		o.mu.Unlock()
		o.wg.Wait()
	})
	return o
}

func (o *naiveOrigin) set(path string, a naiveAction) {
	o.mu.Lock()
	o.script[path] = a
	o.mu.Unlock()
}

// naiveResponse is the origin's answer to path: X-For and the body name it.
func naiveResponse(status int, path string, lie int) string {
	body := "for " + path
	return fmt.Sprintf("HTTP/1.1 %d %s\r\nX-For: %s\r\nContent-Type: text/plain\r\nContent-Length: %d\r\n\r\n%s",
		status, http.StatusText(status), path, len(body)+lie, body)
}

func (o *naiveOrigin) serve(c net.Conn) {
	defer c.Close()
	br := bufio.NewReader(c)
	smuggled := false // the request being read came in a GET's body
	var lastAction naiveAction
	for {
		line, err := br.ReadString('\n')
		if err != nil {
			return
		}
		method, rest, _ := strings.Cut(strings.TrimSpace(line), " ")
		path, _, _ := strings.Cut(rest, " ")
		length := 0
		for {
			f, err := br.ReadString('\n')
			if err != nil {
				return
			}
			if f == "\r\n" || f == "\n" {
				break
			}
			name, value, _ := strings.Cut(f, ":")
			if strings.EqualFold(name, "Content-Length") {
				length, _ = strconv.Atoi(strings.TrimSpace(value))
			}
		}
		o.mu.Lock()
		a := o.script[path]
		o.mu.Unlock()
		if method != http.MethodGet && method != http.MethodHead && method != http.MethodOptions && !a.early {
			if _, err := io.CopyN(io.Discard, br, int64(length)); err != nil {
				return
			}
		}
		if smuggled && lastAction.late > 0 {
			time.Sleep(lastAction.late)
		}
		smuggled = length > 0 && (method == http.MethodGet || method == http.MethodHead || method == http.MethodOptions)
		lastAction = a
		if a.close {
			return
		}
		status := a.status
		if status == 0 {
			status = http.StatusOK
		}
		resp := naiveResponse(status, path, a.lie)
		smuggle := naiveResponse(http.StatusOK, "/smuggled", 0)
		switch {
		case method == http.MethodHead:
			resp, _, _ = strings.Cut(resp, "\r\n\r\n")
			resp += "\r\n\r\n"
			if a.headBody {
				resp += smuggle
			}
		case status == http.StatusNoContent || status == http.StatusNotModified:
			resp = fmt.Sprintf("HTTP/1.1 %d %s\r\nX-For: %s\r\nContent-Length: %d\r\n\r\n%s",
				status, http.StatusText(status), path, len(smuggle), smuggle)
		}
		if a.extra {
			resp += naiveResponse(http.StatusOK, "/extra", 0)
		}
		if _, err := io.WriteString(c, resp); err != nil {
			return
		}
		if a.lie > 0 {
			return // the rest it promised never comes
		}
		if a.early {
			// Answered before the body is read; what it reads next, the
			// body, it takes for requests.
			time.Sleep(20 * time.Millisecond)
		}
	}
}

// smuggling is a GET whose body is a request of its own.
func smuggling(method, target string) string {
	inner := "GET /attacker-page HTTP/1.1\r\nHost: plain.example.com\r\n\r\n"
	return fmt.Sprintf("%s %s HTTP/1.1\r\nHost: plain.example.com\r\nContent-Length: %d\r\n\r\n%s", method, target, len(inner), inner)
}

// earlyUpload is a POST whose body, larger than the socket buffers
// between edge and the origin, is one request to an origin that reads it
// as such.
func earlyUpload(target string) string {
	inner := "GET /attacker-page HTTP/1.1\r\nHost: plain.example.com\r\nX-Pad: " + strings.Repeat("a", 16<<20) + "\r\n\r\n"
	return fmt.Sprintf("POST %s HTTP/1.1\r\nHost: plain.example.com\r\nContent-Length: %d\r\n\r\n%s", target, len(inner), inner)
}

// askInTurn sends each client's requests on a connection of its own, one
// client after the other, and returns for each response the request it
// names (X-For), or "error" where there was none.
// A request after one net/http served waits until net/http has said the
// connection is idle (as exchange does), so that the fast path takes it.
func askInTurn(t *testing.T, ds *diffServer, clients [][]string) [][]string {
	t.Helper()
	var got [][]string
	for _, reqs := range clients {
		for len(ds.idle) > 0 {
			<-ds.idle
		}
		c, err := net.Dial("tcp", ds.addr)
		if err != nil {
			t.Fatal(err)
		}
		c.SetDeadline(time.Now().Add(10 * time.Second))
		br := bufio.NewReader(c)
		var names []string
		for _, req := range reqs {
			if _, err := io.WriteString(c, req); err != nil {
				names = append(names, "error")
				break
			}
			method, _, _ := strings.Cut(req, " ")
			answered := ds.answered.Load()
			resp, err := http.ReadResponse(br, &http.Request{Method: method})
			if err != nil {
				names = append(names, "error")
				break
			}
			io.Copy(io.Discard, resp.Body)
			resp.Body.Close()
			if ds.answered.Load() == answered && !resp.Close {
				awaitIdle(ds, 200*time.Millisecond)
			}
			if f := resp.Header.Get("X-For"); f != "" {
				names = append(names, f)
			} else {
				names = append(names, "error")
			}
		}
		c.Close()
		got = append(got, names)
	}
	return got
}

// TestOriginConnectionsNoCrossTalk: for each way an origin can send more
// than the response asked for, an attacker's request and then three
// clients in turn, each on its own connection, through both forwarders:
// every client gets the answer to its own request.
func TestOriginConnectionsNoCrossTalk(t *testing.T) {
	get := func(path string) string { return get("plain.example.com", path) }
	cases := []struct {
		name   string
		attack string
		action naiveAction
	}{
		{"request in a GET body", smuggling("GET", "/logo.png"), naiveAction{}},
		{"request in a GET body, answered 50 ms late", smuggling("GET", "/logo.png"), naiveAction{late: 50 * time.Millisecond}},
		{"request in an OPTIONS body", smuggling("OPTIONS", "/logo.png"), naiveAction{}},
		{"body on HEAD", "HEAD /logo.png HTTP/1.1\r\nHost: plain.example.com\r\n\r\n", naiveAction{headBody: true}},
		{"body on 204", get("/logo.png"), naiveAction{status: http.StatusNoContent}},
		{"body on 304", get("/logo.png"), naiveAction{status: http.StatusNotModified}},
		{"bytes beyond Content-Length", get("/logo.png"), naiveAction{extra: true}},
		{"answer before the body's end", earlyUpload("/upload"), naiveAction{early: true}},
	}
	for _, tc := range cases {
		for _, fast := range []bool{true, false} {
			t.Run(fmt.Sprintf("%s/fastpath=%v", tc.name, fast), func(t *testing.T) {
				t.Parallel()
				origin := startNaiveOrigin(t)
				origin.set("/logo.png", tc.action)
				origin.set("/upload", tc.action)
				cfg := strings.NewReplacer("ORIGIN", "http://"+origin.ln.Addr().String(), "TRUST", "").Replace(fwdConfig)
				ds := startConfig(t, cfg, fast)
				// A first request on each connection: the fast path takes
				// the ones after it.
				clients := [][]string{
					{get("/warm-attacker"), tc.attack},
					{get("/warm-alice"), get("/account")},
					{get("/warm-bob"), get("/bob")},
					{get("/warm-carol"), get("/carol")},
				}
				got := askInTurn(t, ds, clients)
				attacked := "/logo.png"
				if tc.action.early {
					attacked = "/upload"
				}
				want := [][]string{
					{"/warm-attacker", attacked},
					{"/warm-alice", "/account"},
					{"/warm-bob", "/bob"},
					{"/warm-carol", "/carol"},
				}
				if tc.action.early && len(got[0]) == 2 && got[0][1] == "error" {
					// net/http's server, done with the request before its
					// body, closes the connection while the client writes.
					want[0][1] = "error"
				}
				if fmt.Sprint(got) != fmt.Sprint(want) {
					t.Errorf("clients got the answers to\n%v\nwant\n%v", got, want)
				}
				if fast && ds.answered.Load() == 0 {
					t.Errorf("the fast path forwarded nothing")
				}
			})
		}
	}
}

// FuzzOriginPool drives both forwarders' origin connections (the fast
// forward's pool, net/http's transport behind fastpath: false) with a
// scripted origin whose misdeeds the fuzzer chooses, for a few clients in
// turn: each gets the response naming its own request, or an error (a
// 502 or 504, or its connection closed), never another's.
func FuzzOriginPool(f *testing.F) {
	f.Add([]byte{0, 1, 0, 0, 0, 0}, true)
	f.Add([]byte{1, 0, 2, 0, 3, 0, 0, 0}, true)
	f.Add([]byte{4, 5, 6, 0, 7, 30, 0, 0}, false)
	f.Add([]byte{8, 0, 9, 0, 0, 0}, true)
	f.Add([]byte("B\x05\"0\a7\x00\x00"), false) // the transport's reader behind its idle connection
	origin := startNaiveOrigin(f)
	cfg := strings.NewReplacer("ORIGIN", "http://"+origin.ln.Addr().String(), "TRUST", "").Replace(fwdConfig)
	edges := map[bool]*diffServer{true: startConfig(f, cfg, true), false: startConfig(f, cfg, false)}
	var round int
	f.Fuzz(func(t *testing.T, script []byte, fast bool) {
		round++
		var clients [][]string
		var want [][]string
		for i := 0; i+1 < len(script) && len(clients) < 5; i += 2 {
			op, arg := script[i], script[i+1]
			path := fmt.Sprintf("/r%d-c%d", round, len(clients))
			req := get("plain.example.com", path)
			var a naiveAction
			switch op % 10 {
			case 1:
				a.extra = true
			case 2:
				a.lie = 1 + int(arg%64)
			case 3:
				a.status = http.StatusNoContent
			case 4:
				a.status = http.StatusNotModified
			case 5:
				req = "HEAD " + path + " HTTP/1.1\r\nHost: plain.example.com\r\n\r\n"
				a.headBody = true
			case 6:
				a.close = true
			case 7:
				req = smuggling("GET", path)
				a.late = time.Duration(arg%40) * time.Millisecond
			case 8:
				req = smuggling("OPTIONS", path)
			case 9:
				req = "POST " + path + " HTTP/1.1\r\nHost: plain.example.com\r\nContent-Length: 3\r\n\r\nabc"
			}
			origin.set(path, a)
			warm := fmt.Sprintf("/r%d-w%d", round, len(clients))
			clients = append(clients, []string{get("plain.example.com", warm), req})
			want = append(want, []string{warm, path})
		}
		got := askInTurn(t, edges[fast], clients)
		for i := range got {
			for j, name := range got[i] {
				if name != "error" && name != want[i][j] {
					t.Fatalf("client %d's request %s was answered with the response to %s (all: %v)", i, want[i][j], name, got)
				}
			}
		}
	})
}
