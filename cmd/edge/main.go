// Command edge is a rate-limiting reverse proxy: per-domain rules, counted
// in Cloudflare's two-counter sliding window, in front of one or more
// origins.
//
// Usage:
//
//	edge                       run the embedded default configuration
//	edge -config FILE          run FILE
//	edge -check -config FILE   validate FILE, list every problem, exit
//	edge -version              print the version
//	edge replay [flags] LOG... measure the limiter against an exact count (edge replay -h)
package main

import (
	"context"
	"crypto/subtle"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/netip"
	"os"
	"os/signal"
	"runtime"
	"runtime/debug"
	"strings"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/edgerate/edge/proxy"
	"github.com/edgerate/edge/rules"
	"github.com/go-chi/chi/v5"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"
)

// version is set at build time with -ldflags "-X main.version=v1.2.3";
// otherwise the module version from the build info is used.
var version = ""

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	os.Exit(run(ctx, os.Args[1:], os.Stdout, os.Stderr))
}

// run is edge's main, returning the exit code: 0 after a clean shutdown or
// a passed check, 1 for a bad configuration or a failed start, 2 for bad
// flags.
func run(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	if len(args) > 0 && args[0] == "replay" {
		return runReplay(ctx, args[1:], stdout, stderr)
	}
	fs := flag.NewFlagSet("edge", flag.ContinueOnError)
	fs.SetOutput(stderr)
	configPath := fs.String("config", "", "configuration `file` (YAML); empty runs the embedded default")
	check := fs.Bool("check", false, "validate the configuration, report every problem, and exit")
	showVersion := fs.Bool("version", false, "print the version and exit")
	if err := fs.Parse(args); err != nil {
		return 2
	}
	if fs.NArg() > 0 {
		fmt.Fprintf(stderr, "edge: unexpected argument %q\n", fs.Arg(0))
		return 2
	}
	if *showVersion {
		fmt.Fprintf(stdout, "edge %s (%s)\n", buildVersion(), runtime.Version())
		return 0
	}
	table, hash, err := loadConfig(*configPath)
	if err != nil {
		fmt.Fprintf(stderr, "edge: invalid configuration %s:\n%s\n", describe(*configPath), indent(err))
		return 1
	}
	if *check {
		rulesN := 0
		for _, d := range table.Domains {
			rulesN += len(d.Rules)
		}
		fmt.Fprintf(stdout, "configuration %s is valid: %d domains, %d rules\n", describe(*configPath), len(table.Domains), rulesN)
		return 0
	}
	log := newLogger(stderr, table)
	if err := serve(ctx, table, hash, *configPath, log); err != nil {
		log.Error("edge stopped", "err", err)
		return 1
	}
	return 0
}

func describe(path string) string {
	if path == "" {
		return "(embedded default)"
	}
	return path
}

// indent puts each joined error on its own indented line.
func indent(err error) string {
	var b strings.Builder
	for i, e := range leafErrors(err) {
		if i > 0 {
			b.WriteByte('\n')
		}
		b.WriteString("  - " + e.Error())
	}
	return b.String()
}

// leafErrors flattens errors joined with errors.Join, at any depth, into a
// list in order.
func leafErrors(err error) []error {
	j, ok := err.(interface{ Unwrap() []error })
	if !ok {
		return []error{err}
	}
	var out []error
	for _, e := range j.Unwrap() {
		out = append(out, leafErrors(e)...)
	}
	return out
}

func buildVersion() string {
	if version != "" {
		return version
	}
	if bi, ok := debug.ReadBuildInfo(); ok && bi.Main.Version != "" && bi.Main.Version != "(devel)" {
		return bi.Main.Version
	}
	return "dev"
}

func newLogger(w io.Writer, t *rules.Table) *slog.Logger {
	opts := &slog.HandlerOptions{Level: t.LogLevel}
	if t.LogFormat == "json" {
		return slog.New(slog.NewJSONHandler(w, opts))
	}
	return slog.New(slog.NewTextHandler(w, opts))
}

