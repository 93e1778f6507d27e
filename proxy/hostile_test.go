package proxy

import (
	"bufio"
	"errors"
	"fmt"
	"io"
	"log"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/edgerate/edge/guard"
	"github.com/edgerate/edge/internal/hostile"
	"github.com/edgerate/edge/internal/wait"
	"github.com/edgerate/edge/rules"
	"go.uber.org/goleak"
)

// hostileOrigin counts the requests that reach it.
type hostileOrigin struct {
	srv *httptest.Server

	active   atomic.Int64 // handlers running
	mu       sync.Mutex
	started  int // requests whose head arrived
	complete int // requests whose body arrived whole
	last     *http.Request
	partial  [2]int // started and complete, for /partial
}

func newHostileOrigin(t *testing.T) *hostileOrigin {
	o := &hostileOrigin{}
	o.srv = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		o.active.Add(1)
		defer o.active.Add(-1)
		partial := r.URL.Path == "/partial"
		o.mu.Lock()
		if partial {
			o.partial[0]++
		} else {
			o.started++
		}
		o.mu.Unlock()
		if _, err := io.Copy(io.Discard, r.Body); err != nil {
			// As a sane origin would. For a streamed body that breaks late,
			// this answer can beat edge's own 400 to the client.
			http.Error(w, "origin: broken body", http.StatusBadRequest)
			return
		}
		o.mu.Lock()
		if partial {
			o.partial[1]++
		} else {
			o.complete++
			o.last = r
		}
		o.mu.Unlock()
		io.WriteString(w, "origin")
	}))
	t.Cleanup(o.srv.Close)
	return o
}

// settle waits until no origin handler is running, so that counts are
// final.
func (o *hostileOrigin) settle(t *testing.T) {
	t.Helper()
	wait.For(t, 5*time.Second, "the origin's handlers to end", func() bool { return o.active.Load() == 0 })
}

func (o *hostileOrigin) counts() (started, complete int, last *http.Request) {
	o.mu.Lock()
	defer o.mu.Unlock()
	return o.started, o.complete, o.last
}

// hostileConfig is the site described at the top of this file.
func hostileConfig(origin string) rules.Config {
	hour := time.Hour
	return rules.Config{
		Listen: "127.0.0.1:0", AdminListen: "127.0.0.1:1",
		Origin:         origin,
		MaxHeaderBytes: 8 << 10,
		Domains: []rules.DomainConfig{
			{Name: "api", Hosts: []string{"api.example.com", "[2001:db8::1]", "192.0.2.10"}, Rules: []rules.RuleConfig{
				{Name: "admin", Limit: 1, Period: hour, Match: &rules.MatchConfig{PathPrefix: "/admin/"}},
				{Name: "login", Limit: 1, Period: hour, Match: &rules.MatchConfig{PathPrefix: "/login", Methods: []string{"POST"}}},
			}},
			{Name: "www", Hosts: []string{"www.example.com", "*.wild.example.com", "xn--bcher-kva.example"}},
			{Name: "static", Hosts: []string{"static.example.com"}, Respond: &rules.ResponseConfig{Status: 203, Body: "static"}},
		},
	}
}

// hostileServer is a real http.Server, configured as cmd/edge configures
// its public server, serving p through a Listener.
type hostileServer struct {
	srv    *http.Server
	addr   string
	done   chan error
	closed sync.Map // client address → time.Time the server closed its connection
	conns  sync.WaitGroup
}

// closedAt returns when the server closed (or handed off) the connection
// from the client address addr.
func (s *hostileServer) closedAt(addr string) (time.Time, bool) {
	v, ok := s.closed.Load(addr)
	if !ok {
		return time.Time{}, false
	}
	return v.(time.Time), true
}

func startHostileServer(t *testing.T, p *Proxy, table *rules.Table, lo guard.ListenerOptions) *hostileServer {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	s := &hostileServer{
		srv: &http.Server{
			Handler:           p,
			ReadHeaderTimeout: table.Timeouts.ReadHeader,
			ReadTimeout:       table.Timeouts.Read,
			WriteTimeout:      table.Timeouts.Write,
			IdleTimeout:       table.Timeouts.Idle,
			MaxHeaderBytes:    table.MaxHeaderBytes,
			ErrorLog:          discardLog,
			// As cmd/edge sets it: OPTIONS * goes to the handler (the
			// Listener refuses it before that).
			DisableGeneralOptionsHandler: true,
		},
		addr: ln.Addr().String(),
		done: make(chan error, 1),
	}
	lo.MaxHeaderBytes = table.MaxHeaderBytes
	l := guard.NewListener(ln, lo)
	s.srv.ConnState = func(c net.Conn, st http.ConnState) {
		l.ConnState(c, st) // as cmd/edge installs it
		switch st {
		case http.StateNew:
			s.conns.Add(1)
		case http.StateClosed, http.StateHijacked:
			s.closed.Store(c.RemoteAddr().String(), time.Now())
			s.conns.Done()
		}
	}
	go func() { s.done <- s.srv.Serve(l) }()
	return s
}

// stop closes the server and waits for Serve to return and for every
// connection's goroutine to finish (net/http lingers up to 500 ms after a
// 400 before it closes).
func (s *hostileServer) stop(t *testing.T) {
	t.Helper()
	s.srv.Close()
	if err := <-s.done; !errors.Is(err, http.ErrServerClosed) {
		t.Errorf("Serve: %v", err)
	}
	s.conns.Wait()
}

