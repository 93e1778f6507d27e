// Package redistest runs real redis-server processes for tests: each on a
// free loopback port, without persistence, killed by its PID when the test
// ends. It is for tests only.
package redistest

import (
	"bufio"
	"context"
	"fmt"
	"net"
	"os"
	"os/exec"
	"strconv"
	"syscall"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
)

// Server is one redis-server process, restartable on the same port.
type Server struct {
	t    testing.TB
	Addr string // 127.0.0.1:port
	Port int
	cmd  *exec.Cmd
}

// Start starts a redis-server on a free port and waits until it answers.
// Without redis-server the test is skipped, unless the CI environment
// variable is set, where it fails: CI must install it (.ci/run does).
func Start(t testing.TB) *Server {
	t.Helper()
	s := &Server{t: t, Port: FreePort(t)}
	s.Addr = "127.0.0.1:" + strconv.Itoa(s.Port)
	s.Restart()
	t.Cleanup(s.Kill)
	return s
}

// Path returns redis-server's path, skipping or failing t without it.
func Path(t testing.TB) string {
	t.Helper()
	path, err := exec.LookPath("redis-server")
	if err != nil {
		if os.Getenv("CI") != "" {
			t.Fatal("redis-server not installed: .ci/run must install the redis-server package")
		}
		t.Skip("redis-server not installed (apt-get install redis-server); skipping the tests against a real Redis")
	}
	return path
}

// FreePort returns a loopback TCP port that nothing listened on a moment
// ago.
func FreePort(t testing.TB) int {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatalf("finding a free port: %v", err)
	}
	defer ln.Close()
	return ln.Addr().(*net.TCPAddr).Port
}

// Restart starts the server again on its port, empty, after Kill (or for
// the first time), and waits until it answers PING.
func (s *Server) Restart() {
	s.t.Helper()
	cmd := exec.Command(Path(s.t), "--port", strconv.Itoa(s.Port), "--bind", "127.0.0.1",
		"--save", "", "--appendonly", "no", "--daemonize", "no", "--loglevel", "warning")
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	if err := cmd.Start(); err != nil {
		s.t.Fatalf("starting redis-server: %v", err)
	}
	s.cmd = cmd
	deadline := time.Now().Add(5 * time.Second)
	for {
		if s.ping() {
			return
		}
		if time.Now().After(deadline) {
			s.Kill()
			s.t.Fatalf("redis-server on port %d did not answer within 5s", s.Port)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

func (s *Server) ping() bool {
	c, err := net.DialTimeout("tcp", s.Addr, 100*time.Millisecond)
	if err != nil {
		return false
	}
	defer c.Close()
	_ = c.SetDeadline(time.Now().Add(200 * time.Millisecond))
	if _, err := fmt.Fprint(c, "PING\r\n"); err != nil {
		return false
	}
	line, err := bufio.NewReader(c).ReadString('\n')
	return err == nil && line == "+PONG\r\n"
}

// Kill kills the server by its PID (SIGKILL) and waits for it to exit. It
// does nothing if the server is not running.
func (s *Server) Kill() {
	if s.cmd == nil {
		return
	}
	_ = s.cmd.Process.Signal(syscall.SIGCONT) // a stopped process dies on SIGKILL too, but be sure
	_ = s.cmd.Process.Kill()
	_ = s.cmd.Wait()
	s.cmd = nil
}

// Stop pauses the server with SIGSTOP: connections stay open and nothing
// answers, as with a network partition.
func (s *Server) Stop() { s.signal(syscall.SIGSTOP) }

// Cont resumes a stopped server.
func (s *Server) Cont() { s.signal(syscall.SIGCONT) }

func (s *Server) signal(sig syscall.Signal) {
	s.t.Helper()
	if s.cmd == nil {
		s.t.Fatal("redis-server is not running")
	}
	if err := s.cmd.Process.Signal(sig); err != nil {
		s.t.Fatalf("signalling redis-server: %v", err)
	}
}

// Client returns a go-redis client of the server, closed when the test
// ends.
func (s *Server) Client() *redis.Client {
	c := redis.NewClient(&redis.Options{Addr: s.Addr, Protocol: 2, DisableIdentity: true})
	s.t.Cleanup(func() { c.Close() })
	return c
}

// CheckTTLs fails t if any key in the server has no TTL (SCAN, then PTTL of
// each key): a counter without one would never expire. It returns how many
// keys there are.
func (s *Server) CheckTTLs(t testing.TB) int {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	c := s.Client()
	n := 0
	iter := c.Scan(ctx, 0, "*", 1000).Iterator()
	for iter.Next(ctx) {
		n++
		ttl, err := c.PTTL(ctx, iter.Val()).Result()
		if err != nil {
			t.Fatalf("PTTL %s: %v", iter.Val(), err)
		}
		if ttl == -1 {
			t.Errorf("key %q has no TTL", iter.Val())
		}
	}
	if err := iter.Err(); err != nil {
		t.Fatalf("SCAN: %v", err)
	}
	return n
}
