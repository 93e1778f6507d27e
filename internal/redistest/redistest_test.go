package redistest

import (
	"errors"
	"net"
	"syscall"
	"testing"
	"time"
)

// TestRefusingAddr: a connection to the address is refused, for as long
// as the test runs.
func TestRefusingAddr(t *testing.T) {
	addr := RefusingAddr(t)
	for i := range 2 {
		c, err := net.DialTimeout("tcp", addr, time.Second)
		if err == nil {
			c.Close()
		}
		if !errors.Is(err, syscall.ECONNREFUSED) {
			t.Errorf("dial %d to %s: got %v, want connection refused", i, addr, err)
		}
	}
	// The port is held: nothing else can listen there.
	if ln, err := net.Listen("tcp", addr); err == nil {
		ln.Close()
		t.Errorf("listening on %s succeeded, want the port held", addr)
	}
}