// sendRaw sends raw on a new connection and reads len(want) responses
// (skipping interim 1xx ones). A status of 0 stands for "closed without a
// response".
func sendRaw(t *testing.T, addr string, c hostile.Case) (got []int, bodies []string) {
	t.Helper()
	conn, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	if err := conn.SetDeadline(time.Now().Add(10 * time.Second)); err != nil {
		t.Fatal(err)
	}
	// Write concurrently: the server may answer (and stop reading) before
	// a long input is written.
	werr := make(chan error, 1)
	go func() {
		_, err := io.WriteString(conn, c.Raw)
		if err == nil && c.HalfClose {
			err = conn.(*net.TCPConn).CloseWrite()
		}
		werr <- err
	}()
	defer func() { <-werr }()
	br := bufio.NewReader(conn)
	method := "GET"
	if c.Head {
		method = "HEAD"
	}
	for range c.Want {
		var resp *http.Response
		for {
			resp, err = http.ReadResponse(br, &http.Request{Method: method})
			if err != nil || resp.StatusCode >= 200 || resp.StatusCode == 101 {
				break
			}
		}
		if err != nil {
			got = append(got, 0)
			bodies = append(bodies, err.Error())
			break
		}
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		got = append(got, resp.StatusCode)
		bodies = append(bodies, string(b))
		if resp.Close && resp.StatusCode >= 400 && len(got) < len(c.Want) {
			break
		}
	}
	return got, bodies
}

var discardLog = log.New(io.Discard, "", 0)

func TestHostileCorpus(t *testing.T) {
	defer goleak.VerifyNone(t, goleak.IgnoreCurrent())

	origin := newHostileOrigin(t)
	defer origin.srv.Close()
	cfg := hostileConfig(origin.srv.URL)
	table, err := rules.Compile(cfg)
	if err != nil {
		t.Fatal(err)
	}
	clk := newClock()
	transport := newTransport(table.Timeouts)
	defer transport.CloseIdleConnections()
	p, err := New(Options{Table: table, Now: clk.Now, Transport: transport})
	if err != nil {
		t.Fatal(err)
	}
	srv := startHostileServer(t, p, table, guard.ListenerOptions{WriteIdleTimeout: 5 * time.Second})
	defer srv.stop(t)

	// Spend the admin and login quotas.
	for _, raw := range []string{hostile.Req("GET /admin/ HTTP/1.1", hostile.HostAPI), hostile.Req("POST /login HTTP/1.1", hostile.HostAPI)} {
		if got, _ := sendRaw(t, srv.addr, hostile.Case{Raw: raw, Want: []int{200}}); got[0] != 200 {
			t.Fatalf("priming %q: got %v, want 200", raw, got)
		}
	}

	corpus := hostile.Corpus()
	type tally struct{ n, failed int }
	classes := map[string]*tally{}
	var order []string
	for _, c := range corpus {
		if classes[c.Class] == nil {
			classes[c.Class] = &tally{}
			order = append(order, c.Class)
		}
		classes[c.Class].n++
		origin.settle(t)
		s0, c0, _ := origin.counts()
		got, bodies := sendRaw(t, srv.addr, c)
		origin.settle(t)
		s1, c1, last := origin.counts()

		forwarded := 0
		for _, w := range c.Want {
			if w == 200 && !c.Local {
				forwarded++
			}
		}
		var problems []string
		if fmt.Sprint(got) != fmt.Sprint(c.Want) {
			problems = append(problems, fmt.Sprintf("statuses %v, want %v (bodies %q)", got, c.Want, bodies))
		}
		if c1-c0 != forwarded {
			problems = append(problems, fmt.Sprintf("origin got %d complete requests, want %d", c1-c0, forwarded))
		}
		if s1-s0 != forwarded {
			problems = append(problems, fmt.Sprintf("origin saw %d request heads, want %d", s1-s0, forwarded))
		}
		if forwarded == 1 && c1-c0 == 1 {
			if c.OriginURI != "" && last.RequestURI != c.OriginURI {
				problems = append(problems, fmt.Sprintf("origin saw target %q, want %q", last.RequestURI, c.OriginURI))
			}
			for k, v := range c.OriginHdr {
				if g := strings.Join(last.Header.Values(k), ", "); g != v {
					problems = append(problems, fmt.Sprintf("origin saw %s %q, want %q", k, g, v))
				}
			}
		}
		if len(problems) > 0 {
			classes[c.Class].failed++
			t.Errorf("%s / %s:\n\t%s", c.Class, c.Name, strings.Join(problems, "\n\t"))
		}
	}
	if len(corpus) < 150 {
		t.Errorf("corpus has %d inputs, want at least 150", len(corpus))
	}
	var summary []string
	for _, cl := range order {
		summary = append(summary, fmt.Sprintf("%s %d/%d", cl, classes[cl].n-classes[cl].failed, classes[cl].n))
	}
	t.Logf("%d hostile inputs as expected by class: %s", len(corpus), strings.Join(summary, ", "))

	origin.settle(t)
	origin.mu.Lock()
	if origin.partial[1] != 0 {
		t.Errorf("origin got %d complete requests for /partial, want 0 (%d heads)", origin.partial[1], origin.partial[0])
	}
	origin.mu.Unlock()

	// The upstream pool is healthy: keep-alive requests all get through.
	_, c0, _ := origin.counts()
	client := &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: 4}}
	defer client.CloseIdleConnections()
	const followUps = 300
	for i := range followUps {
		r, _ := http.NewRequest("GET", "http://"+srv.addr+fmt.Sprintf("/public/%d", i), nil)
		r.Host = "www.example.com"
		resp, err := client.Do(r)
		if err != nil {
			t.Fatalf("follow-up %d: %v", i, err)
		}
		io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		if resp.StatusCode != 200 {
			t.Fatalf("follow-up %d: got %d, want 200", i, resp.StatusCode)
		}
	}
	origin.settle(t)
	if _, c1, _ := origin.counts(); c1-c0 != followUps {
		t.Errorf("origin got %d follow-ups, want %d", c1-c0, followUps)
	}
}
