package guard

import (
	"bufio"
	"errors"
	"io"
	"net"
	"net/http"
	"net/netip"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/edgerate/edge/internal/wait"
	"github.com/edgerate/edge/internal/wire"
)

// TestAdmit: Admit decides on each connection in Accept, with its peer and
// socket, before the cap: at MaxConnections 1, a refused client's
// connection closes (reset, unread: no stage ran on it) and leaves the
// idle connection of another client open, while an admitted one evicts
// it; Release is called once as each admitted connection closes.
func TestAdmit(t *testing.T) {
	plain, err := net.Listen("tcp", "127.0.0.1:0")
	must(t, err)
	staged, err := net.Listen("tcp", "127.0.0.1:0")
	must(t, err)
	var mu sync.Mutex
	var asked []string
	released, capped, stagesRun := 0, 0, 0
	refused := netip.MustParseAddr("127.0.0.3")
	admit := func(peer netip.Addr, socket string) wire.Admission {
		mu.Lock()
		defer mu.Unlock()
		asked = append(asked, peer.String()+" "+socket)
		if peer == refused {
			return wire.Admission{Refused: true}
		}
		return wire.Admission{Release: func() {
			mu.Lock()
			released++
			mu.Unlock()
		}}
	}
	stage := func(c net.Conn) (StageResult, error) {
		mu.Lock()
		stagesRun++
		mu.Unlock()
		return StageResult{}, nil
	}
	joined, err := Join(Socket{Listener: plain, Name: "public"}, Socket{Listener: staged, Name: "tls", Stages: []Stage{stage}})
	must(t, err)
	l := NewListener(joined, ListenerOptions{MaxConnections: 1, Admit: admit, OnCapped: func(CapEvent) {
		mu.Lock()
		capped++
		mu.Unlock()
	}})
	srv := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { io.WriteString(w, "ok") }),
		ConnState: l.ConnState, ReadHeaderTimeout: 5 * time.Second}
	done := make(chan struct{})
	go func() { defer close(done); srv.Serve(l) }()
	defer func() {
		srv.Close()
		<-done
	}()
	dialFrom := func(from, addr string) net.Conn {
		d := net.Dialer{LocalAddr: &net.TCPAddr{IP: net.ParseIP(from)}}
		c, err := d.Dial("tcp", addr)
		must(t, err)
		t.Cleanup(func() { c.Close() })
		must(t, c.SetDeadline(time.Now().Add(5*time.Second)))
		return c
	}
	get := func(c net.Conn) (string, error) {
		io.WriteString(c, "GET / HTTP/1.1\r\nHost: x\r\n\r\n")
		resp, err := http.ReadResponse(bufio.NewReader(c), nil)
		if err != nil {
			return "", err
		}
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		return string(b), nil
	}

	idle := dialFrom("127.0.0.2", plain.Addr().String())
	if got, err := get(idle); got != "ok" {
		t.Fatalf("an admitted client: got %q, %v", got, err)
	}
	for _, addr := range []string{plain.Addr().String(), staged.Addr().String()} {
		// The reset may come before the dial returns.
		d := net.Dialer{LocalAddr: &net.TCPAddr{IP: net.ParseIP("127.0.0.3")}}
		c, err := d.Dial("tcp", addr)
		if err == nil {
			defer c.Close()
			must(t, c.SetDeadline(time.Now().Add(5*time.Second)))
			_, err = c.Read(make([]byte, 1))
		}
		if !errors.Is(err, syscall.ECONNRESET) && !errors.Is(err, io.EOF) {
			t.Errorf("a refused client: got %v, want a reset or EOF", err)
		}
	}
	// The idle connection is still served: the refusals closed none.
	if got, err := get(idle); got != "ok" {
		t.Errorf("the idle connection after the refusals: got %q, %v", got, err)
	}
	mu.Lock()
	if capped != 0 || stagesRun != 0 || released != 0 {
		t.Errorf("after the refusals: capped %d, stages run %d, released %d, want 0, 0, 0", capped, stagesRun, released)
	}
	mu.Unlock()

	// An admitted client at the cap evicts the idle one, whose Release
	// then runs.
	other := dialFrom("127.0.0.4", staged.Addr().String())
	if got, err := get(other); got != "ok" {
		t.Errorf("an admitted client at the cap: got %q, %v", got, err)
	}
	wait.For(t, 5*time.Second, "the evicted connection's Release", func() bool {
		mu.Lock()
		defer mu.Unlock()
		return released == 1
	})
	other.Close()
	wait.For(t, 5*time.Second, "the second connection's Release", func() bool {
		mu.Lock()
		defer mu.Unlock()
		return released == 2
	})
	mu.Lock()
	defer mu.Unlock()
	want := []string{"127.0.0.2 public", "127.0.0.3 public", "127.0.0.3 tls", "127.0.0.4 tls"}
	if len(asked) != len(want) {
		t.Fatalf("Admit asked %q, want %q", asked, want)
	}
	for i := range want {
		if asked[i] != want[i] {
			t.Errorf("Admit asked %q, want %q", asked, want)
			break
		}
	}
	if capped != 1 || stagesRun != 1 {
		t.Errorf("capped %d, stages run %d, want 1, 1", capped, stagesRun)
	}
}
