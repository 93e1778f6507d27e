package main

import (
	"context"
	"fmt"
	"log/slog"
	"net"
	"os"
	"path/filepath"
	"slices"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"google.golang.org/grpc"

	"github.com/edgerate/edge/proxy"
	"github.com/edgerate/edge/rls"
	"github.com/edgerate/edge/rules"
)

// loadRLS loads the Lyft configuration files the rls section of t names,
// relative to the directory of the main configuration file at path (the
// working directory for the embedded default). It returns nil when the
// rate limit service is off.
func loadRLS(path string, t *rules.Table) (*rls.Config, error) {
	if t.RLS.Listen == "" {
		return nil, nil
	}
	dir := "."
	if path != "" {
		dir = filepath.Dir(path)
	}
	return rls.Load(dir, t.RLS.Config, t.RLS.MergeDomains)
}

// warnRLS logs what the loader accepted but edge does differently.
func warnRLS(log *slog.Logger, c *rls.Config) {
	if c == nil {
		return
	}
	for _, w := range c.Warnings {
		log.Warn("rls: " + w)
	}
}

// rlsStamp identifies the state of the files the rls section names: a
// change of any file's size, time or inode, or of the set of files a glob
// matches, changes it.
func rlsStamp(path string, t *rules.Table) []fileStamp {
	if t == nil || t.RLS.Listen == "" {
		return nil
	}
	dir := "."
	if path != "" {
		dir = filepath.Dir(path)
	}
	var out []fileStamp
	for _, g := range t.RLS.Config {
		if !filepath.IsAbs(g) {
			g = filepath.Join(dir, g)
		}
		matches, _ := filepath.Glob(g)
		slices.Sort(matches)
		for _, m := range matches {
			if fi, err := os.Stat(m); err == nil {
				out = append(out, stampOf(fi))
			}
		}
		out = append(out, fileStamp{}) // separates the globs' matches
	}
	return out
}

// rlsServer is the gRPC server of the rate limit service and its listener.
type rlsServer struct {
	svc *rls.Service
	srv *grpc.Server
	ln  net.Listener
}

// listenRLS binds the rate limit service of t, counting through p's
// stores, with its metrics in reg; nil when the service is off.
func listenRLS(t *rules.Table, c *rls.Config, p *proxy.Proxy, reg prometheus.Registerer) (*rlsServer, error) {
	if t.RLS.Listen == "" {
		return nil, nil
	}
	svc, err := rls.New(rls.Options{Table: t, Config: c, Cluster: p.Cluster(), Registerer: reg})
	if err != nil {
		return nil, err
	}
	ln, err := net.Listen("tcp", t.RLS.Listen)
	if err != nil {
		svc.Close()
		return nil, fmt.Errorf("rls listener: %w", err)
	}
	// grpc-go's own HTTP/2 server, outside the public listener's defences
	// (the guard, the flood limits): it takes the public listener's
	// http2.max_concurrent_streams as its bound of streams per connection
	// (grpc-go has none by default), as docs/beside.md says.
	srv := grpc.NewServer(grpc.MaxConcurrentStreams(uint32(t.HTTP2.MaxConcurrentStreams)))
	s := &rlsServer{svc: svc, srv: srv, ln: ln}
	svc.Register(s.srv)
	return s, nil
}

// stop drains in-flight calls for at most timeout, then closes the rest,
// and retires the service's shared counting.
func (s *rlsServer) stop(timeout time.Duration) {
	s.svc.Shutdown()
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	done := make(chan struct{})
	go func() {
		s.srv.GracefulStop()
		close(done)
	}()
	select {
	case <-done:
	case <-ctx.Done():
		s.srv.Stop()
		<-done
	}
	s.svc.Close()
}

func deadlineOf(ctx context.Context) time.Time {
	d, _ := ctx.Deadline()
	return d
}
