package config

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/edgerate/edge/internal/algorithm"
	"github.com/edgerate/edge/internal/wire"
)

// FuzzParseConfig feeds arbitrary bytes to the config loader: it never
// panics, and a config it accepts is one the proxy can serve. Every exact
// host resolves to its own domain through the same lookup requests use,
// every rule is usable, and no duration is negative.
func FuzzParseConfig(f *testing.F) {
	files, _ := filepath.Glob("../configs/*.yaml")
	for _, name := range files {
		data, err := os.ReadFile(name)
		if err != nil {
			f.Fatal(err)
		}
		f.Add(data)
	}
	for _, s := range []string{
		"",
		"domains: []",
		"origin: http://127.0.0.1:1\ndomains:\n  - hosts: [a.example]\n",
		"origin: http://127.0.0.1:1\ndomains:\n  - hosts: [\"*\", A.Example., \"[::1]\", \"*.b.example\"]\n    rules:\n      - {name: r, limit: 1, period: 1s, key: [ip, host, path, \"header:X-K\"]}\n",
		"origin: http://127.0.0.1:1\ndomains:\n  - hosts: [a.example]\n    rules:\n      - {name: r, limit: 0, period: 0s}\n",
		"origin: http://127.0.0.1:1\ndomains:\n  - hosts: [bücher.example]\n",
		"origin: http://127.0.0.1:1\ndomains:\n  - hosts: [a.example]\n    rules:\n      - {name: r, limit: 1e400, period: -1s}\n",
		"a: &a [x, x, x, x]\nb: &b [*a, *a, *a, *a]\nc: &c [*b, *b, *b, *b]\ndomains: *c\n",
		"listen_port: 80\n",
		"timeouts: {read: forever}\n",
		"timeouts: {upstream: 30, write: 0, drain_delay: \"0\"}\n",
		"domains:\n  - hosts: [a.example]\n    respond: x\n    rules:\n      - {name: r, limit: 10.5, period: \"60\"}\n",
		"cluster: {redis: {password: [s]}}\n",
		"hello\n",
		"pop: a\npop: b\n",
		"domains:\n  - hosts: a.example\n    origin: http://127.0.0.1:1\n",
		"\t- :\n",
		"{",
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		if len(data) > 16<<10 {
			return
		}
		table, err := Parse(data)
		if err != nil {
			if table != nil {
				t.Fatalf("Parse returned a table and an error: %v", err)
			}
			if strings.TrimSpace(err.Error()) == "" {
				t.Fatalf("Parse returned an empty error")
			}
			return
		}
		if table == nil {
			t.Fatalf("Parse returned neither a table nor an error")
		}
		// Without domains edge is the rate limit service alone: rls.listen
		// is set and no public listener is bound.
		if len(table.Domains) == 0 && (table.RLS.Listen == "" || table.Listen != "" || table.Check != nil) {
			t.Fatalf("Parse accepted a config without domains: %+v", table)
		}
		if len(table.Domains) > 0 && table.Listen == "" {
			t.Fatalf("Parse left domains without a public listener: %+v", table)
		}
		for _, d := range []struct {
			name string
			v    int64
		}{
			{"read_header", int64(table.Timeouts.ReadHeader)}, {"read", int64(table.Timeouts.Read)},
			{"write", int64(table.Timeouts.Write)}, {"idle", int64(table.Timeouts.Idle)},
			{"upstream", int64(table.Timeouts.Upstream)}, {"shutdown", int64(table.Timeouts.Shutdown)},
		} {
			if d.v < 0 {
				t.Fatalf("accepted a negative %s timeout: %v", d.name, d.v)
			}
		}
		if table.MaxHeaderBytes < 1024 {
			t.Fatalf("accepted max_header_bytes %d", table.MaxHeaderBytes)
		}
		for i, d := range table.Domains {
			// A forwarded domain has origins of its own, or routes whose
			// last takes every request.
			forwarded := d.Origin != nil || len(d.Routes) > 0 && d.Routes[len(d.Routes)-1].All()
			if d.Index != i || (d.Proxied && forwarded == (d.Respond != nil)) || (!d.Proxied && (forwarded || d.Respond != nil)) {
				t.Fatalf("domain %d (%q): index %d, origin %v, respond %v", i, d.Name, d.Index, d.Origin, d.Respond)
			}
			for _, h := range d.Hosts {
				if h == "*" || strings.HasPrefix(h, "*.") {
					continue
				}
				if n, ok := wire.NormalizeHost(h); !ok || n != h {
					t.Fatalf("domain %q: host %q is not in normalised form (%q, %v)", d.Name, h, n, ok)
				}
				if got, ok := table.Lookup(h); !ok || got != d {
					t.Fatalf("domain %q: host %q does not look up to it", d.Name, h)
				}
			}
			for _, r := range d.Rules {
				// A quota counts by its calendar, a concurrency rule its
				// requests in flight, with no period.
				quota := r.Algorithm == algorithm.Quota
				noPeriod := quota || r.Algorithm == algorithm.Concurrency
				if r.Limit < 1 || len(r.Key) == 0 || noPeriod != (r.Period == 0) || !noPeriod && r.Period < 1e9 || quota && r.Location == nil {
					t.Fatalf("domain %q rule %q: limit %d, period %v, key %v", d.Name, r.Name, r.Limit, r.Period, r.Key)
				}
			}
		}
	})
}
