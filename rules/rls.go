package rules

import (
	"fmt"
	"slices"

	"github.com/edgerate/edge/internal/algorithm"
)

// RLSConfig is the rls section: edge as the rate limit service of Envoy
// (gRPC envoy.service.ratelimit.v3.RateLimitService), counting the
// descriptors of Lyft's ratelimit configuration files. The files are read
// and checked by package rls; this section only says where they are and
// how they count. Listen empty means off, and then nothing else may be set.
type RLSConfig struct {
	// Listen is the gRPC listen address, host:port.
	Listen string `mapstructure:"listen"`
	// Config lists Lyft configuration files and globs ("ratelimit/*.yaml"),
	// relative to the directory of the main configuration file. Required
	// with Listen.
	Config []string `mapstructure:"config"`
	// MergeDomains merges the descriptors of a domain defined in several
	// files, as Lyft's MERGE_DOMAIN_CONFIG does; without it a domain in
	// two files is an error.
	MergeDomains bool `mapstructure:"merge_domains"`
	// ResponseHeaders adds the RateLimit, RateLimit-Policy and
	// X-RateLimit-* fields to every answer, for Envoy to add to the
	// client's response.
	ResponseHeaders bool `mapstructure:"response_headers"`
	// Algorithm is how descriptors count: "sliding_window" (the default)
	// or "fixed_window", Lyft's own counting.
	Algorithm string `mapstructure:"algorithm"`
	// MaxDescriptors bounds the descriptors of one ShouldRateLimit call;
	// nil means DefaultMaxDescriptors. Written, it must be 1 to
	// MaxDescriptors.
	MaxDescriptors *int `mapstructure:"max_descriptors"`
}

// Bounds of rls.max_descriptors. Each descriptor of a call may be a
// decision in Redis: the default is far above what an Envoy route sends
// (one descriptor per rate_limits action) and far below what would let one
// call occupy Redis.
const (
	DefaultMaxDescriptors = 64
	MaxDescriptors        = 10_000
)

// RLS is a compiled [RLSConfig]. Listen "" means the service is off.
type RLS struct {
	Listen          string
	Config          []string // as written: paths and globs, relative to the main file
	MergeDomains    bool
	ResponseHeaders bool
	Algorithm       algorithm.Algorithm // SlidingWindow or FixedWindow
	MaxDescriptors  int                 // the most descriptors of one call
}

// Equal reports whether two rls sections are the same.
func (r RLS) Equal(o RLS) bool {
	return r.Listen == o.Listen && slices.Equal(r.Config, o.Config) && r.MergeDomains == o.MergeDomains &&
		r.ResponseHeaders == o.ResponseHeaders && r.Algorithm == o.Algorithm && r.MaxDescriptors == o.MaxDescriptors
}

func compileRLS(p *problems, c RLSConfig, t *Table) RLS {
	out := RLS{Listen: c.Listen, Config: c.Config, MergeDomains: c.MergeDomains, ResponseHeaders: c.ResponseHeaders,
		MaxDescriptors: DefaultMaxDescriptors}
	if c.Listen == "" {
		for _, k := range []struct {
			path string
			set  bool
		}{
			{"rls.config", len(c.Config) > 0},
			{"rls.merge_domains", c.MergeDomains},
			{"rls.response_headers", c.ResponseHeaders},
			{"rls.algorithm", c.Algorithm != ""},
			{"rls.max_descriptors", c.MaxDescriptors != nil},
		} {
			if k.set {
				p.add(k.path, "needs rls.listen: the rate limit service is off without it")
			}
		}
		return out
	}
	if h, port, ok := checkAddr(p, "rls.listen", c.Listen); ok {
		others := []struct{ key, addr string }{{"listen", t.Listen}, {"admin_listen", t.AdminListen}}
		if t.Check != nil {
			others = append(others, struct{ key, addr string }{"check.listen", t.Check.Listen})
		}
		for _, other := range others {
			oh, op, err := splitListen(other.addr)
			if err == nil && collide(c.Listen, h, port, other.addr, oh, op) {
				p.add("rls.listen", "must differ from %s (%q), got %q", other.key, other.addr, c.Listen)
			}
		}
	}
	if len(c.Config) == 0 {
		p.missing("rls.config", "with rls.listen", "must list at least one file or glob of Lyft's ratelimit configuration")
	}
	for i, g := range c.Config {
		if g == "" {
			p.add(fmt.Sprintf("rls.config[%d]", i), "must be a file or a glob, got \"\"")
		}
	}
	switch c.Algorithm {
	case "", "sliding_window":
		out.Algorithm = algorithm.SlidingWindow
	case "fixed_window":
		out.Algorithm = algorithm.FixedWindow
	default:
		p.add("rls.algorithm", "must be sliding_window or fixed_window, got %q", c.Algorithm)
	}
	if n := c.MaxDescriptors; n != nil {
		if *n < 1 || *n > MaxDescriptors {
			p.add("rls.max_descriptors", "must be between 1 and %d, got %d", MaxDescriptors, *n)
		}
		out.MaxDescriptors = *n
	}
	if t.Cluster.Store == StoreRedis && t.Cluster.Sync == SyncBatched && out.Algorithm == algorithm.FixedWindow {
		p.add("rls.algorithm", "fixed_window cannot be counted with cluster.sync batched (sliding windows only); use cluster.sync exact")
	}
	if t.Cluster.Sync == SyncShare {
		p.add("rls.listen", "not supported yet with cluster.sync share: use cluster.store local or redis (exact or batched)")
	}
	return out
}
