package proxy

import (
	"errors"
	"net"
	"testing"
	"time"

	"github.com/edgerate/edge/origin"
)

// TestReloadRetiresOriginPool: a reload that changes a domain's origin
// closes the idle connections to the old one (they stayed open until
// shutdown).
func TestReloadRetiresOriginPool(t *testing.T) {
	oldOrigin, _ := newOrigin(t, "old")
	newOrigin, _ := newOrigin(t, "new")
	e := newEnv(t, oneDomain(oldOrigin.URL, rule("r", 100, time.Minute)))
	addr := oldOrigin.Listener.Addr().String()
	c, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	pool := e.proxy.origins.Pool(addr, nil)
	pool.Put(origin.NewConn(c, origin.Settings{}), time.Now())
	if _, err := e.proxy.Reload(compile(t, oneDomain(newOrigin.URL, rule("r", 100, time.Minute))), "second"); err != nil {
		t.Fatal(err)
	}
	c.SetReadDeadline(time.Now().Add(time.Second)) // fails at once if closed
	if _, err := c.Read(make([]byte, 1)); !errors.Is(err, net.ErrClosed) {
		t.Errorf("the idle connection to the removed origin: read gave %v, want it closed", err)
	}
	if e.proxy.origins.Pool(addr, nil) == pool {
		t.Error("the removed origin's pool is still kept")
	}
}
