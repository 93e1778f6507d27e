package rules

import "fmt"

// Bounds of the request body settings.
const (
	minRequestBuffer = 1 * KiB
	maxRequestBuffer = 1 * GiB
)

// BodyPolicy is how a domain's request bodies are read, with defaults
// applied.
type BodyPolicy struct {
	// Buffer says whether a body is read into memory, up to BufferSize
	// bytes, before the origin is contacted.
	Buffer     bool
	BufferSize Size
	// MaxSize is the largest body accepted (413 above it); 0 means no
	// limit.
	MaxSize Size
}

// compileBodies resolves every domain's BodyPolicy and the total bound on
// buffered bytes. It runs after compileDomains, so t.Domains parallels
// cfg.Domains.
func compileBodies(p *problems, t *Table, cfg Config) {
	top := BodyPolicy{Buffer: true, BufferSize: cfg.RequestBuffer, MaxSize: cfg.MaxRequestBody}
	if top.BufferSize == 0 {
		top.BufferSize = DefaultRequestBuffer
	}
	topOK := checkBufferSize(p, "request_buffer", top.BufferSize)
	if top.MaxSize < 0 {
		p.add("max_request_body", "must not be negative, got %s", top.MaxSize)
	}
	t.MaxBufferedBytes = cfg.MaxBufferedBytes
	if t.MaxBufferedBytes == 0 {
		t.MaxBufferedBytes = DefaultMaxBuffered
	}
	if t.MaxBufferedBytes < 0 {
		p.add("max_buffered_bytes", "must not be negative, got %s", t.MaxBufferedBytes)
	}
	largest, largestPath := Size(0), ""
	if topOK {
		largest, largestPath = top.BufferSize, "request_buffer"
	}
	for i, dc := range cfg.Domains {
		path := fmt.Sprintf("domains[%d]", i)
		b := top
		if dc.RequestBuffering != nil {
			b.Buffer = *dc.RequestBuffering
		}
		switch {
		case dc.RequestBuffer != 0 && !b.Buffer && (i >= len(t.Domains) || t.Domains[i].Proxied):
			// The size would be ignored: such a domain streams its bodies.
			// (A domain never proxied has compileServe's problem instead.)
			p.add(path+".request_buffer", "applies only with request_buffering true (false streams bodies unbuffered), got %s", dc.RequestBuffer)
		case dc.RequestBuffer != 0:
			b.BufferSize = dc.RequestBuffer
			if checkBufferSize(p, path+".request_buffer", b.BufferSize) && b.Buffer && b.BufferSize > largest {
				largest, largestPath = b.BufferSize, path+".request_buffer"
			}
		}
		if dc.MaxRequestBody < 0 {
			p.add(path+".max_request_body", "must not be negative, got %s", dc.MaxRequestBody)
		} else if dc.MaxRequestBody != 0 {
			b.MaxSize = dc.MaxRequestBody
		}
		if i < len(t.Domains) {
			t.Domains[i].Body = b
		}
	}
	if t.MaxBufferedBytes > 0 && t.MaxBufferedBytes < largest {
		p.add("max_buffered_bytes", "must be at least %s (%s), got %s", largestPath, largest, t.MaxBufferedBytes)
	}
}

func checkBufferSize(p *problems, path string, s Size) bool {
	if s < minRequestBuffer || s > maxRequestBuffer {
		p.add(path, "must be between %s and %s, got %s", minRequestBuffer, maxRequestBuffer, s)
		return false
	}
	return true
}
