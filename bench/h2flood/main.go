// Command h2flood is bench/h2flood.sh's load generator: well-behaved HTTP/2
// clients (prior knowledge, one connection each) ask at a steady rate,
// first alone, then beside a flood of each kind edge ends
// (edge_http2_floods_total's kinds), and it prints their latency
// percentiles in each phase, and each phase's p99 against the quiet one's.
//
// A client's latency is counted from the moment its request was due, not
// from when it was sent, so that a client held up by a slow answer counts
// the wait of the requests after it (no coordinated omission). The
// attackers flood as fast as they can and, when edge closes their
// connection, open another at once.
package main

import (
	"bufio"
	"bytes"
	"context"
	"flag"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"golang.org/x/net/http2"
	"golang.org/x/net/http2/hpack"
)

func main() {
	addr := flag.String("addr", "127.0.0.1:28395", "edge's plain listener, with h2c: true")
	host := flag.String("host", "bench.example", "the :authority of every request")
	path := flag.String("path", "/api/v1/items", "the well-behaved clients' path")
	clients := flag.Int("c", 8, "well-behaved clients, one connection each")
	rate := flag.Int("rate", 250, "requests a second of each well-behaved client")
	attackers := flag.Int("a", 2, "attacking connections at once, in each flood")
	dur := flag.Duration("d", 5*time.Second, "how long each phase runs")
	kinds := flag.String("kinds", "rapid_reset,continuation,control", "the floods, in order, after the quiet phase")
	pace := flag.Int("pace", 50000, "frames a second the attackers write together, at most; 0 for as fast as they can")
	pid := flag.Int("pid", 0, "edge's process id, to report the CPU it used in each phase (Linux)")
	roundsFlag := flag.Int("rounds", 3, "rounds of a quiet phase and each flood")
	from := flag.String("attack-from", "", "the loopback `address` the attackers connect from (another client than the well-behaved ones, for edge's per-client limits); default any")
	flag.Parse()
	if *from != "" {
		ip := net.ParseIP(*from)
		if ip == nil {
			fmt.Fprintf(os.Stderr, "h2flood: -attack-from %q is not an IP address\n", *from)
			os.Exit(2)
		}
		attackDialer.LocalAddr = &net.TCPAddr{IP: ip}
	}

	rounds := *roundsFlag
	phases := append([]string{"quiet"}, strings.Split(*kinds, ",")...)
	fmt.Printf("%-5s %-13s %9s %6s %10s %10s %10s %10s %9s %10s %12s\n", "round", "phase", "requests", "errors", "p50", "p90", "p99", "p99/quiet", "edge CPU", "conns/s", "frames/s")
	ratios := map[string][]float64{}
	for round := 1; round <= rounds; round++ {
		var quiet time.Duration
		for _, phase := range phases {
			cpu0 := cpuTime(*pid)
			r := run(*addr, *host, *path, *clients, *rate, *attackers, *pace, *dur, phase)
			cpu := "-"
			if *pid > 0 {
				cpu = fmt.Sprintf("%.0f%%", 100*(cpuTime(*pid)-cpu0).Seconds()/dur.Seconds())
			}
			ratio := "-"
			if phase == "quiet" {
				quiet = r.p(0.99)
			} else if quiet > 0 {
				x := float64(r.p(0.99)) / float64(quiet)
				ratios[phase] = append(ratios[phase], x)
				ratio = fmt.Sprintf("%.2fx", x)
			}
			fmt.Printf("%-5d %-13s %9d %6d %10v %10v %10v %10s %9s %10.0f %12.0f\n", round, phase, len(r.lat), r.errors,
				r.p(0.5).Round(time.Microsecond), r.p(0.9).Round(time.Microsecond), r.p(0.99).Round(time.Microsecond), ratio, cpu,
				float64(r.conns)/dur.Seconds(), float64(r.frames)/dur.Seconds())
		}
	}
	// Each flood's p99 against the quiet p99 of its own round, so that a
	// noisy neighbour in one round weighs on both sides of the ratio.
	fmt.Println()
	for _, phase := range phases[1:] {
		x := ratios[phase]
		slices.Sort(x)
		if len(x) > 0 {
			fmt.Printf("%-13s p99/quiet p99: median %.2fx (range %.2fx to %.2fx over %d rounds)\n", phase, x[len(x)/2], x[0], x[len(x)-1], len(x))
		}
	}
}

// cpuTime is the CPU time process pid has used (user and system), from
// /proc/pid/stat; 0 when pid is 0 or it cannot be read.
func cpuTime(pid int) time.Duration {
	if pid <= 0 {
		return 0
	}
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return 0
	}
	// The fields after the command, which is in parentheses and may hold
	// spaces: utime and stime are the 12th and 13th of them, in clock
	// ticks (USER_HZ, 100 on Linux).
	f := strings.Fields(string(b[bytes.LastIndexByte(b, ')')+1:]))
	if len(f) < 13 {
		return 0
	}
	var ut, st int64
	fmt.Sscan(f[11], &ut)
	fmt.Sscan(f[12], &st)
	return time.Duration(ut+st) * 10 * time.Millisecond
}

// result is one phase's figures.
type result struct {
	lat           []time.Duration // sorted
	errors        int
	conns, frames int64 // the attackers'
}

