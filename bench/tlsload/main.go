// Command tlsload is bench/tls.sh's load generator: HTTPS GETs over TLS
// 1.3 with X25519 as the only key exchange offered. With -new each of -c
// workers opens a connection, makes a full handshake (no session is ever
// resumed: there is no session cache), sends one GET, reads the response,
// closes the connection and starts again; without it each worker keeps one
// connection alive and sends its GETs on it one after the other. Every
// connection's TLS is checked (version 1.3, X25519, not resumed) and a
// connection that differs is counted.
//
// With -pids it reads the CPU time (utime + stime, all threads) of those
// processes from /proc/PID/stat at the start and at the end of the
// measured window and prints the difference in clock ticks: with kept-alive
// connections the window starts once every connection has made its
// handshake, so that what is measured is the requests alone.
//
// It prints what bench/tls.sh reads, in wrk's words, as bench/newconn
// does: the requests done, requests/s, the 50th and 99th latency
// percentiles, the responses that were not 2xx or 3xx, the socket errors;
// the server's CPU ticks, and the TLS negotiated.
package main

import (
	"bufio"
	"bytes"
	"crypto/tls"
	"errors"
	"flag"
	"fmt"
	"net"
	"os"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"
)

func main() {
	addr := flag.String("addr", "127.0.0.1:28181", "host:port to connect to")
	path := flag.String("path", "/api/v1/items", "request target")
	host := flag.String("host", "bench.example", "Host field and TLS server name")
	conns := flag.Int("c", 16, "concurrent connections")
	dur := flag.Duration("d", 2*time.Second, "how long to run")
	fresh := flag.Bool("new", false, "a new connection, with a full handshake, per request")
	pidList := flag.String("pids", "", "comma-separated PIDs whose CPU time to measure over the run")
	flag.Parse()
	var pids []string
	if *pidList != "" {
		pids = strings.Split(*pidList, ",")
	}
	req := []byte("GET " + *path + " HTTP/1.1\r\nHost: " + *host + "\r\nUser-Agent: tlsload\r\n\r\n")
	conf := &tls.Config{
		ServerName: *host,
		MinVersion: tls.VersionTLS13,
		MaxVersion: tls.VersionTLS13,
		// The key exchange measured, alone: Go would offer X25519MLKEM768
		// first, and OpenSSL 3.0 (nginx's) does not know it.
		CurvePreferences:   []tls.CurveID{tls.X25519},
		ClientSessionCache: nil, // never resume: every handshake is a full one
		// The server's identity is not what is measured, and verifying
		// its certificate would only load the load generator's core.
		InsecureSkipVerify: true,
	}

	type result struct {
		lat                        []time.Duration
		bad, connErr, readErr, odd int
		handshakes                 int
		suites                     map[uint16]int
	}
	results := make([]result, *conns)
	open := make([]*tls.Conn, *conns) // each kept-alive worker's connection at the end
	var stop, start time.Time
	var ready, wg sync.WaitGroup
	begin := make(chan struct{})
	ready.Add(*conns)
	for i := range results {
		wg.Go(func() {
			r := &results[i]
			r.suites = map[uint16]int{}
			br := bufio.NewReaderSize(nil, 4096)
			var c *tls.Conn
			dial := func() bool {
				nc, err := net.Dial("tcp", *addr)
				if err != nil {
					r.connErr++
					return false
				}
				c = tls.Client(nc, conf)
				if err := c.Handshake(); err != nil {
					c.Close()
					c = nil
					r.connErr++
					return false
				}
				r.handshakes++
				st := c.ConnectionState()
				r.suites[st.CipherSuite]++
				if st.Version != tls.VersionTLS13 || st.CurveID != tls.X25519 || st.DidResume {
					r.odd++
				}
				br.Reset(c)
				return true
			}
			if !*fresh {
				for !dial() && r.connErr < 10 {
				}
			}
			ready.Done()
			<-begin
			for time.Now().Before(stop) {
				t0 := time.Now()
				if c == nil && !dial() {
					continue
				}
				status, err := roundTrip(c, br, req)
				if *fresh || err != nil {
					c.Close()
					c = nil
				}
				if err != nil {
					r.readErr++
					continue
				}
				r.lat = append(r.lat, time.Since(t0))
				if status >= 400 {
					r.bad++
				}
			}
			open[i] = c
		})
	}
	ready.Wait()
	cpu0 := cpuTicks(pids)
	start = time.Now()
	stop = start.Add(*dur)
	close(begin)
	wg.Wait()
	elapsed := time.Since(start)
	cpu1 := cpuTicks(pids)
	for _, c := range open {
		if c != nil {
			c.Close()
		}
	}

	var lat []time.Duration
	bad, connErr, readErr, odd, handshakes := 0, 0, 0, 0, 0
	suites := map[uint16]int{}
	for _, r := range results {
		lat = append(lat, r.lat...)
		bad, connErr, readErr = bad+r.bad, connErr+r.connErr, readErr+r.readErr
		odd, handshakes = odd+r.odd, handshakes+r.handshakes
		for s, n := range r.suites {
			suites[s] += n
		}
	}
	if len(lat) == 0 {
		fmt.Fprintln(os.Stderr, "tlsload: no request completed")
		os.Exit(1)
	}
	slices.Sort(lat)
	pct := func(p int) string {
		return fmt.Sprintf("%.3fms", float64(lat[(len(lat)-1)*p/100])/1e6)
	}
	how := "on kept-alive connections"
	if *fresh {
		how = "a new connection each"
	}
	fmt.Printf("  %d requests in %.2fs, %s\n", len(lat), elapsed.Seconds(), how)
	fmt.Printf("     50%% %s\n     99%% %s\n", pct(50), pct(99))
	if bad > 0 {
		fmt.Printf("  Non-2xx or 3xx responses: %d\n", bad)
	}
	if connErr+readErr > 0 {
		fmt.Printf("  Socket errors: connect %d, read %d, write 0, timeout 0\n", connErr, readErr)
	}
	fmt.Printf("Requests/sec: %.2f\n", float64(len(lat))/elapsed.Seconds())
	if pids != nil {
		fmt.Printf("Server CPU ticks: %d\n", cpu1-cpu0)
	}
	fmt.Printf("TLS: %d full handshakes, TLS 1.3 with X25519", handshakes)
	for s, n := range suites {
		fmt.Printf(", %s %d", tls.CipherSuiteName(s), n)
	}
	fmt.Printf("; other version, group or resumed: %d\n", odd)
}

