//go:build unix

package proxy

import (
	"net/http"
	"net/netip"
	"strconv"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/edgerate/edge/rules"
)

// BenchmarkRefuse measures the refusal path through the real proxy: a rule
// that allows one request a minute, and requests from 100,000 client
// addresses that have all used it up, so that every request is answered
// 429. So many clients keep the store's blocked-key cache (a few keys a
// shard) from answering for them, as a flood of addresses would: nearly
// every decision looks its key up in the store's table. Each goroutine
// walks the addresses from its own starting point.
//
// Besides ns/op (wall time, goroutines together), it reports the CPU time
// the process spent a request, user and system as getrusage counts them,
// garbage collection included: on a machine shared with other work, what a
// request costs is CPU, not wall time. getrusage is why the file is
// unix-only. Compare runs with -cpu 1,2:
//
//	go test -run='^$' -bench=Refuse -cpu 1,2 -count 10 ./proxy/
func BenchmarkRefuse(b *testing.B) {
	const clients = 100_000
	p := benchProxy(b, rules.RuleConfig{Name: "per-ip", Limit: 1, Period: time.Minute}, 0)
	defer p.Close()
	addrs := make([]string, clients)
	for i := range addrs {
		a := netip.AddrFrom4([4]byte{10, byte(i >> 16), byte(i >> 8), byte(i)})
		addrs[i] = a.String() + ":" + strconv.Itoa(40000+i%20000)
	}
	req, err := http.NewRequest("GET", "http://api.example.com/v1/items", nil)
	if err != nil {
		b.Fatal(err)
	}
	w := &nopWriter{h: make(http.Header)}
	for _, want := range []int{200, 429} { // each client uses its one request up
		for _, a := range addrs {
			clear(w.h)
			req.RemoteAddr = a
			p.ServeHTTP(w, req)
			if w.status != want {
				b.Fatalf("%s: status %d, want %d", a, w.status, want)
			}
		}
	}

	var goroutines atomic.Int64
	b.ReportAllocs()
	b.ResetTimer()
	cpu := cpuTime(b)
	b.RunParallel(func(pb *testing.PB) {
		r, err := http.NewRequest("GET", "http://api.example.com/v1/items", nil)
		if err != nil {
			b.Error(err)
			return
		}
		w := &nopWriter{h: make(http.Header)}
		i := int(goroutines.Add(1)*clients/7) % clients // a starting point of its own
		for pb.Next() {
			clear(w.h)
			r.RemoteAddr = addrs[i]
			p.ServeHTTP(w, r)
			if w.status != 429 {
				b.Errorf("%s: status %d, want 429", addrs[i], w.status)
				return
			}
			if i++; i == clients {
				i = 0
			}
		}
	})
	cpu = cpuTime(b) - cpu
	b.ReportMetric(float64(cpu.Nanoseconds())/float64(b.N), "cpu-ns/req")
}

// cpuTime returns the user and system CPU time the process has used.
func cpuTime(b *testing.B) time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		b.Fatal(err)
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}