// serve runs the public and admin listeners until ctx is done, then drains
// in-flight requests for at most the shutdown timeout. The configuration at
// path (empty: the embedded default) is reloaded on SIGHUP and when the
// file changes.
func serve(ctx context.Context, table *rules.Table, hash, path string, log *slog.Logger) error {
	reg := prometheus.NewRegistry()
	reg.MustRegister(
		collectors.NewGoCollector(),
		collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}),
	)
	p, err := proxy.New(proxy.Options{
		Table:      table,
		Registerer: prometheus.WrapRegistererWith(prometheus.Labels{"pop": table.Pop}, reg),
		Logger:     log,
		Version:    buildVersion(),
		ConfigHash: hash,
	})
	if err != nil {
		return err
	}
	// Runs after the servers have drained: with Redis-shared counters it
	// flushes batched counts, leaves the PoP's registry and closes the
	// client's connections.
	defer func() {
		if err := p.Close(); err != nil {
			log.Warn("closing the redis client", "err", err)
		}
	}()
	rl := &reloader{path: path, interval: time.Second, proxy: p, log: log, lastHash: hash}
	if path != "" {
		if fi, err := os.Stat(path); err == nil {
			rl.lastStat = stampOf(fi)
		}
	}
	p.SetConfigExtra(rl.status)
	token := adminToken(table)
	if token == "" && !isLoopback(table.AdminListen) {
		log.Warn("the admin listener is not on loopback and has no token: anyone who can reach it can read metrics and reset keys; set admin_token or EDGE_ADMIN_TOKEN",
			"admin_listen", table.AdminListen)
	}
	var ready atomic.Bool
	errLog := slog.NewLogLogger(log.Handler(), slog.LevelWarn)
	public := &http.Server{
		Handler:           p,
		ReadHeaderTimeout: table.Timeouts.ReadHeader,
		ReadTimeout:       table.Timeouts.Read,
		WriteTimeout:      table.Timeouts.Write,
		IdleTimeout:       table.Timeouts.Idle,
		MaxHeaderBytes:    table.MaxHeaderBytes,
		ErrorLog:          errLog,
		// net/http would answer OPTIONS * itself (200, for any Host); the
		// Listener refuses it, and so would the proxy's screen.
		DisableGeneralOptionsHandler: true,
	}
	admin := &http.Server{
		Handler:           adminRouter(reg, p, rl, token, &ready),
		ReadHeaderTimeout: 5 * time.Second,
		ReadTimeout:       10 * time.Second,
		WriteTimeout:      30 * time.Second,
		IdleTimeout:       table.Timeouts.Idle,
		ErrorLog:          errLog,
	}
	publicLn, err := net.Listen("tcp", table.Listen)
	if err != nil {
		return fmt.Errorf("public listener: %w", err)
	}
	adminLn, err := net.Listen("tcp", table.AdminListen)
	if err != nil {
		publicLn.Close()
		return fmt.Errorf("admin listener: %w", err)
	}
	// The Listener refuses ambiguous HTTP/1.1 framing that net/http
	// accepts (proxy/listener.go), cuts clients that stop reading
	// (WriteTimeout stays 0 so long streams are not cut), and caps the
	// connections open, closing idle ones first (hence ConnState).
	guard := proxy.NewListener(publicLn, proxy.ListenerOptions{
		MaxHeaderBytes:   public.MaxHeaderBytes, // must equal the server's
		WriteIdleTimeout: 30 * time.Second,
		OnReject:         p.FramingRefused,
		MaxConnections:   connectionCap(table, log),
		OnCapped:         p.ConnectionsCapped,
		OnConnections:    p.ConnectionsOpen,
	})
	public.ConnState = guard.ConnState
	errc := make(chan error, 2)
	go func() { errc <- public.Serve(guard) }()
	go func() { errc <- admin.Serve(adminLn) }()
	reloadCtx, stopReloads := context.WithCancel(context.Background())
	reloadDone := make(chan struct{})
	go func() {
		defer close(reloadDone)
		rl.run(reloadCtx)
	}()
	defer func() {
		stopReloads()
		<-reloadDone
	}()
	ready.Store(true)
	log.Info("edge started", "version", buildVersion(), "pop", table.Pop,
		"listen", publicLn.Addr().String(), "admin_listen", adminLn.Addr().String(),
		"domains", len(table.Domains))

	var serveErr error
	select {
	case <-ctx.Done():
		log.Info("shutting down", "drain_delay", table.Timeouts.DrainDelay, "drain_timeout", table.Timeouts.Shutdown)
		// Turn /readyz to 503 first and keep serving for the drain delay, so
		// a load balancer stops sending before the listener closes.
		ready.Store(false)
		if table.Timeouts.DrainDelay > 0 {
			select {
			case <-time.After(table.Timeouts.DrainDelay):
			case serveErr = <-errc:
			}
		}
	case serveErr = <-errc:
	}
	ready.Store(false)
	drainCtx, cancel := context.WithTimeout(context.Background(), table.Timeouts.Shutdown)
	defer cancel()
	if err := public.Shutdown(drainCtx); err != nil {
		log.Warn("drain timed out; closing remaining connections", "err", err)
		public.Close()
	}
	admin.Shutdown(drainCtx)
	admin.Close()
	// Both Serve goroutines have returned once Shutdown/Close returned;
	// collect their results so none outlives serve.
	for range 2 - boolToInt(serveErr != nil) {
		if err := <-errc; serveErr == nil && !errors.Is(err, http.ErrServerClosed) {
			serveErr = err
		}
	}
	if serveErr != nil && !errors.Is(serveErr, http.ErrServerClosed) {
		return serveErr
	}
	log.Info("edge stopped")
	return nil
}

