package guard

import (
	"bufio"
	"io"
	"net"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/edgerate/edge/internal/wait"
)

// markConn is a connection a test stage marked: its responses start with
// the mark.
type markConn struct {
	net.Conn
	mark string
	once sync.Once
}

func (c *markConn) Write(b []byte) (int, error) {
	c.once.Do(func() { io.WriteString(c.Conn, c.mark) })
	return c.Conn.Write(b)
}

// TestJoinSockets: a Listener on a Join serves every socket through one
// server and one connection cap, runs each socket's own stages on its
// connections only, and names each connection's socket to OnConnections;
// Close closes every socket and stops their accepting goroutines.
func TestJoinSockets(t *testing.T) {
	plain, err := net.Listen("tcp", "127.0.0.1:0")
	must(t, err)
	marked, err := net.Listen("tcp", "127.0.0.1:0")
	must(t, err)
	stage := func(c net.Conn) (StageResult, error) { return StageResult{Conn: &markConn{Conn: c, mark: "MARK"}}, nil }
	joined, err := Join(Socket{Listener: plain, Name: "public"}, Socket{Listener: marked, Name: "tls", Stages: []Stage{stage}})
	must(t, err)
	var mu sync.Mutex
	open := map[string]int{}
	l := NewListener(joined, ListenerOptions{MaxConnections: 2, OnConnections: func(s string, d int) {
		mu.Lock()
		open[s] += d
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
	if got := l.Addr().String(); got != plain.Addr().String() {
		t.Errorf("Addr: got %s, want the first socket's %s", got, plain.Addr())
	}
	get := func(c net.Conn) string {
		io.WriteString(c, "GET / HTTP/1.1\r\nHost: x\r\n\r\n")
		must(t, c.SetReadDeadline(time.Now().Add(5*time.Second)))
		line, _ := bufio.NewReader(c).ReadString('\n')
		return line
	}
	a, err := net.Dial("tcp", plain.Addr().String())
	must(t, err)
	defer a.Close()
	b, err := net.Dial("tcp", marked.Addr().String())
	must(t, err)
	defer b.Close()
	if got := get(a); got != "HTTP/1.1 200 OK\r\n" {
		t.Errorf("plain socket: got %q", got)
	}
	if got := get(b); got != "MARKHTTP/1.1 200 OK\r\n" {
		t.Errorf("staged socket: got %q, want the stage's mark first", got)
	}
	mu.Lock()
	if open["public"] != 1 || open["tls"] != 1 {
		t.Errorf("open by socket: got %v, want one each", open)
	}
	mu.Unlock()
	// Both count against one cap of 2: a third connection, to either
	// socket, closes the longest idle one, of either socket.
	c, err := net.Dial("tcp", marked.Addr().String())
	must(t, err)
	defer c.Close()
	if got := get(c); !strings.HasSuffix(got, "HTTP/1.1 200 OK\r\n") {
		t.Errorf("third connection: got %q", got)
	}
	closed := 0
	for _, old := range []net.Conn{a, b} {
		must(t, old.SetReadDeadline(time.Now().Add(time.Second)))
		if _, err := old.Read(make([]byte, 1)); err == io.EOF {
			closed++
		}
	}
	if closed != 1 {
		t.Errorf("%d of the two idle connections were closed at the shared cap, want 1", closed)
	}
	wait.For(t, 5*time.Second, "the closed one counted out", func() bool {
		mu.Lock()
		defer mu.Unlock()
		return open["public"]+open["tls"] == 2 && open["tls"] >= 1
	})
}

func TestJoinNeedsASocket(t *testing.T) {
	if _, err := Join(); err == nil {
		t.Error("Join() accepted no sockets")
	}
}

func must(t testing.TB, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}
