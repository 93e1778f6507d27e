package origin

import (
	"net/http"
	"net/url"
	"runtime"
	"strings"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"
)

// fakeTransport answers every check with status, or fails it when
// status is 0; it counts the checks.
type fakeTransport struct {
	status atomic.Int64
	checks atomic.Int64
	host   atomic.Value // the last check's Host
}

func (f *fakeTransport) RoundTrip(req *http.Request) (*http.Response, error) {
	f.checks.Add(1)
	f.host.Store(req.Host)
	st := int(f.status.Load())
	if st == 0 {
		return nil, &url.Error{Op: "Get", URL: req.URL.String(), Err: errRefused}
	}
	return &http.Response{StatusCode: st, Body: http.NoBody, Header: http.Header{}, Request: req}, nil
}

var errRefused = &timeoutErr{}

func TestChecksTakeOutAndBack(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		ft := &fakeTransport{}
		ft.status.Store(200)
		checks := NewChecks(ft, nil)
		defer checks.Close()
		g := group(t, 2, UpstreamOptions{})
		s := g.Servers()[0]
		o := CheckOptions{Path: "/healthz", Host: "app.example.com", Interval: time.Second, Timeout: 100 * time.Millisecond,
			HealthyAfter: 2, UnhealthyAfter: 3, Expect: func(st int) bool { return st >= 200 && st <= 399 }}
		checks.Set([]Check{{Server: s, Options: o, Expect: "200-399"}, {Server: g.Servers()[1], Options: o, Expect: "200-399"}})
		time.Sleep(1500 * time.Millisecond)
		synctest.Wait()
		if n := ft.checks.Load(); n != 2 {
			t.Fatalf("%d checks after one interval, want 2 (one per server)", n)
		}
		if h, _ := ft.host.Load().(string); h != "app.example.com" {
			t.Errorf("check Host %q, want app.example.com", h)
		}
		ft.status.Store(503)
		time.Sleep(2 * time.Second)
		synctest.Wait()
		if !s.Healthy(time.Now()) {
			t.Fatal("out after 2 failed checks, want unhealthy_after 3")
		}
		time.Sleep(time.Second)
		synctest.Wait()
		if s.Healthy(time.Now()) {
			t.Fatal("still in after 3 failed checks")
		}
		if at, outcome := s.LastCheck(); !strings.Contains(outcome, "503") || at.IsZero() {
			t.Errorf("last check %v %q, want the 503", at, outcome)
		}
		ft.status.Store(204)
		time.Sleep(time.Second)
		synctest.Wait()
		if s.Healthy(time.Now()) {
			t.Fatal("back after 1 passed check, want healthy_after 2")
		}
		time.Sleep(time.Second)
		synctest.Wait()
		if !s.Healthy(time.Now()) {
			t.Fatal("not back after 2 passed checks")
		}
		// A failed connection fails a check too.
		ft.status.Store(0)
		time.Sleep(3 * time.Second)
		synctest.Wait()
		if s.Healthy(time.Now()) {
			t.Error("in after 3 checks that could not connect")
		}
	})
}

func TestChecksShareAndStop(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		ft := &fakeTransport{}
		ft.status.Store(200)
		checks := NewChecks(ft, nil)
		o := CheckOptions{Path: "/", Interval: time.Second, Timeout: time.Second, HealthyAfter: 1, UnhealthyAfter: 1,
			Expect: func(st int) bool { return st == 200 }}
		// Two domains' servers of one URL, with one check: one checker.
		a, b := group(t, 1, UpstreamOptions{}), group(t, 1, UpstreamOptions{})
		base := runtime.NumGoroutine()
		checks.Set([]Check{{Server: a.Servers()[0], Options: o, Expect: "200"}, {Server: b.Servers()[0], Options: o, Expect: "200"}})
		time.Sleep(1500 * time.Millisecond)
		synctest.Wait()
		if n := ft.checks.Load(); n != 1 {
			t.Errorf("%d checks of one server for two domains, want 1", n)
		}
		if n := runtime.NumGoroutine() - base; n != 1 {
			t.Errorf("%d goroutines, want one checker", n)
		}
		ft.status.Store(500)
		time.Sleep(time.Second)
		synctest.Wait()
		if a.Servers()[0].Healthy(time.Now()) || b.Servers()[0].Healthy(time.Now()) {
			t.Error("a failed check did not reach both domains' servers")
		}
		// A reload that keeps the check keeps the checker; one that drops
		// it stops it.
		checks.Set([]Check{{Server: a.Servers()[0], Options: o, Expect: "200"}})
		synctest.Wait()
		if n := runtime.NumGoroutine() - base; n != 1 {
			t.Errorf("%d goroutines after a reload keeping the check, want 1", n)
		}
		checks.Set(nil)
		synctest.Wait()
		if n := runtime.NumGoroutine() - base; n != 0 {
			t.Errorf("%d goroutines after the check was removed, want 0", n)
		}
		checks.Set([]Check{{Server: a.Servers()[0], Options: o, Expect: "200"}})
		checks.Close()
		synctest.Wait()
		if n := runtime.NumGoroutine() - base; n != 0 {
			t.Errorf("%d goroutines after Close, want 0", n)
		}
	})
}
