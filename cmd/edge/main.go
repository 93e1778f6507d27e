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
//
// Every setting outside domains can also be given in the environment, over
// the file: EDGE_ and its path in upper case, _ for each dot (EDGE_LISTEN,
// EDGE_CLUSTER_REDIS_PASSWORD; see docs/configuration.md).
package main

import (
	"context"
	"crypto/subtle"
	"errors"
	"flag"
	"fmt"
	"io"
	"log"
	"log/slog"
	"net"
	"net/http"
	"net/netip"
	"os"
	"os/signal"
	"runtime"
	"runtime/debug"
	"slices"
	"strconv"
	"sync/atomic"
	"syscall"
	"time"

	// A quota's timezone is looked up when the configuration loads: with the
	// zone database in the binary (about 400 KB), it loads the same on a
	// machine without /usr/share/zoneinfo, such as a scratch container.
	_ "time/tzdata"

	"github.com/edgerate/edge/acme"
	"github.com/edgerate/edge/certs"
	"github.com/edgerate/edge/config"
	"github.com/edgerate/edge/guard"
	"github.com/edgerate/edge/internal/wire"
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

// edgeCommands is the command list of edge -h, also shown in README's
// "Command line" (a test keeps the two equal).
const edgeCommands = `  edge                        run the embedded default configuration
  edge -config FILE           run FILE (YAML)
  edge -check -config FILE    validate FILE, print every problem found, and exit
  edge -version               print the version, e.g. "edge v1.2.3 (go1.26.8)"
  edge replay [flags] LOG...  replay access logs through the limiter and an exact
                              count side by side (flags: edge replay -h)
`

// edgeEnvironment closes edge -h: the rule for settings given in the
// environment (config.ParseEnv).
const edgeEnvironment = `
Environment:
  Every setting outside domains can be given as EDGE_ and its path in upper
  case, _ for each dot (EDGE_LISTEN, EDGE_ADMIN_LISTEN, EDGE_CLUSTER_REDIS_PASSWORD;
  a list of strings comma-separated); it takes precedence over the file.
`

// run is edge's main, returning the exit code: 0 after a clean shutdown or
// a passed check, 1 for a bad configuration or a failed start, 2 for bad
// flags. It reads the process's environment once, for every load.
func run(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	env := os.Environ()
	if len(args) > 0 && args[0] == "replay" {
		return runReplay(ctx, args[1:], env, stdout, stderr)
	}
	fs := flag.NewFlagSet("edge", flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.Usage = func() {
		fmt.Fprintf(stderr, "Usage:\n%s\nFlags:\n", edgeCommands)
		fs.PrintDefaults()
		fmt.Fprint(stderr, edgeEnvironment)
	}
	configPath := fs.String("config", "", "configuration `file` (YAML); empty runs the embedded default")
	check := fs.Bool("check", false, "validate the configuration, report every problem, and exit")
	showVersion := fs.Bool("version", false, "print the version and exit")
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return 0
		}
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
	table, hash, err := config.LoadEnv(*configPath, env)
	if err != nil {
		fmt.Fprintf(stderr, "edge: invalid configuration %s:\n%s\n", describe(*configPath), rules.ProblemText(err))
		printEnvWarnings(stderr, env)
		return 1
	}
	rc, err := loadRLS(*configPath, table)
	if err != nil {
		fmt.Fprintf(stderr, "edge: invalid configuration %s:\n%s\n", describe(*configPath), rules.ProblemText(table.Secrets.RedactError(err)))
		printEnvWarnings(stderr, env)
		return 1
	}
	certSet, err := loadCertificates(*configPath, table)
	if err == nil && table.TLS.ACME != nil {
		_, err = acme.LoadRoots(configDir(*configPath), table.TLS.ACME)
	}
	if err != nil {
		fmt.Fprintf(stderr, "edge: invalid configuration %s:\n%s\n", describe(*configPath), rules.ProblemText(table.Secrets.RedactError(err)))
		return 1
	}
	if *check {
		rulesN := 0
		for _, d := range table.Domains {
			rulesN += len(d.Rules)
		}
		fmt.Fprintf(stdout, "configuration %s is valid: %s, %s", describe(*configPath),
			plural(len(table.Domains), "domain", "domains"), plural(rulesN, "rule", "rules"))
		if rc != nil {
			fmt.Fprintf(stdout, "; rls: %s from %s", plural(len(rc.Domains), "domain", "domains"),
				plural(len(rc.Files), "file", "files"))
		}
		fmt.Fprintln(stdout)
		for _, w := range rc.WarningsOrNil() {
			fmt.Fprintf(stdout, "warning: rls: %s\n", w)
		}
		if certSet != nil {
			for _, w := range certSet.Warnings() {
				fmt.Fprintf(stdout, "warning: %s\n", w)
			}
		}
		for _, path := range table.Secrets.Weak() {
			fmt.Fprintf(stdout, "warning: %s: %s\n", path, weakSecret)
		}
		printEnvWarnings(stdout, env)
		return 0
	}
	level := new(slog.LevelVar)
	level.Set(table.LogLevel)
	log := newLogger(stderr, table.LogFormat, level)
	if err := serve(ctx, table, hash, *configPath, env, log, level, time.After); err != nil {
		log.Error("edge stopped", "err", err)
		return 1
	}
	return 0
}

// printEnvWarnings writes a "warning: " line to w for each variable of env
// that names no setting (config.EnvWarnings).
func printEnvWarnings(w io.Writer, env []string) {
	for _, msg := range config.EnvWarnings(env) {
		fmt.Fprintf(w, "warning: %s\n", msg)
	}
}

// warnEnv logs, at warn, each variable of env that names no setting.
func warnEnv(log *slog.Logger, env []string) {
	for _, msg := range config.EnvWarnings(env) {
		log.Warn("environment variable ignored", "warning", msg)
	}
}

// plural writes n with the singular or plural noun: "1 rule", "0 rules".
func plural(n int, one, many string) string {
	if n == 1 {
		return "1 " + one
	}
	return strconv.Itoa(n) + " " + many
}

func describe(path string) string {
	if path == "" {
		return "(embedded default)"
	}
	return path
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

// newLogger writes to w in format ("text" or "json") at level, which a
// reload may change. Both formats write durations as Go duration strings
// ("20s"): slog's JSON handler would otherwise write integer nanoseconds.
func newLogger(w io.Writer, format string, level *slog.LevelVar) *slog.Logger {
	opts := &slog.HandlerOptions{Level: level, ReplaceAttr: durationString}
	if format == "json" {
		return slog.New(slog.NewJSONHandler(w, opts))
	}
	return slog.New(slog.NewTextHandler(w, opts))
}

// durationString is a slog ReplaceAttr that writes a time.Duration value,
// at any group depth, as its String form.
func durationString(_ []string, a slog.Attr) slog.Attr {
	if a.Value.Kind() == slog.KindDuration {
		a.Value = slog.StringValue(a.Value.Duration().String())
	}
	return a
}

// serve runs the public, admin and (with a check section) check listeners
// until ctx is done, then drains in-flight requests for at most the
// shutdown timeout. The configuration at path (empty: the embedded
// default), with the settings of env over it, is reloaded on SIGHUP and
// when the file changes; a reload sets level to the new log.level. The
// drain delay ends when drainTimer's channel delivers: time.After, or a
// test's own.
func serve(ctx context.Context, table *rules.Table, hash, path string, env []string, log *slog.Logger, level *slog.LevelVar,
	drainTimer func(time.Duration) <-chan time.Time) error {
	reg := prometheus.NewRegistry()
	reg.MustRegister(
		collectors.NewGoCollector(),
		collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}),
	)
	p, err := newProxy(table, hash, path, log, reg)
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
	rc, err := loadRLS(path, table)
	if err != nil {
		return err
	}
	warnRLS(log, rc)
	rl := newReloader(path, hash, env, p, log, level)
	warnEnv(log, env)
	warnIfAdminExposed(log, table, table.AdminListen)
	warnIfCheckExposed(log, table)
	warnWeakSecrets(log, table)
	var ready atomic.Bool
	certSet, err := loadCertificates(path, table)
	if err != nil {
		return err
	}
	warnCertificates(log, certSet)
	srv, err := listen(table, certSet, p, path, reg, &ready, log)
	if err != nil {
		return err
	}
	rl.tls, rl.acme = srv.tls, srv.acme // nil without tls.listen, tls.acme
	if srv.rls, err = listenRLS(table, rc, p, prometheus.WrapRegistererWith(prometheus.Labels{"pop": table.Pop}, reg)); err != nil {
		srv.closeListeners()
		return err
	}
	if srv.rls != nil {
		rl.rls = srv.rls.svc
		if addr := srv.rls.ln.Addr().String(); !isLoopback(addr) {
			log.Warn("the rate limit service is not on loopback: it has no authentication, so anyone who can reach it can spend any client's limits; keep it on a private network",
				"rls_listen", addr)
		}
		log.Info("rate limit service started", "rls_listen", srv.rls.ln.Addr().String(),
			"rls_domains", len(rc.Domains), "rls_files", len(rc.Files), "rls_algorithm", table.RLS.Algorithm.String())
	}
	errc := srv.start()
	if srv.acme != nil {
		// Once the listeners serve, which answer the challenges.
		srv.acme.Manage(table.TLS.ACME.Names)
	}
	defer start(rl.run)()        // reload on change and SIGHUP
	defer start(p.RunRecorder)() // the status page's per-second figures
	ready.Store(true)
	started := []any{"version", buildVersion(), "pop", table.Pop, "via", p.Via()}
	if srv.publicLn != nil {
		started = append(started, "listen", srv.publicLn.Addr().String())
	}
	started = append(started, "admin_listen", srv.adminLn.Addr().String())
	if srv.tlsLn != nil {
		started = append(started, "tls_listen", srv.tlsLn.Addr().String())
	}
	if srv.http3 != nil {
		started = append(started, "http3_listen", srv.http3.udp.LocalAddr().String())
	}
	if srv.checkLn != nil {
		started = append(started, "check_listen", srv.checkLn.Addr().String())
	}
	log.Info("edge started", append(started, "domains", len(table.Domains))...)
	serveErr := waitForStop(ctx, p, &ready, errc, drainTimer, log)
	ready.Store(false)
	if err := srv.shutdown(p.Table().Timeouts.Shutdown, serveErr, errc, log); err != nil {
		return err
	}
	log.Info("edge stopped")
	return nil
}

