package main

import (
	"net"
	"os"
	"path/filepath"
	"testing"
	"time"

	"golang.org/x/net/http2"

	"github.com/edgerate/edge/proxy"
	"github.com/edgerate/edge/rules"
)

// TestRLSMaxConcurrentStreams: the rls listener, grpc-go's own server,
// announces http2.max_concurrent_streams in its SETTINGS, as the public
// listener does, instead of grpc-go's unbounded default.
func TestRLSMaxConcurrentStreams(t *testing.T) {
	dir := t.TempDir()
	must(t, os.WriteFile(filepath.Join(dir, "e2e.yaml"), []byte("domain: e2e\ndescriptors:\n  - key: k\n    rate_limit: {unit: minute, requests_per_unit: 2}\n"), 0o644))
	tests := []struct {
		name    string
		streams int
		want    uint32
	}{
		{"default", 0, rules.DefaultMaxConcurrentStreams},
		{"configured", 7, 7},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			table, err := rules.Compile(rules.Config{
				AdminListen: "127.0.0.1:0",
				RLS:         rules.RLSConfig{Listen: "127.0.0.1:0", Config: []string{"e2e.yaml"}},
				HTTP2:       rules.HTTP2Config{MaxConcurrentStreams: tt.streams},
			})
			must(t, err)
			c, err := loadRLS(filepath.Join(dir, "edge.yaml"), table)
			must(t, err)
			p, err := proxy.New(proxy.Options{Table: table})
			must(t, err)
			defer p.Close()
			s, err := listenRLS(table, c, p, nil)
			must(t, err)
			go s.srv.Serve(s.ln)
			defer s.stop(time.Second)

			conn, err := net.Dial("tcp", s.ln.Addr().String())
			must(t, err)
			defer conn.Close()
			conn.SetDeadline(time.Now().Add(5 * time.Second))
			_, err = conn.Write([]byte(http2.ClientPreface))
			must(t, err)
			fr := http2.NewFramer(conn, conn)
			must(t, fr.WriteSettings())
			f, err := fr.ReadFrame()
			must(t, err)
			sf, ok := f.(*http2.SettingsFrame)
			if !ok {
				t.Fatalf("first frame %v, want SETTINGS", f)
			}
			got, ok := sf.Value(http2.SettingMaxConcurrentStreams)
			if !ok || got != tt.want {
				t.Errorf("SETTINGS_MAX_CONCURRENT_STREAMS %d (sent %v), want %d", got, ok, tt.want)
			}
		})
	}
}
