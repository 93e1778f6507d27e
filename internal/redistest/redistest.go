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
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/redis/rueidis"
)

// Server is one redis-server process, restartable on the same port.
type Server struct {
	t    testing.TB
	Addr string // 127.0.0.1:port
	Port int
	cmd  *exec.Cmd
	args []string // extra redis-server arguments (StartCluster)
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
	cmd.Args = append(cmd.Args, s.args...)
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
		s := &Server{t: t, Port: FreePort(t)}
		s.Addr = "127.0.0.1:" + strconv.Itoa(s.Port)
		s.args = []string{"--cluster-enabled", "yes",
			"--cluster-config-file", filepath.Join(dir, "nodes-"+strconv.Itoa(s.Port)+".conf"),
			"--cluster-node-timeout", "5000", "--dir", dir}
		t.Cleanup(s.Kill) // registered before Restart, which may fail t
		s.Restart()
		c.Servers = append(c.Servers, s)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	args := append([]string{"--cluster", "create"}, c.Addrs()...)
	args = append(args, "--cluster-replicas", "0", "--cluster-yes")
	if out, err := exec.CommandContext(ctx, cli, args...).CombinedOutput(); err != nil {
		t.Fatalf("redis-cli --cluster create: %v\n%s", err, out)
	}
	deadline := time.Now().Add(10 * time.Second)
	for _, s := range c.Servers {
		for {
			out, err := exec.CommandContext(ctx, cli, "-h", "127.0.0.1", "-p", strconv.Itoa(s.Port), "cluster", "info").Output()
			if err == nil && strings.Contains(string(out), "cluster_state:ok") {
				break
			}
			if time.Now().After(deadline) {
				t.Fatalf("redis cluster node %s not ok within 10s: %v\n%s", s.Addr, err, out)
			}
			time.Sleep(20 * time.Millisecond)
		}
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