// newProxy makes the proxy serving table, whose content has the given
// hash, read from path, with its metrics in reg.
func newProxy(table *rules.Table, hash, path string, log *slog.Logger, reg prometheus.Registerer) (*proxy.Proxy, error) {
	return proxy.New(proxy.Options{
		Table:      table,
		Registerer: prometheus.WrapRegistererWith(prometheus.Labels{"pop": table.Pop}, reg),
		Logger:     log,
		Version:    buildVersion(),
		ConfigHash: hash,
		ConfigPath: describe(path),
	})
}

// servers are edge's public, admin and check HTTP servers with their
// listeners.
type servers struct {
	public, admin     *http.Server
	publicLn, adminLn net.Listener // publicLn is the framing guard's; nil when table.Listen is ""
	// check answers other proxies' questions (the check section); nil
	// when the configuration edge started with has none.
	check   *http.Server
	checkLn net.Listener // the framing guard's
	rls     *rlsServer   // nil unless rls.listen is set
	// tls makes the HTTPS socket's handshakes, whose certificates a
	// reload swaps; nil unless tls.listen is set. tlsLn is its socket,
	// joined to the public listener.
	tls   *certs.Server
	tlsLn net.Listener
	// http2 serves the connections of the public listener that speak
	// HTTP/2; nil unless serveHTTP2.
	http2 *http2Server
	// http3 serves HTTP/3 on UDP at the TLS listener's port; nil unless
	// tls.http3 (http3.go).
	http3 *http3Server
	// acme obtains and renews the certificates of tls.acme; nil without.
	acme *acme.Manager
}

