// Package redistest runs real redis-server processes for tests: each on a
// free loopback port, without persistence, killed by its PID when the test
// ends. It is for tests only.
//
// redis-server cannot be handed a listener, nor report a port the kernel
// chose (port 0 turns its TCP listener off), so the port is picked here
// with FreePort and passed on: another process could take it in between,
// and then redis-server exits at once; Start and StartCluster then try
// again on another port.
package redistest

import (
	"bufio"
	"context"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/edgerate/edge/internal/wait"
	"github.com/redis/rueidis"
)

// Server is one redis-server process, restartable on the same port.
type Server struct {
	t      testing.TB
	Addr   string // 127.0.0.1:port
	Port   int
	cmd    *exec.Cmd
	exited chan struct{} // closed when cmd has exited and been waited for
	args   []string      // extra redis-server arguments (StartCluster)
}

// attempts is how many free ports Start and StartCluster try for one
// server before failing the test.
const attempts = 3

// Start starts a redis-server on a free port and waits until it answers.
// Without redis-server the test is skipped, unless the CI environment
// variable is set, where it fails: CI must install it (.ci/run does).
func Start(t testing.TB) *Server {
	t.Helper()
	return startOnFreePort(t, nil)
}

// startOnFreePort starts a redis-server with args on a free port, trying
// another port if it exits before answering (the port was taken).
func startOnFreePort(t testing.TB, args func(port int) []string) *Server {
	t.Helper()
	var err error
	for range attempts {
		s := &Server{t: t, Port: FreePort(t)}
		s.Addr = "127.0.0.1:" + strconv.Itoa(s.Port)
		if args != nil {
			s.args = args(s.Port)
		}
		t.Cleanup(s.Kill) // registered before start, which may fail t
		if err = s.start(); err == nil {
			return s
		}
	}
	t.Fatalf("redis-server did not start on any of %d free ports: %v", attempts, err)
	return nil
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
// ago, for a process that must be told its port (see the package
// comment). To dial an address that refuses connections, use
// RefusingAddr.
func FreePort(t testing.TB) int {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatalf("finding a free port: %v", err)
	}
	defer ln.Close()
	return ln.Addr().(*net.TCPAddr).Port
}

// RefusingAddr returns a loopback address that refuses connections, as
// one where Redis (or an origin) is down: a TCP socket is bound there and never listens,
// which holds the port until the test ends, so that no other process can
// start listening on it meanwhile.
func RefusingAddr(t testing.TB) string {
	t.Helper()
	fd, err := syscall.Socket(syscall.AF_INET, syscall.SOCK_STREAM|syscall.SOCK_CLOEXEC, 0)
	if err != nil {
		t.Fatalf("refusing address: socket: %v", err)
	}
	t.Cleanup(func() { syscall.Close(fd) })
	if err := syscall.Bind(fd, &syscall.SockaddrInet4{Addr: [4]byte{127, 0, 0, 1}}); err != nil {
		t.Fatalf("refusing address: bind: %v", err)
	}
	sa, err := syscall.Getsockname(fd)
	if err != nil {
		t.Fatalf("refusing address: getsockname: %v", err)
	}
	return "127.0.0.1:" + strconv.Itoa(sa.(*syscall.SockaddrInet4).Port)
}

// Restart starts the server again on its port, empty, after Kill (or for
// the first time), and waits until it answers PING.
func (s *Server) Restart() {
	s.t.Helper()
	if err := s.start(); err != nil {
		s.t.Fatal(err)
	}
}

