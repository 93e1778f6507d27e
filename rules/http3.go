package rules

// HTTP3Config is the http3 section: the limits of the HTTP/3 that edge
// serves over QUIC when tls.http3 is on (docs/http3.md). A zero field means
// the default. AllowZeroRTT and MaxConcurrentStreams are the QUIC
// listener's, fixed for its lifetime: they take effect at a restart;
// RetryAbove is read as each new connection arrives.
type HTTP3Config struct {
	// AllowZeroRTT accepts 0-RTT (early) data from a resuming client, for
	// GET, HEAD and OPTIONS requests only: others sent early are answered
	// 425 Too Early, and those accepted are forwarded with Early-Data: 1
	// (RFC 8470). Default false.
	AllowZeroRTT bool `mapstructure:"allow_0rtt"`
	// RetryAbove is the QUIC handshakes in progress above which a new
	// connection from an address not yet validated is sent a Retry (RFC
	// 9000 §8.1.2) before edge keeps any state for it. Default 100; valid
	// 1..1,000,000.
	RetryAbove int `mapstructure:"retry_above"`
	// MaxConcurrentStreams is the request streams a client may have open
	// at once on one connection (QUIC's initial_max_streams_bidi).
	// Default 100; valid 1..1000.
	MaxConcurrentStreams int `mapstructure:"max_concurrent_streams"`
}

// HTTP3 is a compiled [HTTP3Config], with defaults applied; it matters only
// with TLS.HTTP3.
type HTTP3 struct {
	AllowZeroRTT         bool
	RetryAbove           int
	MaxConcurrentStreams int
}

// Defaults of the http3 section.
const (
	DefaultRetryAbove             = 100
	DefaultHTTP3ConcurrentStreams = 100
)

const maxRetryAbove = 1_000_000

// compileHTTP3 validates the http3 section against t's tls section,
// compiled before it.
func compileHTTP3(p *problems, c HTTP3Config, t *Table) HTTP3 {
	out := HTTP3{AllowZeroRTT: c.AllowZeroRTT, RetryAbove: c.RetryAbove, MaxConcurrentStreams: c.MaxConcurrentStreams}
	const why = "needs tls.http3: edge serves no HTTP/3 without it"
	if c.AllowZeroRTT && !t.TLS.HTTP3 {
		p.add("http3.allow_0rtt", why)
	}
	for _, k := range []struct {
		path    string
		v       *int
		def, hi int
	}{
		{"http3.retry_above", &out.RetryAbove, DefaultRetryAbove, maxRetryAbove},
		{"http3.max_concurrent_streams", &out.MaxConcurrentStreams, DefaultHTTP3ConcurrentStreams, maxConcurrentStreams},
	} {
		switch {
		case *k.v == 0:
			*k.v = k.def
		case !t.TLS.HTTP3:
			p.add(k.path, why)
		case *k.v < 1 || *k.v > k.hi:
			p.add(k.path, "must be between 1 and %d, got %d", k.hi, *k.v)
		}
	}
	return out
}