// listen binds the public, admin and check listeners of table and makes
// their servers: the public one serves p behind the framing guard, the
// admin one adminRouter, the check one p's check handler behind a framing
// guard of its own. With no public listen address (edge as the rate limit
// service alone, with no domains) no public listener is bound.
//
// With tls.listen, the HTTPS socket serving certificates set is joined to
// the public one: one server, one connection cap, the fast path on both.
func listen(table *rules.Table, set *certs.Set, p *proxy.Proxy, path string, reg *prometheus.Registry, ready *atomic.Bool, log *slog.Logger) (*servers, error) {
	errLog := slog.NewLogLogger(log.Handler(), slog.LevelWarn)
	s := &servers{
		public: publicServer(table, p, errLog),
		admin: &http.Server{
			ReadHeaderTimeout: 5 * time.Second,
			ReadTimeout:       10 * time.Second,
			WriteTimeout:      30 * time.Second,
			IdleTimeout:       table.Timeouts.Idle,
			ErrorLog:          errLog,
		},
	}
	var publicLn net.Listener
	var err error
	if table.Listen != "" {
		if publicLn, err = clientListen(table.Listen); err != nil {
			return nil, fmt.Errorf("public listener: %w", err)
		}
	}
	if s.adminLn, err = net.Listen("tcp", table.AdminListen); err != nil {
		if publicLn != nil {
			publicLn.Close()
		}
		return nil, fmt.Errorf("admin listener: %w", err)
	}
	// The bound address decides, not the configured name.
	s.admin.Handler = adminRouter(reg, p, ready, isLoopback(s.adminLn.Addr().String()))
	maxConns := connectionCap(table, log)
	pp := proxyProtocolStage(table, p) // connection.go
	// With h2c, a plain connection that opens with the HTTP/2 preface
	// goes to the HTTP/2 server (http2.go).
	var h2cStages []guard.Stage
	if publicLn != nil && serveHTTP2(table) {
		s.http2 = newHTTP2Server(table, p, publicLn.Addr(), errLog)
		if table.H2C {
			h2cStages = []guard.Stage{guard.PriorKnowledge(s.http2.handoff)}
		}
	}
	publicStages := socketStages(table, pp, rules.ListenerPublic, h2cStages...)
	if publicLn != nil && table.TLS.Listen != "" {
		sock, srv, m, err := tlsSocket(table, set, p, pp, s.http2, path, publicLn.Addr().String(), log)
		if err != nil {
			publicLn.Close()
			s.adminLn.Close()
			return nil, err
		}
		s.tls, s.tlsLn, s.acme = srv, sock.Listener, m
		if s.http3, err = listenHTTP3(table, sock.Listener.Addr(), srv, p, log); err != nil {
			publicLn.Close()
			sock.Listener.Close()
			s.adminLn.Close()
			if m != nil {
				m.Close()
			}
			return nil, err
		}
		if publicLn, err = guard.Join(guard.Socket{Listener: publicLn, Name: proxy.ListenerPublic, Stages: publicStages}, sock); err != nil {
			return nil, err // cannot fail: it has sockets
		}
		publicStages = nil // the Join's sockets have their own
	}
	if publicLn != nil {
		s.publicLn = guardListener(publicLn, s.public, table.Timeouts.Read, p, maxConns, publicStages)
	}
	if table.Check != nil {
		checkLn, err := clientListen(table.Check.Listen)
		if err != nil {
			s.closeListeners()
			return nil, fmt.Errorf("check listener: %w", err)
		}
		// The public server's limits: a question is a request head, and
		// the asking proxies keep their connections open.
		s.check = publicServer(table, p.CheckHandler(), errLog)
		s.checkLn = checkListener(checkLn, s.check, table.Timeouts.Read, maxConns)
	}
	return s, nil
}

