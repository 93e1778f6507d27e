package rules

// AccessLogConfig is the access_log section: one line per request, in
// nginx's combined format or as JSON (docs/access-log.md).
type AccessLogConfig struct {
	// Path is the file lines are appended to, or "-" for standard output;
	// "" writes no access log.
	Path string `mapstructure:"path"`
	// Format is combined (default: nginx's combined line) or json.
	Format string `mapstructure:"format"`
	// Keys writes, in the json format, the key each rule counted the
	// request by. Off by default: keys can be API keys or user names.
	Keys bool `mapstructure:"keys"`
	// RefusedSample writes one refused request in RefusedSample. Default
	// 1 (every one); valid 1..1_000_000.
	RefusedSample int `mapstructure:"refused_sample"`
	// Buffer bounds the lines held before they are written; past it lines
	// are dropped, never waited for. Default 1MiB; valid 4KiB..1GiB.
	Buffer Size `mapstructure:"buffer"`
}

// Access log formats.
const (
	AccessLogCombined = "combined"
	AccessLogJSON     = "json"
)

// Access log defaults and bounds.
const (
	DefaultAccessLogBuffer = MiB
	minAccessLogBuffer     = 4 * KiB
	maxAccessLogBuffer     = GiB
	maxRefusedSample       = 1_000_000
)

// AccessLog is [AccessLogConfig] with defaults applied.
type AccessLog struct {
	Path          string // a file, or "-" for standard output
	Format        string // AccessLogCombined or AccessLogJSON
	Keys          bool
	RefusedSample int // one refused request in RefusedSample is written
	Buffer        Size
}

// compileAccessLog validates the access_log section; nil when there is no
// section or it names no path.
func compileAccessLog(p *problems, c *AccessLogConfig) *AccessLog {
	if c == nil {
		return nil
	}
	a := &AccessLog{Path: c.Path, Format: c.Format, Keys: c.Keys, RefusedSample: c.RefusedSample, Buffer: c.Buffer}
	switch a.Format {
	case "":
		a.Format = AccessLogCombined
	case AccessLogCombined, AccessLogJSON:
	default:
		p.add("access_log.format", "must be combined or json, got %q", a.Format)
	}
	if a.RefusedSample == 0 && !p.given["access_log.refused_sample"] {
		a.RefusedSample = 1
	}
	if a.RefusedSample < 1 || a.RefusedSample > maxRefusedSample {
		p.add("access_log.refused_sample", "must be between 1 (every refusal) and %d, got %d", maxRefusedSample, a.RefusedSample)
	}
	if a.Buffer == 0 && !p.given["access_log.buffer"] {
		a.Buffer = DefaultAccessLogBuffer
	}
	if a.Buffer < minAccessLogBuffer || a.Buffer > maxAccessLogBuffer {
		p.add("access_log.buffer", "must be between 4KiB and 1GiB, got %d bytes", int64(a.Buffer))
	}
	if a.Keys && a.Format != AccessLogJSON {
		p.add("access_log.keys", "needs format json (the combined line has no place for keys), got format %q", a.Format)
	}
	if a.Path == "" {
		return nil
	}
	return a
}
