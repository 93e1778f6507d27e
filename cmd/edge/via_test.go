package main

import (
	"fmt"
	"io"
	"net"
	"regexp"
	"strings"
	"sync"
	"testing"
)

// viaLines are the Via field lines of canonicalRequest's records.
var viaLines = regexp.MustCompile(`(?m)^  Via: (.*)$`)

// TestOriginReceivesVia: on both paths the origin receives the edge's Via
// entry on a line after the client's, which it gets as they came, and
// both paths send the same.
func TestOriginReceivesVia(t *testing.T) {
	tests := []struct {
		name   string
		fields []string
		want   []string // SELF: the edge's pseudonym
	}{
		{"no Via", nil, []string{"1.1 SELF"}},
		{"the client's", []string{"Via: 1.0 fred, 1.1 p.example.net (x, y)"}, []string{"1.0 fred, 1.1 p.example.net (x, y)", "1.1 SELF"}},
		{"two lines, another node's", []string{"via: 1.0 fred", "Via: 1.1 edge-elsewhere-x"}, []string{"1.0 fred", "1.1 edge-elsewhere-x", "1.1 SELF"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var records [2]string
			for i, fast := range []bool{true, false} {
				origin := startRawOrigin(t)
				cfg := strings.NewReplacer("ORIGIN", "http://"+origin.ln.Addr().String(), "TRUST", "").Replace(fwdConfig)
				ds := startConfig(t, cfg, fast)
				// Twice: the second is the fast path's, where it is on.
				steps := []string{get("plain.example.com", "/r/cl", tt.fields...), get("limited.example.com", "/r/cl", tt.fields...)}
				exchange(t, ds, steps, true, false)
				if fast && ds.answered.Load() == 0 {
					t.Errorf("the fast path forwarded nothing")
				}
				records[i] = origin.received(t)
				var want []string
				for _, w := range tt.want {
					want = append(want, strings.ReplaceAll(w, "SELF", ds.via))
				}
				for _, rec := range strings.Split(records[i], "GET /")[1:] {
					var got []string
					for _, m := range viaLines.FindAllStringSubmatch(rec, -1) {
						got = append(got, m[1])
					}
					if fmt.Sprint(got) != fmt.Sprint(want) {
						t.Errorf("fastpath %v: origin's Via lines %q, want %q", fast, got, want)
					}
				}
			}
			if records[0] != records[1] {
				t.Errorf("origin received, fast path:\n%s\nslow path:\n%s", records[0], records[1])
			}
		})
	}
}

// TestViaTwoTiers: two edges in series, the first forwarding to the
// second and the second to the origin, serve requests when their pops
// differ, on either path, and the origin sees both entries in order. With
// one pop on one host their pseudonyms are one, and the second answers
// 508: the reason docs/clients.md gives for a pop per tier.
func TestViaTwoTiers(t *testing.T) {
	tests := []struct {
		name             string
		front, back      string // pops
		frontFast, backF bool
		status           int
	}{
		{"fast path in both tiers", "front", "back", true, true, 200},
		{"net/http in both tiers", "front", "back", false, false, 200},
		{"fast path in front", "front", "back", true, false, 200},
		{"fast path behind", "front", "back", false, true, 200},
		{"one pop, one host", "local", "local", true, true, 508},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			origin := startRawOrigin(t)
			cfg := func(to, pop string) string {
				return strings.NewReplacer("ORIGIN", to, "TRUST", "pop: "+pop).Replace(fwdConfig)
			}
			back := startConfig(t, cfg("http://"+origin.ln.Addr().String(), tt.back), tt.backF)
			front := startConfig(t, cfg("http://"+back.addr, tt.front), tt.frontFast)
			steps := repeat(get("limited.example.com", "/r/cl", "Via: 1.0 fred"), 3)
			heard := hear(steps, exchange(t, front, steps, true, false))
			if len(heard.answers) != len(steps)+1 { // and the sentinel's 421
				t.Fatalf("heard %d answers, want %d:\n%s", len(heard.answers), len(steps)+1, heard.render())
			}
			for i, a := range heard.answers[:len(steps)] {
				if a.status != tt.status {
					t.Errorf("answer %d: status %d, want %d:\n%s", i, a.status, tt.status, a.render())
				}
			}
			if tt.frontFast && front.answered.Load() == 0 || tt.backF && back.answered.Load() == 0 {
				t.Errorf("the fast path answered %d in front and %d behind, want some where it is on", front.answered.Load(), back.answered.Load())
			}
			got := viaLines.FindAllStringSubmatch(origin.received(t), -1)
			if tt.status != 200 {
				if len(got) != 0 {
					t.Errorf("the origin saw %d Via lines, want no request", len(got))
				}
				return
			}
			want := []string{"1.0 fred", "1.1 " + front.via, "1.1 " + back.via}
			if len(got) != len(steps)*len(want) {
				t.Fatalf("the origin saw %d Via lines, want %d", len(got), len(steps)*len(want))
			}
			for i, m := range got {
				if m[1] != want[i%len(want)] {
					t.Errorf("Via line %d at the origin %q, want %q", i, m[1], want[i%len(want)])
				}
			}
		})
	}
}