// closeListeners closes the listeners bound so far, for a start that
// fails before they serve.
func (s *servers) closeListeners() {
	for _, ln := range []net.Listener{s.publicLn, s.adminLn, s.checkLn} {
		if ln != nil {
			ln.Close()
		}
	}
	if s.acme != nil {
		s.acme.Close()
	}
	if s.http3 != nil {
		s.http3.close()
	}
}

// checkListener wraps the check socket ln for server srv in a framing
// guard of its own, which keeps the read timeout read as the public one
// does, capped at maxConns connections like the public listener but
// counted apart from it: its metrics are the public listener's.
// clientListen listens for clients at addr. Accepted connections get no
// TCP keep-alive probes (Go's default sets four socket options on each,
// a cost of every connection): the idle and write idle timeouts already
// end a connection whose client is gone, as nginx, whose so_keepalive is
// off by default, relies on its own.
func clientListen(addr string) (net.Listener, error) {
	return (&net.ListenConfig{KeepAlive: -1}).Listen(context.Background(), "tcp", addr)
}

func checkListener(ln net.Listener, srv *http.Server, read time.Duration, maxConns int) net.Listener {
	guarded := guard.NewListener(ln, guard.ListenerOptions{
		MaxHeaderBytes:   srv.MaxHeaderBytes,
		WriteIdleTimeout: 30 * time.Second,
		MaxConnections:   maxConns,
		ReadTimeout:      read,
	})
	srv.ConnState = guarded.ConnState
	return guarded
}

