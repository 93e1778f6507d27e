package origin

import (
	"context"
	"io"
	"net/http"
	"net/url"
	"sync"
	"time"
)

// Active health checks: one checker per distinct server and check, a
// goroutine that asks the server for the check's path every Interval and
// reports the answer to every Server (of every domain) it checks for. A
// server starts healthy; UnhealthyAfter failed checks in a row take it
// out, HealthyAfter passed ones take it back (and end a passive
// ejection).

// CheckOptions are an active check.
type CheckOptions struct {
	Path, Host     string // Host "": the server's own
	Interval       time.Duration
	Timeout        time.Duration
	HealthyAfter   int
	UnhealthyAfter int
	// Expect says whether a status passes.
	Expect func(status int) bool
}

// checkKey identifies a checker: a server's URL and a check.
type checkKey struct {
	url                          string
	path, host                   string
	interval, timeout            time.Duration
	healthyAfter, unhealthyAfter int
	expect                       string // the caller's spelling of Expect
	// transport is the server's (Server.Transport), whose TLS the check
	// speaks; nil: the checks' own.
	transport http.RoundTripper
}

// Checks runs the active checks of a set of upstream groups. Its methods
// are safe for concurrent use; Close stops every checker.
type Checks struct {
	now      func() time.Time
	client   *http.Client
	mu       sync.Mutex
	checkers map[checkKey]*checker
	closed   bool
	wg       sync.WaitGroup
}

// NewChecks returns checks that send their requests with transport and
// date their results by now (nil: time.Now), the clock the request paths
// decide by.
func NewChecks(transport http.RoundTripper, now func() time.Time) *Checks {
	if now == nil {
		now = time.Now
	}
	return &Checks{
		now: now,
		client: &http.Client{Transport: transport, CheckRedirect: func(*http.Request, []*http.Request) error {
			return http.ErrUseLastResponse
		}},
		checkers: make(map[checkKey]*checker),
	}
}

// Check is one server's active check, for Checks.Set.
type Check struct {
	Server  *Server
	Options CheckOptions
	// Expect spells Options.Expect, so that equal checks are one checker.
	Expect string
}

// Set makes checks the ones that run: a checker whose server and check
// stay keeps running (with the new Servers to report to), the others
// stop, new ones start.
func (c *Checks) Set(checks []Check) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.closed {
		return
	}
	next := make(map[checkKey]*checker)
	for _, ch := range checks {
		o := ch.Options
		k := checkKey{ch.Server.URL.String(), o.Path, o.Host, o.Interval, o.Timeout, o.HealthyAfter, o.UnhealthyAfter, ch.Expect,
			ch.Server.Transport()}
		ck := next[k]
		if ck == nil {
			ck = c.checkers[k]
			if ck == nil {
				ck = &checker{opts: o, target: *ch.Server.URL, stop: make(chan struct{})}
				ck.target.Path = o.Path
				ck.target.RawQuery = ""
				client := c.client
				if k.transport != nil {
					// The server's own: an https server's origin_tls.
					client = &http.Client{Transport: k.transport, CheckRedirect: c.client.CheckRedirect}
				}
				c.wg.Add(1)
				go func() {
					defer c.wg.Done()
					ck.run(client, c.now)
				}()
			}
			ck.mu.Lock()
			ck.servers = nil
			ck.mu.Unlock()
			next[k] = ck
		}
		ck.mu.Lock()
		ck.servers = append(ck.servers, ch.Server)
		ck.mu.Unlock()
	}
	for k, ck := range c.checkers {
		if next[k] == nil {
			close(ck.stop)
		}
	}
	c.checkers = next
}

// Close stops every checker, waits for them to end, and closes the idle
// connections of the checks' transport.
func (c *Checks) Close() {
	c.mu.Lock()
	if !c.closed {
		c.closed = true
		for _, ck := range c.checkers {
			close(ck.stop)
		}
		c.checkers = nil
	}
	c.mu.Unlock()
	c.wg.Wait()
	if t, ok := c.client.Transport.(interface{ CloseIdleConnections() }); ok {
		t.CloseIdleConnections()
	}
}

// checker is the goroutine of one server's check.
type checker struct {
	opts    CheckOptions
	target  url.URL
	stop    chan struct{}
	mu      sync.Mutex
	servers []*Server
}

func (ck *checker) run(client *http.Client, clock func() time.Time) {
	t := time.NewTimer(ck.opts.Interval)
	defer t.Stop()
	for {
		select {
		case <-ck.stop:
			return
		case <-t.C:
		}
		ok, outcome := ck.check(client)
		now := clock()
		ck.mu.Lock()
		servers := ck.servers
		ck.mu.Unlock()
		for _, s := range servers {
			s.Checked(ok, outcome, ck.opts, now)
		}
		t.Reset(ck.opts.Interval)
	}
}

// check sends one check and says whether it passed, and why not.
func (ck *checker) check(client *http.Client) (bool, string) {
	ctx, cancel := context.WithTimeout(context.Background(), ck.opts.Timeout)
	defer cancel()
	go func() { // a stop ends a check under way
		select {
		case <-ck.stop:
			cancel()
		case <-ctx.Done():
		}
	}()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, ck.target.String(), nil)
	if err != nil {
		return false, err.Error()
	}
	if ck.opts.Host != "" {
		req.Host = ck.opts.Host
	}
	req.Header.Set("User-Agent", "edge-health-check")
	resp, err := client.Do(req)
	if err != nil {
		return false, "error: " + err.Error()
	}
	_, _ = io.Copy(io.Discard, io.LimitReader(resp.Body, 64<<10))
	resp.Body.Close()
	if !ck.opts.Expect(resp.StatusCode) {
		return false, "status " + http.StatusText(resp.StatusCode) + " (" + itoa(resp.StatusCode) + ")"
	}
	return true, "passed (" + itoa(resp.StatusCode) + ")"
}

func itoa(n int) string {
	var b [8]byte
	i := len(b)
	for n >= 10 {
		i--
		b[i] = byte('0' + n%10)
		n /= 10
	}
	i--
	b[i] = byte('0' + n)
	return string(b[i:])
}

// Checked records an active check of s at now that passed (ok) or not:
// UnhealthyAfter failures in a row take s out, HealthyAfter passes in a
// row take it back and end a passive ejection.
func (s *Server) Checked(ok bool, outcome string, o CheckOptions, now time.Time) {
	s.st.mu.Lock()
	defer s.st.mu.Unlock()
	s.st.lastCheck, s.st.lastOutcome = now, outcome
	if ok {
		s.st.failed = 0
		s.st.passes++
		if s.st.passes >= o.HealthyAfter && (s.st.down.Load() || s.ejected(now)) {
			s.st.down.Store(false)
			s.st.ejectedUntil.Store(0)
		}
		return
	}
	s.st.passes = 0
	s.st.failed++
	if s.st.failed >= o.UnhealthyAfter && !s.st.down.Load() {
		s.st.down.Store(true)
		s.st.ejections[1].Add(1)
	}
}