// start starts the server on its port and waits until it answers PING. It
// returns an error if the process exits first, as it does when the port is
// taken; it fails the test if the server neither answers nor exits within
// 5 s.
func (s *Server) start() error {
	s.t.Helper()
	cmd := exec.Command(Path(s.t), "--port", strconv.Itoa(s.Port), "--bind", "127.0.0.1",
		"--save", "", "--appendonly", "no", "--daemonize", "no", "--loglevel", "warning")
	cmd.Args = append(cmd.Args, s.args...)
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	if err := cmd.Start(); err != nil {
		s.t.Fatalf("starting redis-server: %v", err)
	}
	exited := make(chan struct{})
	go func() {
		_ = cmd.Wait() // a killed server's error is expected
		close(exited)
	}()
	s.cmd, s.exited = cmd, exited
	gone := false
	wait.For(s.t, 5*time.Second, "redis-server on port "+strconv.Itoa(s.Port)+" to answer", func() bool {
		select {
		case <-exited:
			gone = true
			return true
		default:
			return s.ping()
		}
	})
	if gone {
		s.cmd = nil
		return fmt.Errorf("redis-server on port %d exited before answering", s.Port)
	}
	return nil
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
	<-s.exited
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

// Client returns a rueidis client of the server (RESP2, no client-side
// cache), closed when the test ends.
func (s *Server) Client() rueidis.Client {
	s.t.Helper()
	c := NewClient(s.t, s.Addr)
	s.t.Cleanup(c.Close)
	return c
}

// NewClient returns a rueidis client of the Redis server at addr, for the
// caller to close. It fails t if the server does not answer.
func NewClient(t testing.TB, addr string) rueidis.Client {
	t.Helper()
	c, err := rueidis.NewClient(rueidis.ClientOption{
		InitAddress:       []string{addr},
		ForceSingleClient: true,
		AlwaysRESP2:       true,
		DisableCache:      true,
		ClientSetInfo:     rueidis.DisableClientSetInfo,
		Dialer:            net.Dialer{Timeout: time.Second},
	})
	if err != nil {
		if c != nil {
			c.Close()
		}
		t.Fatalf("connecting to redis at %s: %v", addr, err)
	}
	return c
}

// CheckTTLs fails t if any key in the server has no TTL (SCAN, then PTTL of
// each key): a counter without one would never expire. It returns how many
// keys there are.
func (s *Server) CheckTTLs(t testing.TB) int {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	c := NewClient(t, s.Addr)
	defer c.Close()
	n := 0
	var cursor uint64
	for {
		e, err := c.Do(ctx, c.B().Scan().Cursor(cursor).Match("*").Count(1000).Build()).AsScanEntry()
		if err != nil {
			t.Fatalf("SCAN: %v", err)
		}
		for _, k := range e.Elements {
			n++
			ttl, err := c.Do(ctx, c.B().Pttl().Key(k).Build()).AsInt64()
			if err != nil {
				t.Fatalf("PTTL %s: %v", k, err)
			}
			if ttl == -1 {
				t.Errorf("key %q has no TTL", k)
			}
		}
		if cursor = e.Cursor; cursor == 0 {
			return n
		}
	}
}

// Cluster is a Redis Cluster of masters without replicas, each a Server.
type Cluster struct {
	Servers []*Server
}

// Addrs returns the addresses of the cluster's nodes.
func (c *Cluster) Addrs() []string {
	addrs := make([]string, len(c.Servers))
	for i, s := range c.Servers {
		addrs[i] = s.Addr
	}
	return addrs
}

// StartCluster starts n (at least 3) redis-server processes in cluster mode
// on free ports, each with its cluster config in a temporary directory,
// joins them with redis-cli --cluster create (no replicas, the slots split
// evenly), and waits until every node reports cluster_state:ok. Every
// process is killed by its PID when the test ends. Without redis-server or
// redis-cli the test is skipped, or fails under CI.
func StartCluster(t testing.TB, n int) *Cluster {
	t.Helper()
	if n < 3 {
		t.Fatalf("StartCluster: a Redis Cluster needs at least 3 masters, got %d", n)
	}
	Path(t)
	cli, err := exec.LookPath("redis-cli")
	if err != nil {
		if os.Getenv("CI") != "" {
			t.Fatal("redis-cli not installed: .ci/run must install the redis-server package (redis-tools)")
		}
		t.Skip("redis-cli not installed (apt-get install redis-tools); skipping the Redis Cluster tests")
	}
	dir := t.TempDir()
	c := &Cluster{}
	for range n {
		c.Servers = append(c.Servers, startOnFreePort(t, func(port int) []string {
			return []string{"--cluster-enabled", "yes",
				"--cluster-config-file", filepath.Join(dir, "nodes-"+strconv.Itoa(port)+".conf"),
				"--cluster-node-timeout", "5000", "--dir", dir}
		}))
	}
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	args := append([]string{"--cluster", "create"}, c.Addrs()...)
	args = append(args, "--cluster-replicas", "0", "--cluster-yes")
	if out, err := exec.CommandContext(ctx, cli, args...).CombinedOutput(); err != nil {
		t.Fatalf("redis-cli --cluster create: %v\n%s", err, out)
	}
	for _, s := range c.Servers {
		wait.For(t, 10*time.Second, "cluster_state:ok on redis cluster node "+s.Addr, func() bool {
			out, err := exec.CommandContext(ctx, cli, "-h", "127.0.0.1", "-p", strconv.Itoa(s.Port), "cluster", "info").Output()
			return err == nil && strings.Contains(string(out), "cluster_state:ok")
		})
	}
	return c
}

// CheckTTLs runs Server.CheckTTLs on every node and returns how many keys
// each holds.
func (c *Cluster) CheckTTLs(t testing.TB) []int {
	t.Helper()
	counts := make([]int, len(c.Servers))
	for i, s := range c.Servers {
		counts[i] = s.CheckTTLs(t)
	}
	return counts
}

// Client returns a Redis Cluster client of c (RESP2, no client-side cache),
// closed when the test ends.
func (c *Cluster) Client(t testing.TB) rueidis.Client {
	t.Helper()
	r, err := rueidis.NewClient(rueidis.ClientOption{
		InitAddress:   c.Addrs(),
		AlwaysRESP2:   true,
		DisableCache:  true,
		ClientSetInfo: rueidis.DisableClientSetInfo,
		Dialer:        net.Dialer{Timeout: time.Second},
	})
	if err != nil {
		t.Fatalf("connecting to the redis cluster: %v", err)
	}
	t.Cleanup(r.Close)
	return r
}