// publicServer is an HTTP server with the public listener's limits of
// table, serving h: the public server (the proxy) and the check server.
// It has no ReadTimeout: the framing guard in front of it keeps
// timeouts.read (guardListener, checkListener), so that a connection's
// first request can be answered at the wire too.
func publicServer(table *rules.Table, h http.Handler, errLog *log.Logger) *http.Server {
	return &http.Server{
		Handler:           h,
		ReadHeaderTimeout: table.Timeouts.ReadHeader,
		WriteTimeout:      table.Timeouts.Write,
		IdleTimeout:       table.Timeouts.Idle,
		MaxHeaderBytes:    table.MaxHeaderBytes,
		ErrorLog:          errLog,
		// net/http would answer OPTIONS * itself (200, for any Host); the
		// framing guard refuses it, and so would the proxy's screen.
		DisableGeneralOptionsHandler: true,
		// A connection's TLS, what its PROXY header said, and whether
		// its client left (for the access log) reach its requests.
		ConnContext: proxy.ConnContext(guard.TLSOf, guard.FrontOf),
	}
}

// guardListener wraps the public socket ln for server srv in the framing
// guard: it refuses ambiguous HTTP/1.1 framing that net/http accepts, cuts
// clients that stop reading (WriteTimeout stays 0 so long streams are not
// cut), bounds the reading of each request by read (timeouts.read), caps
// the connections open at maxConns, closing idle ones first (hence
// ConnState), and offers simple requests to the proxy's fast path, which
// answers the ones a rule refuses (fastpath). stages are the setup stages
// of a plain socket ln (a Join's sockets have their own).
func guardListener(ln net.Listener, srv *http.Server, read time.Duration, p *proxy.Proxy, maxConns int, stages []guard.Stage) net.Listener {
	opts := guardOptions(srv, read, p, maxConns)
	opts.Stages, opts.Name = stages, proxy.ListenerPublic
	guarded := guard.NewListener(ln, opts)
	srv.ConnState = guarded.ConnState
	return guarded
}

