package main

import (
	"bufio"
	"bytes"
	"context"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/edgerate/edge/rules"
)

// TestRunConnectionCap runs edge in-process with max_connections: 2. Two
// keep-alive connections sit idle after a request; a third connection is
// served, and to make room edge closed one of the idle ones. The cap is
// counted and logged.
func TestRunConnectionCap(t *testing.T) {
	origin := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		fmt.Fprint(w, "origin")
	}))
	t.Cleanup(origin.Close)
	cfg := filepath.Join(t.TempDir(), "edge.yaml")
	if err := os.WriteFile(cfg, []byte(fmt.Sprintf(`
listen: %q
admin_listen: %q
origin: %q
max_connections: 2
domains:
  - hosts: ["api.example.com"]
`, publicAnyPort, adminAnyPort, origin.URL)), 0o644); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	done := make(chan int, 1)
	stderr := newEdgeLog()
	go func() { done <- run(ctx, []string{"-config", cfg}, io.Discard, stderr) }()
	public, admin := stderr.waitStarted(t)

	type client struct {
		conn net.Conn
		br   *bufio.Reader
	}
	dial := func() client {
		t.Helper()
		conn, err := net.Dial("tcp", public)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { conn.Close() })
		if err := conn.SetDeadline(time.Now().Add(10 * time.Second)); err != nil {
			t.Fatal(err)
		}
		return client{conn, bufio.NewReader(conn)}
	}
	get := func(c client) (int, error) {
		if _, err := io.WriteString(c.conn, "GET / HTTP/1.1\r\nHost: api.example.com\r\n\r\n"); err != nil {
			return 0, err
		}
		resp, err := http.ReadResponse(c.br, nil)
		if err != nil {
			return 0, err
		}
		defer resp.Body.Close()
		_, err = io.Copy(io.Discard, resp.Body)
		return resp.StatusCode, err
	}
	idle := []client{dial(), dial()}
	for i, c := range idle {
		if code, err := get(c); code != 200 {
			t.Fatalf("idle client %d: got %d, %v, want 200", i, code, err)
		}
	}
	if code, err := get(dial()); code != 200 {
		t.Fatalf("third connection: got %d, %v, want 200", code, err)
	}
	// One idle connection was closed for the third; the other still serves.
	var served, closed int
	for _, c := range idle {
		if code, err := get(c); code == 200 {
			served++
		} else if err != nil {
			closed++
		}
	}
	if served != 1 || closed != 1 {
		t.Errorf("idle connections afterwards: %d served, %d closed, want 1 and 1", served, closed)
	}

	_, body := httpGet(t, "http://"+admin+"/metrics")
	for _, want := range []string{
		`edge_connections_capped_total{pop="local"} 1`,
		`edge_connections_open{listener="public",pop="local"} 2`,
	} {
		if !strings.Contains(body, want+"\n") {
			t.Errorf("/metrics lacks %q:\n%s", want, grepLines(body, "edge_connections_"))
		}
	}

	cancel()
	if code := <-done; code != 0 {
		t.Fatalf("run returned %d, want 0; stderr:\n%s", code, stderr.String())
	}
	if !regexp.MustCompile(`connection cap reached.* max_connections=2 closed_idle=true`).MatchString(stderr.String()) {
		t.Errorf("no cap log line; stderr:\n%s", stderr.String())
	}
}

// grepLines returns the lines of s that contain sub.
func grepLines(s, sub string) string {
	var out []string
	for _, l := range strings.Split(s, "\n") {
		if strings.Contains(l, sub) {
			out = append(out, l)
		}
	}
	return strings.Join(out, "\n")
}

func TestConnectionCap(t *testing.T) {
	limit := openFileLimit()
	if limit == 0 || limit >= 1<<20 {
		t.Skipf("open-file limit %d: cannot set max_connections above it", limit)
	}
	tests := []struct {
		name     string
		max      int
		want     int
		wantWarn bool
	}{
		{"default", 0, rules.DefaultMaxConnections(limit), false},
		{"below the limit", 5, 5, false},
		{"at the limit", int(limit), int(limit), true},
		{"above the limit", int(limit) + 1, int(limit) + 1, true},
	}
	for _, tt := range tests {
		var logs bytes.Buffer
		got := connectionCap(&rules.Table{MaxConnections: tt.max}, slog.New(slog.NewTextHandler(&logs, nil)))
		warned := strings.Contains(logs.String(), "max_connections is not below the open-file limit")
		if got != tt.want || warned != tt.wantWarn {
			t.Errorf("%s: got %d (warned %v), want %d (warned %v)", tt.name, got, warned, tt.want, tt.wantWarn)
		}
	}
}
