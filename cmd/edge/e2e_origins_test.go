package main

import (
	"bufio"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/edgerate/edge/internal/wait"
)

// originProcessEnv, set to a name, makes the test binary an origin
// server (TestMain): it listens on a loopback port, prints "listening
// ADDR", and answers every request 200 with its name until it is killed.
const originProcessEnv = "EDGE_TEST_ORIGIN_PROCESS"

func originProcess(name string) int {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	fmt.Printf("listening %s\n", ln.Addr())
	err = http.Serve(ln, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		io.Copy(io.Discard, r.Body)
		time.Sleep(time.Millisecond) // a request is in flight a while, as on a real server
		io.WriteString(w, name)
	}))
	fmt.Fprintln(os.Stderr, err)
	return 1
}

// startOriginProcess runs the test binary as an origin named name, and
// returns the process and its address; it is killed when the test ends.
func startOriginProcess(t *testing.T, name string) (*exec.Cmd, string) {
	t.Helper()
	cmd := exec.Command(os.Args[0], "-test.run=^$")
	cmd.Env = append(os.Environ(), originProcessEnv+"="+name)
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	exited := make(chan struct{})
	go func() { cmd.Wait(); close(exited) }()
	t.Cleanup(func() {
		cmd.Process.Kill()
		<-exited
	})
	line, err := bufio.NewReader(out).ReadString('\n')
	addr, ok := strings.CutPrefix(strings.TrimSpace(line), "listening ")
	if err != nil || !ok {
		t.Fatalf("origin %s: %q, %v", name, line, err)
	}
	return cmd, addr
}

// TestEndToEndOriginKilledUnderLoad runs the binary in front of three
// real origin processes, with active checks and passive ejection, and
// kills one of them (SIGKILL) while clients send GETs as fast as they
// can: no request fails once the server is ejected, and none but those
// in flight on it when it died (which reset_before_response retries on
// another server, so none at all is expected).
func TestEndToEndOriginKilledUnderLoad(t *testing.T) {
	bin := buildEdge(t)
	var addrs [3]string
	var procs [3]*exec.Cmd
	for i := range procs {
		procs[i], addrs[i] = startOriginProcess(t, fmt.Sprint("o", i))
	}
	cfgPath := filepath.Join(t.TempDir(), "edge.yaml")
	cfg := fmt.Sprintf(`listen: %q
admin_listen: %q
domains:
  - name: app
    hosts: [app.example.com]
    origins: [{url: "http://%s"}, {url: "http://%s"}, {url: "http://%s"}]
    health: {path: /healthz, interval: 200ms, timeout: 100ms, unhealthy_after: 2, healthy_after: 2}
    rules:
      - {name: per-ip, limit: 100000000, period: 1m}
`, publicAnyPort, adminAnyPort, addrs[0], addrs[1], addrs[2])
	if err := os.WriteFile(cfgPath, []byte(cfg), 0o644); err != nil {
		t.Fatal(err)
	}
	e := startBinary(t, bin, cfgPath)

	const clients = 4
	type result struct {
		at     time.Time
		status int // 0: the request failed
		body   string
	}
	var mu sync.Mutex
	var results []result
	var stop atomic.Bool
	var wg sync.WaitGroup
	for range clients {
		wg.Add(1)
		go func() {
			defer wg.Done()
			tr := &http.Transport{}
			defer tr.CloseIdleConnections()
			for !stop.Load() {
				req, _ := http.NewRequest("GET", "http://"+e.public+"/", nil)
				req.Host = "app.example.com"
				resp, err := tr.RoundTrip(req)
				r := result{at: time.Now()}
				if err == nil {
					b, _ := io.ReadAll(resp.Body)
					resp.Body.Close()
					r.status, r.body = resp.StatusCode, string(b)
				}
				mu.Lock()
				results = append(results, r)
				mu.Unlock()
			}
		}()
	}
	time.Sleep(time.Second)
	killedAt := time.Now()
	if err := procs[1].Process.Kill(); err != nil {
		t.Fatal(err)
	}
	// Ejected: passively by its failures, or by two failed checks.
	var ejectedAt time.Time
	wait.For(t, 5*time.Second, "the killed server to be out", func() bool {
		for _, s := range originServers(t, e.admin) {
			if s.Server == "http://"+addrs[1] && !s.Healthy {
				ejectedAt = time.Now()
				return true
			}
		}
		return false
	})
	time.Sleep(1500 * time.Millisecond)
	stop.Store(true)
	wg.Wait()

	var before, after, failedBefore, failedAfter, fromKilled int
	for _, r := range results {
		ok := r.status == 200 && strings.HasPrefix(r.body, "o")
		switch {
		case r.at.Before(killedAt):
			before++
		case r.at.After(ejectedAt):
			after++
			if !ok {
				failedAfter++
			}
			if r.body == "o1" {
				fromKilled++
			}
		default:
			if !ok {
				failedBefore++
			}
		}
	}
	t.Logf("%d requests before the kill, %d after the ejection (%.0f ms after the kill); %d failed between, %d after",
		before, after, float64(ejectedAt.Sub(killedAt).Microseconds())/1000, failedBefore, failedAfter)
	if before < 100 || after < 100 {
		t.Fatalf("too little load: %d requests before, %d after", before, after)
	}
	if failedAfter != 0 || fromKilled != 0 {
		t.Errorf("%d requests failed and %d were answered by the killed server after its ejection, want none", failedAfter, fromKilled)
	}
	if failedBefore > clients {
		t.Errorf("%d requests failed between the kill and the ejection, want at most the %d in flight", failedBefore, clients)
	}
	e.stop(t)
}

// originServer is a server of GET /v1/origins, as the test reads it.
type originServer struct {
	Server  string `json:"server"`
	Healthy bool   `json:"healthy"`
}

// originServers reads GET /v1/origins of the admin listener at admin: the
// servers of its one domain.
func originServers(t *testing.T, admin string) []originServer {
	t.Helper()
	var v struct {
		Domains []struct {
			Servers []originServer `json:"servers"`
		} `json:"domains"`
	}
	adminJSON(t, admin, "/v1/origins", &v)
	if len(v.Domains) != 1 {
		t.Fatalf("GET /v1/origins: %d domains, want 1", len(v.Domains))
	}
	return v.Domains[0].Servers
}
