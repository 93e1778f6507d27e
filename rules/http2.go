package rules

// HTTP2Config is the http2 section: the limits of the HTTP/2 that edge
// serves to clients, over TLS where ALPN chooses h2 (tls.http2) and in the
// clear with prior knowledge (h2c). A zero field means the default.
//
// MaxConcurrentStreams and MaxHeaderBytes are Go's HTTP/2 server's, fixed
// for its lifetime: they take effect at a restart. The others are edge's
// own, read when a connection starts: a reload changes them for the
// connections that start after it.
type HTTP2Config struct {
	// MaxConcurrentStreams is the streams a client may have open at once
	// on one connection (SETTINGS_MAX_CONCURRENT_STREAMS). Default 100;
	// valid 1..1000.
	MaxConcurrentStreams int `mapstructure:"max_concurrent_streams"`
	// MaxRequestsPerConnection is the requests served on one connection:
	// the last is answered with "Connection: close", which Go's server
	// sends as GOAWAY, as nginx's keepalive_requests does. Default 1000;
	// valid 1..10,000,000.
	MaxRequestsPerConnection int `mapstructure:"max_requests_per_connection"`
	// MaxHeaderBytes bounds a request's decoded header list, CONTINUATION
	// frames included (SETTINGS_MAX_HEADER_LIST_SIZE). Default: the
	// top-level max_header_bytes; valid as it is.
	MaxHeaderBytes int `mapstructure:"max_header_bytes"`
	// MaxResets is the streams a client may reset, or make edge reset by
	// malformed frames, per second on one connection before edge closes
	// it (rapid_reset). Default 100; valid 1..100,000.
	MaxResets int `mapstructure:"max_resets"`
	// MaxControlFrames is the SETTINGS, PING, PRIORITY, WINDOW_UPDATE and
	// empty DATA frames a client may send per second on one connection
	// before edge closes it (control). Default 1000; valid 1..1,000,000.
	MaxControlFrames int `mapstructure:"max_control_frames"`
}

// HTTP2 is a compiled [HTTP2Config], with defaults applied.
type HTTP2 struct {
	MaxConcurrentStreams     int
	MaxRequestsPerConnection int
	// MaxHeaderBytes is the section's max_header_bytes, or the top-level
	// one when it gives none (OwnHeaderBytes false).
	MaxHeaderBytes   int
	OwnHeaderBytes   bool
	MaxResets        int
	MaxControlFrames int
}

// Defaults of the http2 section.
const (
	DefaultMaxConcurrentStreams     = 100
	DefaultMaxRequestsPerConnection = 1000
	DefaultMaxResets                = 100
	DefaultMaxControlFrames         = 1000
)

// Bounds of the http2 section's keys.
const (
	maxConcurrentStreams     = 1000
	maxRequestsPerConnection = 10_000_000
	maxResets                = 100_000
	maxControlFrames         = 1_000_000
)

// compileHTTP2 validates the http2 section, and h2c, against t (its
// listeners, max_header_bytes and tls section compiled before them).
func compileHTTP2(p *problems, c HTTP2Config, h2c bool, t *Table) HTTP2 {
	t.H2C = h2c
	if h2c && t.Listen == "" {
		p.add("h2c", "needs the public listener, which edge binds only with domains to serve")
	}
	out := HTTP2{
		MaxConcurrentStreams:     c.MaxConcurrentStreams,
		MaxRequestsPerConnection: c.MaxRequestsPerConnection,
		MaxHeaderBytes:           c.MaxHeaderBytes,
		OwnHeaderBytes:           c.MaxHeaderBytes != 0,
		MaxResets:                c.MaxResets,
		MaxControlFrames:         c.MaxControlFrames,
	}
	keys := []struct {
		path        string
		v           *int
		def, lo, hi int
		rls         bool // the rls listener (grpc-go's server) uses it too
	}{
		{"http2.max_concurrent_streams", &out.MaxConcurrentStreams, DefaultMaxConcurrentStreams, 1, maxConcurrentStreams, true},
		{"http2.max_requests_per_connection", &out.MaxRequestsPerConnection, DefaultMaxRequestsPerConnection, 1, maxRequestsPerConnection, false},
		{"http2.max_header_bytes", &out.MaxHeaderBytes, t.MaxHeaderBytes, minHeaderBytes, maxHeaderBytes, false},
		{"http2.max_resets", &out.MaxResets, DefaultMaxResets, 1, maxResets, false},
		{"http2.max_control_frames", &out.MaxControlFrames, DefaultMaxControlFrames, 1, maxControlFrames, false},
	}
	served := h2c || t.TLS.Listen != "" && t.TLS.HTTP2
	for _, k := range keys {
		if *k.v == 0 {
			*k.v = k.def
			continue
		}
		if !served && !(k.rls && t.RLS.Listen != "") {
			why := "needs h2c, or tls.listen with tls.http2: edge serves no HTTP/2 without them"
			if k.rls {
				why = "needs h2c, tls.listen with tls.http2, or rls.listen: edge serves no HTTP/2 without them"
			}
			p.add(k.path, "%s", why)
			continue
		}
		if *k.v < k.lo || *k.v > k.hi {
			p.add(k.path, "must be between %d and %d, got %d", k.lo, k.hi, *k.v)
		}
	}
	return out
}