// guardOptions are the framing guard's options for the public server srv,
// with the read timeout read it keeps in the server's place.
func guardOptions(srv *http.Server, read time.Duration, p *proxy.Proxy, maxConns int) guard.ListenerOptions {
	return guard.ListenerOptions{
		MaxHeaderBytes:   srv.MaxHeaderBytes, // must equal the server's
		WriteIdleTimeout: 30 * time.Second,
		OnReject:         p.FramingRefused,
		MaxConnections:   maxConns,
		// The connection limits, before the cap (connection.go).
		Admit:         p.AdmitConnection,
		OnCapped:      func(ev guard.CapEvent) { p.ConnectionsCapped(ev.Max, ev.ClosedIdle) },
		OnConnections: p.ConnectionsOpen,
		Answer:        fastAnswer(p),
		// The server's own, which the fast path keeps while it answers.
		ReadHeaderTimeout: srv.ReadHeaderTimeout,
		ReadTimeout:       read,
		WriteTimeout:      srv.WriteTimeout,
		IdleTimeout:       srv.IdleTimeout,
	}
}

// fastAnswer hands the heads the framing guard offers to p's fast path.
func fastAnswer(p *proxy.Proxy) func(*guard.Request, []byte) ([]byte, bool) {
	return func(r *guard.Request, out []byte) ([]byte, bool) {
		return p.Answer(&r.Head, out)
	}
}

// start serves every server, each in a goroutine that sends Serve's
// result on the returned channel.
func (s *servers) start() <-chan error {
	errc := make(chan error, 6)
	if s.publicLn != nil {
		go func() { errc <- s.public.Serve(s.publicLn) }()
	}
	if s.http2 != nil {
		go func() { errc <- s.http2.serve() }()
	}
	if s.http3 != nil {
		go func() { errc <- s.http3.serve() }()
	}
	go func() { errc <- s.admin.Serve(s.adminLn) }()
	if s.check != nil {
		go func() { errc <- s.check.Serve(s.checkLn) }()
	}
	if s.rls != nil {
		go func() { errc <- s.rls.srv.Serve(s.rls.ln) }()
	}
	return errc
}

// start runs run in a goroutine until the returned function is called;
// that function cancels run's context and returns once run has returned.
func start(run func(context.Context)) (stop func()) {
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() {
		defer close(done)
		run(ctx)
	}()
	return func() {
		cancel()
		<-done
	}
}

// waitForStop returns when ctx is done, after the drain delay, or when a
// server fails, with that server's error. When ctx is done it turns
// /readyz to 503 first and keeps serving for the drain delay, so that a
// load balancer stops sending before the listener closes.
func waitForStop(ctx context.Context, p *proxy.Proxy, ready *atomic.Bool, errc <-chan error,
	drainTimer func(time.Duration) <-chan time.Time, log *slog.Logger) error {
	select {
	case err := <-errc:
		return err
	case <-ctx.Done():
	}
	// The running configuration's: a reload may have changed them.
	to := p.Table().Timeouts
	log.Info("shutting down", "drain_delay", to.DrainDelay, "drain_timeout", to.Shutdown)
	ready.Store(false)
	if to.DrainDelay > 0 {
		select {
		case <-drainTimer(to.DrainDelay):
		case err := <-errc:
			return err
		}
	}
	return nil
}