// p is the q-quantile of the latencies.
func (r result) p(q float64) time.Duration {
	if len(r.lat) == 0 {
		return 0
	}
	return r.lat[min(int(q*float64(len(r.lat))), len(r.lat)-1)]
}

// run runs one phase: the clients, and the attackers of flood ("quiet":
// none), for d.
func run(addr, host, path string, clients, rate, attackers, pace int, d time.Duration, flood string) result {
	ctx, cancel := context.WithTimeout(context.Background(), d)
	defer cancel()
	var wg sync.WaitGroup
	var conns, frames atomic.Int64
	if flood != "quiet" {
		for range attackers {
			wg.Go(func() { attack(ctx, addr, host, flood, pace, &conns, &frames) })
		}
	}
	lats := make([][]time.Duration, clients)
	errs := make([]int, clients)
	for i := range clients {
		wg.Go(func() { lats[i], errs[i] = ask(ctx, addr, host, path, rate) })
	}
	wg.Wait()
	var r result
	for i := range clients {
		r.lat = append(r.lat, lats[i]...)
		r.errors += errs[i]
	}
	slices.Sort(r.lat)
	r.conns, r.frames = conns.Load(), frames.Load()
	return r
}

// ask sends GETs at rate a second on one HTTP/2 connection of its own
// until ctx ends, and returns each one's latency from when it was due.
func ask(ctx context.Context, addr, host, path string, rate int) ([]time.Duration, int) {
	var p http.Protocols
	p.SetUnencryptedHTTP2(true)
	tr := &http.Transport{Protocols: &p, DialContext: func(ctx context.Context, network, _ string) (net.Conn, error) {
		return (&net.Dialer{}).DialContext(ctx, network, addr)
	}}
	defer tr.CloseIdleConnections()
	client := &http.Client{Transport: tr, Timeout: 10 * time.Second}
	interval := time.Second / time.Duration(rate)
	var lat []time.Duration
	errs := 0
	for due := time.Now(); ctx.Err() == nil; due = due.Add(interval) {
		if wait := time.Until(due); wait > 0 {
			select {
			case <-time.After(wait):
			case <-ctx.Done():
				return lat, errs
			}
		}
		req, _ := http.NewRequest("GET", "http://"+host+path, nil)
		resp, err := client.Do(req)
		if err != nil {
			errs++
			continue
		}
		io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		if resp.StatusCode != 200 {
			errs++
			continue
		}
		lat = append(lat, time.Since(due))
	}
	return lat, errs
}

// attackDialer dials the attackers' connections (-attack-from).
var attackDialer net.Dialer

// attack floods edge with frames of kind, a connection at a time, until
// ctx ends, counting the connections it opened and the frames it wrote,
// the attackers together at most pace frames a second (0: no bound).
func attack(ctx context.Context, addr, host, kind string, pace int, conns, frames *atomic.Int64) {
	start := time.Now()
	for ctx.Err() == nil {
		c, err := attackDialer.DialContext(ctx, "tcp", addr)
		if err != nil {
			continue
		}
		conns.Add(1)
		frames.Add(flood(ctx, c, host, kind, func(n int64) {
			if pace > 0 {
				// Behind the pace by what has been written since start.
				if ahead := time.Duration(frames.Load()+n)*time.Second/time.Duration(pace) - time.Since(start); ahead > 0 {
					time.Sleep(ahead)
				}
			}
		}))
		c.Close()
	}
}

// flood writes frames of kind on c until a write fails or ctx ends, with
// the server's frames read and dropped meanwhile, and returns how many
// it wrote; it calls flushed with that count after each flush.
func flood(ctx context.Context, c net.Conn, host, kind string, flushed func(int64)) int64 {
	stop := context.AfterFunc(ctx, func() { c.Close() })
	defer stop()
	go io.Copy(io.Discard, c) // ends when c closes
	w := bufio.NewWriterSize(c, 16<<10)
	fr := http2.NewFramer(w, nil)
	io.WriteString(w, http2.ClientPreface)
	fr.WriteSettings()
	var hbuf bytes.Buffer
	enc := hpack.NewEncoder(&hbuf)
	for _, f := range []hpack.HeaderField{{Name: ":method", Value: "GET"}, {Name: ":scheme", Value: "http"},
		{Name: ":authority", Value: host}, {Name: ":path", Value: "/flood"}} {
		enc.WriteField(f)
	}
	block := hbuf.Bytes()
	var n int64
	if kind == "continuation" {
		fr.WriteHeaders(http2.HeadersFrameParam{StreamID: 1, BlockFragment: block, EndStream: true})
		n++
	}
	for id := uint32(1); ; id += 2 {
		var err error
		switch kind {
		case "rapid_reset":
			fr.WriteHeaders(http2.HeadersFrameParam{StreamID: id, BlockFragment: block, EndStream: true, EndHeaders: true})
			err = fr.WriteRSTStream(id, http2.ErrCodeCancel)
			n += 2
		case "continuation":
			err = fr.WriteContinuation(1, false, nil)
			n++
		case "control":
			err = fr.WritePing(false, [8]byte{})
			n++
		default:
			fmt.Fprintf(os.Stderr, "h2flood: no flood %q\n", kind)
			os.Exit(2)
		}
		if err == nil && id%64 == 1 {
			err = w.Flush()
			flushed(n)
		}
		if err != nil {
			return n
		}
	}
}