// TestViaLoopThroughRelay: an edge whose origin is, through a port
// forward the config check cannot see through, the edge itself answers
// the request's second pass 508, which reaches the client as the origin's
// answer; on both paths the same, counted as one served and one loop.
func TestViaLoopThroughRelay(t *testing.T) {
	var heards [2][]heard
	var metrics [2]string
	for i, fast := range []bool{true, false} {
		relay := startRelay(t)
		cfg := strings.NewReplacer("ORIGIN", "http://"+relay.ln.Addr().String(), "TRUST", "").Replace(fwdConfig)
		ds := startConfig(t, cfg, fast)
		relay.to(ds.addr)
		steps := repeat(get("limited.example.com", "/r/cl"), 3)
		heards[i] = []heard{hear(steps, exchange(t, ds, steps, true, false))}
		if fast && ds.answered.Load() == 0 {
			t.Errorf("the fast path answered nothing")
		}
		h := heards[i][0]
		if len(h.answers) != len(steps)+1 {
			t.Fatalf("fastpath %v: heard %d answers, want %d:\n%s", fast, len(h.answers), len(steps)+1, h.render())
		}
		for j, a := range h.answers[:len(steps)] {
			if a.status != 508 || !strings.HasPrefix(string(a.body), "loop detected") {
				t.Errorf("fastpath %v: answer %d:\n%s\nwant 508, loop detected", fast, j, a.render())
			}
		}
		metrics[i] = metricsText(t, ds.reg)
		for _, want := range []string{
			`edge_requests_total{domain="limited",outcome="loop"} 3`,
			`edge_requests_total{domain="limited",outcome="served"} 3`,
		} {
			if !strings.Contains(metrics[i], want+"\n") {
				t.Errorf("fastpath %v: metrics hold no %s", fast, want)
			}
		}
	}
	sidesAgree(t, heards, [2]string{}, metrics)
}

// relay is a TCP port forward to an address set after it starts.
type relay struct {
	ln     net.Listener
	mu     sync.Mutex
	target string
	wg     sync.WaitGroup
}

func startRelay(t *testing.T) *relay {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	r := &relay{ln: ln}
	var conns sync.Map
	r.wg.Add(1)
	go func() {
		defer r.wg.Done()
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			r.mu.Lock()
			target := r.target
			r.mu.Unlock()
			up, err := net.Dial("tcp", target)
			if err != nil {
				c.Close()
				continue
			}
			conns.Store(c, up)
			r.wg.Add(2)
			pipe := func(dst, src net.Conn) {
				defer r.wg.Done()
				io.Copy(dst, src)
				dst.Close()
				src.Close()
			}
			go pipe(up, c)
			go pipe(c, up)
		}
	}()
	t.Cleanup(func() {
		ln.Close()
		conns.Range(func(c, up any) bool {
			c.(net.Conn).Close()
			up.(net.Conn).Close()
			return true
		})
		r.wg.Wait()
	})
	return r
}

func (r *relay) to(target string) {
	r.mu.Lock()
	r.target = target
	r.mu.Unlock()
}