// shutdown drains the public, HTTP/2 and check servers together for at
// most timeout (an HTTP/2 connection gets GOAWAY, and closes once its
// streams are done), then closes every server, and collects what the Serve
// goroutines still owe on errc (one already came as serveErr if it is
// set). It returns the first error other than http.ErrServerClosed.
func (s *servers) shutdown(timeout time.Duration, serveErr error, errc <-chan error, log *slog.Logger) error {
	drainCtx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	pending := 1 // the admin server
	if s.publicLn != nil {
		pending++
	}
	checkDone := make(chan struct{})
	if s.check != nil {
		pending++
		go func() { // drained beside the public server, within the same timeout
			defer close(checkDone)
			if err := s.check.Shutdown(drainCtx); err != nil {
				log.Warn("check listener drain timed out; closing remaining connections", "err", err)
				s.check.Close()
			}
		}()
	} else {
		close(checkDone)
	}
	http2Done := make(chan struct{})
	if s.http2 != nil {
		pending++
		go func() { // beside the public server, within the same timeout
			defer close(http2Done)
			if err := s.http2.srv.Shutdown(drainCtx); err != nil {
				log.Warn("HTTP/2 drain timed out; closing remaining connections", "err", err)
				s.http2.srv.Close()
			}
		}()
	} else {
		close(http2Done)
	}
	http3Done := make(chan struct{})
	if s.http3 != nil {
		pending++
		go func() { // beside the public server, within the same timeout
			defer close(http3Done)
			if err := s.http3.shutdown(drainCtx); err != nil {
				log.Warn("HTTP/3 drain timed out; closing remaining connections", "err", err)
			}
		}()
	} else {
		close(http3Done)
	}
	err := s.public.Shutdown(drainCtx)
	if gl, ok := s.publicLn.(*guard.Listener); ok && err == nil {
		// net/http counts a connection whose request the fast path
		// forwards as idle, and has closed it: the answer ends first.
		err = gl.WaitAnswers(drainCtx)
	}
	if err != nil {
		log.Warn("drain timed out; closing remaining connections", "err", err)
		s.public.Close()
	}
	<-checkDone
	<-http2Done
	<-http3Done
	if s.rls != nil {
		// GracefulStop's Serve returns nil once the calls in flight are done.
		s.rls.stop(max(time.Until(deadlineOf(drainCtx)), 0))
		pending++
	}
	s.admin.Shutdown(drainCtx)
	s.admin.Close()
	if s.acme != nil {
		s.acme.Close() // an order in flight is abandoned: the next start orders again
	}
	// Every Serve goroutine has returned once Shutdown/Close/stop
	// returned; collect their results so none outlives serve.
	if serveErr != nil {
		pending--
	}
	for range pending {
		if err := <-errc; serveErr == nil && err != nil && !errors.Is(err, http.ErrServerClosed) {
			serveErr = err
		}
	}
	if serveErr != nil && !errors.Is(serveErr, http.ErrServerClosed) {
		return serveErr
	}
	return nil
}

// adminRouter serves the admin listener: the status page, metrics, health
// and the admin API. It is never mounted on the public listener. With a
// token, /metrics and /v1/* require "Authorization: Bearer <token>"; the
// probes stay open, and so does the status page, which then carries no
// data: its script asks for the token and reads /v1/*.
// The token and admin_hosts are read from the running configuration on
// every request, so a reload that sets, changes or removes them takes
// effect at once. On a loopback listener every path checks Host first.
func adminRouter(reg *prometheus.Registry, p *proxy.Proxy, ready *atomic.Bool, loopback bool) http.Handler {
	r := chi.NewRouter()
	if loopback {
		r.Use(checkHost(func() []string { return p.Table().AdminHosts }))
	}
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
		// Still ready (the running configuration serves), but say so. The
		// probe is open to anyone who reaches the listener, so it names no
		// problem: a problem may quote a secret's value.
		if n := len(p.ReloadStatus().Problems); n > 0 {
			noun := "problems"
			if n == 1 {
				noun = "problem"
			}
			fmt.Fprintf(w, "last reload failed with %d %s; the previous configuration is running; details in the log and /v1/config\n", n, noun)
		}
	})
	page := p.StatusPage(proxy.StatusPageOptions{
		TokenRequired: func() bool { return p.Table().AdminToken != "" },
		Ready:         ready.Load,
	})
	r.Get("/", page.ServeHTTP)
	r.Get("/status.css", page.ServeHTTP)
	r.Get("/status.js", page.ServeHTTP)
	r.Group(func(r chi.Router) {
		r.Use(requireToken(func() string { return p.Table().AdminToken }))
		r.Handle("/metrics", promhttp.HandlerFor(reg, promhttp.HandlerOpts{Registry: reg}))
		r.Handle("/v1/*", p.AdminHandler())
	})
	return r
}