func boolToInt(b bool) int {
	if b {
		return 1
	}
	return 0
}

// adminRouter serves the admin listener: metrics, health and the admin
// API. It is never mounted on the public listener. With a token, /metrics
// and /v1/* require "Authorization: Bearer <token>"; the probes stay open.
func adminRouter(reg *prometheus.Registry, p *proxy.Proxy, rl *reloader, token string, ready *atomic.Bool) http.Handler {
	r := chi.NewRouter()
	r.Get("/healthz", func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Content-Type", "text/plain; charset=utf-8")
		io.WriteString(w, "ok\n")
	})
	r.Get("/readyz", func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Content-Type", "text/plain; charset=utf-8")
		if !ready.Load() {
			w.WriteHeader(http.StatusServiceUnavailable)
			io.WriteString(w, "shutting down\n")
			return
		}
		io.WriteString(w, "ready\n")
		// Still ready (the running configuration serves), but say so.
		if st := rl.status(); st["last_reload_ok"] == false {
			fmt.Fprintf(w, "last reload failed; the previous configuration is running:\n%s\n", st["last_reload_error"])
		}
	})
	r.Group(func(r chi.Router) {
		if token != "" {
			r.Use(requireToken(token))
		}
		r.Handle("/metrics", promhttp.HandlerFor(reg, promhttp.HandlerOpts{Registry: reg}))
		r.Handle("/v1/*", p.AdminHandler())
	})
	return r
}

// requireToken refuses requests without the bearer token, comparing in
// constant time.
func requireToken(token string) func(http.Handler) http.Handler {
	want := []byte("Bearer " + token)
	return func(next http.Handler) http.Handler {
		return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			if subtle.ConstantTimeCompare([]byte(r.Header.Get("Authorization")), want) != 1 {
				w.Header().Set("WWW-Authenticate", `Bearer realm="edge admin"`)
				http.Error(w, "unauthorized", http.StatusUnauthorized)
				return
			}
			next.ServeHTTP(w, r)
		})
	}
}

// adminToken is the admin bearer token: EDGE_ADMIN_TOKEN, else admin_token.
func adminToken(t *rules.Table) string {
	if v := os.Getenv("EDGE_ADMIN_TOKEN"); v != "" {
		return v
	}
	return t.AdminToken
}

// isLoopback reports whether a listen address binds loopback only.
func isLoopback(addr string) bool {
	host, _, err := net.SplitHostPort(addr)
	if err != nil {
		return false
	}
	if host == "localhost" {
		return true
	}
	ip, err := netip.ParseAddr(host)
	return err == nil && ip.IsLoopback()
}
