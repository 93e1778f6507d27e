//go:build unix

package proxy

import (
	"crypto/ed25519"
	"encoding/base64"
	"net/http"
	"net/netip"
	"os"
	"path/filepath"
	"strconv"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/golang-jwt/jwt/v5"
	"github.com/prometheus/client_golang/prometheus/testutil"

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
	addrs := benchAddrs(clients)
	benchRefusals(b, p, clients, func(r *http.Request, i int) { r.RemoteAddr = addrs[i] })
}

// BenchmarkRefuseByToken compares a refusal keyed by jwt:sub, whose token
// the verification cache holds, with one keyed by ip, side by side: 1,000
// clients, each with its own address and, for jwt:sub, its own EdDSA
// token in Authorization (both variants send it; only jwt:sub verifies
// it). docs/performance.md records the ratio, which must stay at most
// 1.2.
//
//	go test -run='^$' -bench=RefuseByToken -count 6 ./proxy/
func BenchmarkRefuseByToken(b *testing.B) {
	const clients = 1000
	pub, key, _ := ed25519.GenerateKey(nil)
	dir := b.TempDir()
	keys := filepath.Join(dir, "jwks.json")
	doc := `{"keys":[{"kty":"OKP","crv":"Ed25519","kid":"k","x":"` + base64.RawURLEncoding.EncodeToString(pub) + `"}]}`
	if err := os.WriteFile(keys, []byte(doc), 0o600); err != nil {
		b.Fatal(err)
	}
	addrs := benchAddrs(clients)
	tokens := make([]string, clients)
	for i := range tokens {
		tok := jwt.NewWithClaims(jwt.SigningMethodEdDSA, jwt.MapClaims{"sub": "user-" + strconv.Itoa(i), "exp": 4102444800})
		tok.Header["kid"] = "k"
		s, err := tok.SignedString(key)
		if err != nil {
			b.Fatal(err)
		}
		tokens[i] = "Bearer " + s
	}
	for _, key := range []string{"ip", "jwt:sub"} {
		b.Run(key, func(b *testing.B) {
			p := benchProxyJWT(b, rules.RuleConfig{Name: "per-client", Limit: 1, Period: time.Minute, Key: []string{key}},
				&rules.JWTConfig{KeysFile: keys})
			defer p.Close()
			benchRefusals(b, p, clients, func(r *http.Request, i int) {
				r.RemoteAddr = addrs[i]
				r.Header["Authorization"] = tokens[i : i+1]
			})
			// Keyed by the tokens, not by the address of a missing claim.
			if valid := testutil.ToFloat64(p.metrics.jwt.WithLabelValues("api.example.com", "valid")); key == "jwt:sub" && valid < 2*clients {
				b.Errorf("%v valid tokens, want every request's", valid)
			}
		})
	}
}

// benchAddrs are n client addresses with ports, 10.0.0.0 on.
func benchAddrs(n int) []string {
	addrs := make([]string, n)
	for i := range addrs {
		a := netip.AddrFrom4([4]byte{10, byte(i >> 16), byte(i >> 8), byte(i)})
		addrs[i] = a.String() + ":" + strconv.Itoa(40000+i%20000)
	}
	return addrs
}

// benchRefusals has clients clients (set on a request by client) each use
// up their one request, then measures refusals of all of them, each
// goroutine walking the clients from its own starting point.
func benchRefusals(b *testing.B, p *Proxy, clients int, client func(r *http.Request, i int)) {
	req, err := http.NewRequest("GET", "http://api.example.com/v1/items", nil)
	if err != nil {
		b.Fatal(err)
	}
	w := &nopWriter{h: make(http.Header)}
	for _, want := range []int{200, 429} { // each client uses its one request up
		for i := range clients {
			clear(w.h)
			client(req, i)
			p.ServeHTTP(w, req)
			if w.status != want {
				b.Fatalf("client %d: status %d, want %d", i, w.status, want)
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
		i := int(goroutines.Add(1)*int64(clients)/7) % clients // a starting point of its own
		for pb.Next() {
			clear(w.h)
			client(r, i)
			p.ServeHTTP(w, r)
			if w.status != 429 {
				b.Errorf("client %d: status %d, want 429", i, w.status)
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