// checkHost answers 421 to a request whose Host is not an IP literal,
// localhost or one of extra's names (port ignored). A browser sends the
// name it resolved as Host, so a web page that reaches a loopback listener
// by DNS rebinding (its own name pointed at 127.0.0.1 after the page has
// loaded) names a host of its own, and is refused before any handler runs.
func checkHost(extra func() []string) func(http.Handler) http.Handler {
	return func(next http.Handler) http.Handler {
		return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			if !adminHostAllowed(r.Host, extra()) {
				w.Header().Set("Content-Type", "text/plain; charset=utf-8")
				w.WriteHeader(http.StatusMisdirectedRequest)
				io.WriteString(w, "misdirected request: this admin listener answers only to localhost, IP addresses and the names in admin_hosts\n")
				return
			}
			next.ServeHTTP(w, r)
		})
	}
}

// adminHostAllowed reports whether host, a request's Host value, is an IP
// literal (IPv6 in brackets), localhost or one of extra, which are
// normalised like wire.NormalizeHost.
func adminHostAllowed(host string, extra []string) bool {
	h, ok := wire.NormalizeHost(host)
	switch {
	case !ok:
		return false
	case h == "localhost", h[0] == '[': // NormalizeHost checked the IPv6 literal
		return true
	}
	if a, err := netip.ParseAddr(h); err == nil && a.Is4() {
		return true
	}
	return slices.Contains(extra, h)
}

// requireToken refuses requests without the bearer token that token returns
// at the time of the request, comparing in constant time. While token
// returns "" every request passes.
func requireToken(token func() string) func(http.Handler) http.Handler {
	return func(next http.Handler) http.Handler {
		return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			tok := token()
			if tok != "" && subtle.ConstantTimeCompare([]byte(r.Header.Get("Authorization")), []byte("Bearer "+tok)) != 1 {
				w.Header().Set("WWW-Authenticate", `Bearer realm="edge admin"`)
				http.Error(w, "unauthorized", http.StatusUnauthorized)
				return
			}
			next.ServeHTTP(w, r)
		})
	}
}

// warnIfAdminExposed warns when the admin listener at addr is not on
// loopback and t sets no token to protect it.
func warnIfAdminExposed(log *slog.Logger, t *rules.Table, addr string) {
	if t.AdminToken == "" && !isLoopback(addr) {
		log.Warn("the admin listener is not on loopback and has no token: anyone who can reach it can read metrics and reset keys; set admin_token or EDGE_ADMIN_TOKEN",
			"admin_listen", addr)
	}
}

// warnIfCheckExposed warns when the check listener of t is not on loopback
// and t sets no check.token: it believes the forwarded fields of whoever
// reaches it, who can then have any client's requests refused, or learn
// their counts.
func warnIfCheckExposed(log *slog.Logger, t *rules.Table) {
	if t.Check != nil && t.Check.Token == "" && !isLoopback(t.Check.Listen) {
		log.Warn("the check listener is not on loopback and has no token: anyone who can reach it can ask about any client; set check.token",
			"check_listen", t.Check.Listen)
	}
}

// weakSecret is why a secret shorter than rules.MinSecretBytes is weak.
var weakSecret = fmt.Sprintf("weak secret: shorter than %d bytes, it is hidden where its key stands but not where the file copies it, and is easy to guess; use a longer one", rules.MinSecretBytes)

// warnWeakSecrets warns of each secret of t too short to be hidden by
// value (rules.Secrets.Weak), naming its key or variable, never its value.
func warnWeakSecrets(log *slog.Logger, t *rules.Table) {
	if weak := t.Secrets.Weak(); len(weak) > 0 {
		log.Warn(weakSecret, "fields", weak)
	}
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