// roundTrip writes req on c and reads the response, which must have a
// Content-Length (every server tls.sh measures sends one), returning its
// status.
func roundTrip(c *tls.Conn, br *bufio.Reader, req []byte) (int, error) {
	if _, err := c.Write(req); err != nil {
		return 0, err
	}
	line, err := br.ReadSlice('\n')
	if err != nil {
		return 0, err
	}
	if len(line) < 12 || !bytes.HasPrefix(line, []byte("HTTP/1.")) {
		return 0, fmt.Errorf("bad status line %q", line)
	}
	status, err := strconv.Atoi(string(line[9:12]))
	if err != nil {
		return 0, fmt.Errorf("bad status line %q", line)
	}
	length := -1
	for {
		line, err := br.ReadSlice('\n')
		if err != nil {
			return 0, err
		}
		line = bytes.TrimRight(line, "\r\n")
		if len(line) == 0 {
			break
		}
		name, value, ok := bytes.Cut(line, []byte(":"))
		if ok && bytes.EqualFold(name, []byte("Content-Length")) {
			if length, err = strconv.Atoi(string(bytes.TrimSpace(value))); err != nil {
				return 0, fmt.Errorf("bad Content-Length %q", value)
			}
		}
	}
	if length < 0 {
		return 0, errors.New("a response without Content-Length")
	}
	if _, err := br.Discard(length); err != nil {
		return 0, err
	}
	return status, nil
}

// cpuTicks returns the sum of utime and stime of the processes, in clock
// ticks, from /proc/PID/stat (a process's figures include all its
// threads). It exits when one cannot be read: a measurement without it
// would be wrong.
func cpuTicks(pids []string) int64 {
	var total int64
	for _, pid := range pids {
		b, err := os.ReadFile("/proc/" + pid + "/stat")
		if err != nil {
			fmt.Fprintln(os.Stderr, "tlsload:", err)
			os.Exit(1)
		}
		// After the ")" that ends the command name: state is the 1st
		// field, utime the 12th and stime the 13th.
		f := strings.Fields(string(b[bytes.LastIndexByte(b, ')')+1:]))
		for _, v := range f[11:13] {
			n, err := strconv.ParseInt(v, 10, 64)
			if err != nil {
				fmt.Fprintln(os.Stderr, "tlsload: /proc/"+pid+"/stat:", err)
				os.Exit(1)
			}
			total += n
		}
	}
	return total
}
