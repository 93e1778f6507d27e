package origin

import (
	"net/http"
	"testing"
	"time"
)

// transportFields are the fields of a transport that Settings set.
type transportFields struct {
	idle, idlePerHost int
	idleTimeout       time.Duration
	headMax           int64
	readBuffer        int
	upstream          time.Duration
}

func fieldsOf(t *http.Transport) transportFields {
	return transportFields{t.MaxIdleConns, t.MaxIdleConnsPerHost, t.IdleConnTimeout,
		t.MaxResponseHeaderBytes, t.ReadBufferSize, t.ResponseHeaderTimeout}
}

// TestSettingsTransport: the transport takes its pool's sizes and
// bounds from Settings, with the defaults for zero (and negative) values.
func TestSettingsTransport(t *testing.T) {
	defaults := transportFields{1024, 256, 90 * time.Second, 10 << 20, 4 << 10, 0}
	tests := []struct {
		name string
		s    Settings
		want transportFields
	}{
		{"defaults", Settings{}, defaults},
		{"set", Settings{IdlePerHost: 2, IdleTotal: 3, IdleTimeout: time.Second, HeadMax: 100, ReadBuffer: 512, Upstream: 7 * time.Second},
			transportFields{3, 2, time.Second, 100, 512, 7 * time.Second}},
		{"negative", Settings{IdlePerHost: -1, IdleTotal: -1, IdleTimeout: -1, HeadMax: -1, ReadBuffer: -1, Upstream: -time.Second}, defaults},
	}
	for _, tt := range tests {
		tr := tt.s.Transport()
		if got := fieldsOf(tr); got != tt.want {
			t.Errorf("%s: got %+v, want %+v", tt.name, got, tt.want)
		}
		if tr.Proxy != nil || !tr.DisableCompression || tr.DialContext == nil {
			t.Errorf("%s: the transport uses proxies from the environment, asks for compression, or dials unwatched", tt.name)
		}
	}
}
