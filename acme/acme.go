// Package acme obtains and renews edge's certificates from an ACME
// certificate authority (RFC 8555): one for every name of tls.acme's
// domains, answered by HTTP-01 on the plain listener or TLS-ALPN-01 on the
// TLS one, renewed when the CA's renewal information (ARI) says, else at
// about two thirds of the lifetime, and kept in a storage that survives
// restarts: a directory, or the PoP's Redis (cluster.Storage) with the
// directory as a copy, so that every node serves what one obtained.
//
// The ACME client is certmagic's (github.com/caddyserver/certmagic), the
// library Caddy obtains its certificates with: its Config, certificate
// cache and maintenance, its ACMEIssuer over acmez. This package fits it
// into edge: certificates reach handshakes through certs.Options.Managed,
// challenges through certs.Options.Challenge and proxy.ACMEChallenge, its
// logs go to the slog.Logger given (log.go), and orders, renewals and each
// name's state are reported (status.go). docs/tls.md ("ACME") is the
// operator's account.
package acme

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"hash/fnv"
	"io/fs"
	"log/slog"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/caddyserver/certmagic"
	"github.com/edgerate/edge/cluster"
	"github.com/edgerate/edge/rules"
	"go.uber.org/zap"
)

// Options configure a Manager.
type Options struct {
	// ACME is the compiled tls.acme; required.
	ACME *rules.ACME
	// Dir is the directory relative ca_root and storage paths are
	// relative to: the configuration file's.
	Dir string
	// Shared, if set, holds the ACME state of a PoP (accounts,
	// certificates, locks, challenge tokens) in place of the storage
	// directory, which then keeps a copy of the certificates that a node
	// starts from without it (cluster.store redis). Close releases the
	// locks it still holds.
	Shared *cluster.Storage
	// HTTPAddr and TLSAddr are the bound addresses of the plain and the
	// TLS listener, which answer the challenges. certmagic's solvers try
	// to bind them, find them taken, and leave the answering to edge, as
	// Caddy's do; certmagic then never opens a listener of its own.
	HTTPAddr, TLSAddr string
	// Logger receives certmagic's logs, at their own levels; required.
	Logger *slog.Logger
	// OnResult, if set, is told of every finished order (renewal false)
	// and renewal, and whether it got a certificate. It must not block.
	OnResult func(renewal, ok bool)
	// CheckInterval is the longest time between two looks at whether a
	// certificate is due for renewal (or renewed by another node); zero
	// means 10 minutes. A certificate that lives less than a hundred of
	// them is looked at every hundredth of its lifetime, at least every
	// second, so that a short-lived one is renewed in time.
	CheckInterval time.Duration
}

// Manager obtains, renews and serves the certificates of a set of names.
// It is safe for concurrent use; Close stops it.
type Manager struct {
	log      *slog.Logger
	zap      *zap.Logger
	cache    *certmagic.Cache
	configs  []*certmagic.Config // by jitter bucket (bucketOf)
	issuer   *certmagic.ACMEIssuer
	onResult func(renewal, ok bool)
	shared   *cluster.Storage // nil on one node

	ctx    context.Context // canceled by Close: every obtain and renewal ends
	cancel context.CancelFunc
	done   chan struct{} // closed when run has returned

	names    atomic.Pointer[map[string]bool] // the names managed
	maxCheck time.Duration
	check    atomic.Int64 // the check interval now, in nanoseconds
	wake     chan struct{}

	mu      sync.Mutex
	states  map[string]*nameState         // by name; guarded by mu (status.go)
	running map[string]context.CancelFunc // ends the begin of a name; guarded by mu
	begins  sync.WaitGroup
}

// jitterBuckets is how many renewal moments names are spread over when the
// CA gives no renewal information: a name's bucket, from a hash of it (the
// same on every node), renews between 63% and 70% of the lifetime instead
// of all at two thirds, so that certificates obtained together are not
// renewed in one burst.
const jitterBuckets = 8

// bucketOf returns name's jitter bucket.
func bucketOf(name string) int {
	h := fnv.New32a()
	h.Write([]byte(name))
	return int(h.Sum32() % jitterBuckets)
}

// renewalRatio is the share of its lifetime a certificate of bucket b
// still has left when it is renewed: 1/3 ± 1/30.
func renewalRatio(b int) float64 {
	return 1.0/3 + (float64(b)-(jitterBuckets-1)/2.0)/(jitterBuckets-1)*(2.0/30)
}

// New makes the Manager of opts: it reads ca_root and makes the storage
// directory, and starts the maintenance that renews certificates. It
// manages no name before Manage.
func New(opts Options) (*Manager, error) {
	a := opts.ACME
	if a == nil || opts.Logger == nil {
		return nil, errors.New("acme: New needs the tls.acme section and a logger")
	}
	roots, err := LoadRoots(opts.Dir, a)
	if err != nil {
		return nil, err
	}
	dir := resolve(opts.Dir, a.Storage)
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return nil, fmt.Errorf("tls.acme.storage %q: %w", a.Storage, unwrapPath(err))
	}
	maxCheck := opts.CheckInterval
	if maxCheck <= 0 {
		maxCheck = certmagic.DefaultRenewCheckInterval
	}
	m := &Manager{log: opts.Logger, onResult: opts.OnResult, maxCheck: maxCheck, shared: opts.Shared,
		wake: make(chan struct{}, 1), done: make(chan struct{}), states: make(map[string]*nameState),
		running: make(map[string]context.CancelFunc)}
	m.check.Store(int64(maxCheck))
	m.zap = zap.New(slogCore{h: opts.Logger.Handler()}).Named("acme")
	m.ctx, m.cancel = context.WithCancel(context.Background())
	empty := map[string]bool{}
	m.names.Store(&empty)

	var storage, local certmagic.Storage = &certmagic.FileStorage{Path: dir}, nil
	if opts.Shared != nil {
		storage, local = sharedStorage{opts.Shared}, storage
	}
	m.cache = certmagic.NewCache(m.cacheOptions())
	httpHost, httpPort := splitAddr(opts.HTTPAddr)
	tlsHost, tlsPort := splitAddr(opts.TLSAddr)
	listenHost := httpHost
	if a.HTTP01 && a.TLSALPN01 && httpHost != tlsHost {
		// One host for both solvers: all interfaces collide with either
		// listener on its port.
		listenHost = ""
	} else if !a.HTTP01 {
		listenHost = tlsHost
	}
	for b := range jitterBuckets {
		cfg := certmagic.New(m.cache, certmagic.Config{
			RenewalWindowRatio: renewalRatio(b),
			Storage:            storage,
			LocalCache:         local,
			OnEvent:            m.onEvent,
			Logger:             m.zap,
		})
		iss := certmagic.NewACMEIssuer(cfg, certmagic.ACMEIssuer{
			CA:                      a.CA,
			Email:                   a.Email,
			Agreed:                  true,
			DisableHTTPChallenge:    !a.HTTP01,
			DisableTLSALPNChallenge: !a.TLSALPN01,
			ListenHost:              listenHost,
			AltHTTPPort:             httpPort,
			AltTLSALPNPort:          tlsPort,
			TrustedRoots:            roots,
			Logger:                  m.zap,
		})
		cfg.Issuers = []certmagic.Issuer{iss}
		m.configs = append(m.configs, cfg)
		if b == 0 {
			m.issuer = iss
		}
	}
	go m.run()
	return m, nil
}

// cacheOptions are the certificate cache's options at the check interval
// now.
func (m *Manager) cacheOptions() certmagic.CacheOptions {
	return certmagic.CacheOptions{
		GetConfigForCert: func(c certmagic.Certificate) (*certmagic.Config, error) {
			if len(c.Names) == 0 {
				return m.configs[0], nil
			}
			return m.configs[bucketOf(c.Names[0])], nil
		},
		RenewCheckInterval: time.Duration(m.check.Load()),
		Logger:             m.zap,
	}
}

// LoadRoots reads tls.acme.ca_root, relative to dir: the roots trusted for
// the CA's HTTPS; nil (the system's) without. -check loads it too.
func LoadRoots(dir string, a *rules.ACME) (*x509.CertPool, error) {
	if a.CARoot == "" {
		return nil, nil
	}
	b, err := os.ReadFile(resolve(dir, a.CARoot))
	if err != nil {
		return nil, fmt.Errorf("tls.acme.ca_root %q: %w", a.CARoot, unwrapPath(err))
	}
	pool := x509.NewCertPool()
	if !pool.AppendCertsFromPEM(b) {
		return nil, fmt.Errorf("tls.acme.ca_root %q: no PEM certificate in it (want -----BEGIN CERTIFICATE----- blocks)", a.CARoot)
	}
	return pool, nil
}

// Manage makes names the names managed: each one not managed yet is
// obtained (or loaded from storage) in the background, and each managed
// one not in names is no longer served or renewed. It never blocks on
// the CA: a failed order is retried with backoff while edge serves. It
// must not run concurrently with itself (cmd/edge calls it at start and
// from reloads, one at a time).
func (m *Manager) Manage(names []string) {
	next := make(map[string]bool, len(names))
	for _, n := range names {
		next[n] = true
	}
	old := *m.names.Swap(&next)
	var removed []certmagic.SubjectIssuer
	m.mu.Lock()
	for n := range old {
		if !next[n] {
			removed = append(removed, certmagic.SubjectIssuer{Subject: n})
			m.running[n]()
			delete(m.running, n)
		}
	}
	for _, n := range names {
		if !old[n] {
			m.stateLocked(n) // listed as pending from now
			ctx, cancel := context.WithCancel(m.ctx)
			m.running[n] = cancel
			m.begins.Add(1)
			go m.begin(ctx, n)
		}
	}
	m.mu.Unlock()
	if len(removed) > 0 {
		m.cache.RemoveManaged(removed)
	}
	m.forget(next)
}

// begin loads name's certificate from storage into the cache, whose
// maintenance renews it from then on, or, with none there, orders it
// (certmagic retries a failed order with backoff, for up to 30 days) and
// loads it then; until ctx ends (Close, or name no longer managed). It
// is certmagic's ManageAsync, but that one gives a name up for good when
// storage fails to answer once (Redis just restarted, say): begin tries
// again.
func (m *Manager) begin(ctx context.Context, name string) {
	defer m.begins.Done()
	cfg := m.configs[bucketOf(name)]
	wait := time.Second
	for ctx.Err() == nil {
		_, err := cfg.CacheManagedCertificate(ctx, name)
		switch {
		case err == nil:
			m.nudge() // a certificate due for renewal is renewed at once
			return
		case errors.Is(err, fs.ErrNotExist):
			if err = cfg.ObtainCertAsync(ctx, name); err == nil {
				continue // load what was obtained
			}
		}
		if ctx.Err() != nil {
			return
		}
		m.log.Warn("acme: no certificate yet; trying again", "name", name, "in", wait, "err", err.Error())
		t := time.NewTimer(wait)
		select {
		case <-ctx.Done():
			t.Stop()
			return
		case <-t.C:
		}
		wait = min(2*wait, time.Minute)
	}
}

// nudge makes run look at the certificates now.
func (m *Manager) nudge() {
	select {
	case m.wake <- struct{}{}:
	default:
	}
}

// Certificate returns the certificate served for name, normalised like
// wire.NormalizeHost: the managed certificate for it that expires last,
// nil when name is not managed or has none yet; for
// certs.Options.Managed.
func (m *Manager) Certificate(name string) *tls.Certificate {
	if !(*m.names.Load())[name] {
		return nil
	}
	if c := m.current(name); c != nil {
		return &c.Certificate
	}
	return nil
}

// Challenge answers a TLS-ALPN-01 validation: the challenge certificate
// for the name hello asks, from this node's own order or, in a PoP, from
// another's through the shared storage; for certs.Options.Challenge.
func (m *Manager) Challenge(hello *tls.ClientHelloInfo) (*tls.Certificate, error) {
	return m.configs[0].GetCertificate(hello)
}

// HTTPChallenge returns the key authorization of the HTTP-01 challenge of
// token for host, from this node's own order or, in a PoP, from another's
// through the shared storage; for proxy.ACMEChallenge.
func (m *Manager) HTTPChallenge(host, token string) (string, bool) {
	w := newKeyAuthWriter()
	if !m.issuer.HandleHTTPChallenge(w, challengeRequest(m.ctx, host, token)) || w.status != 0 && w.status != 200 {
		return "", false
	}
	return w.body.String(), true
}

// Close stops renewing and obtaining, and waits until the maintenance has
// stopped; the certificates obtained stay in storage.
func (m *Manager) Close() {
	m.cancel()
	m.begins.Wait()
	<-m.done
	m.cache.Stop()
	if m.shared != nil {
		m.shared.Close() // the locks of orders abandoned: the other nodes need not wait for them to expire
	}
}

// run looks at the certificates for renewal at the check interval, which
// shortens for short-lived certificates (noteLifetime), until Close. It
// is certmagic's own maintenance (which runs too, every 10 minutes) at
// the pace edge's certificates need.
func (m *Manager) run() {
	defer close(m.done)
	t := time.NewTimer(time.Duration(m.check.Load()))
	defer t.Stop()
	for {
		select {
		case <-m.ctx.Done():
			return
		case <-m.wake:
		case <-t.C:
		}
		if err := m.cache.RenewManagedCertificates(m.ctx); err != nil && m.ctx.Err() == nil {
			m.log.Error("acme: renewing certificates", "err", err.Error())
		}
		t.Reset(time.Duration(m.check.Load()))
	}
}

// noteLifetime shortens the check interval for a certificate that lives
// lifetime: a hundredth of it, at least a second. certmagic renews at
// once a certificate that expires within five check intervals, and its
// ARI cutoff is one before the time chosen, so the interval must be well
// below the lifetime.
func (m *Manager) noteLifetime(lifetime time.Duration) {
	want := min(max(lifetime/100, time.Second), m.maxCheck)
	for {
		cur := m.check.Load()
		if int64(want) >= cur {
			return
		}
		if m.check.CompareAndSwap(cur, int64(want)) {
			break
		}
	}
	m.cache.SetOptions(m.cacheOptions())
	m.nudge()
}

// splitAddr splits a bound listener's address into its host and port; ""
// and 0 without one.
func splitAddr(addr string) (string, int) {
	h, p, err := net.SplitHostPort(addr)
	if err != nil {
		return "", 0
	}
	n, _ := strconv.Atoi(p)
	return h, n
}

func resolve(dir, p string) string {
	if filepath.IsAbs(p) || dir == "" {
		return p
	}
	return filepath.Join(dir, p)
}

// unwrapPath drops the path an *os.PathError repeats: the message names the
// file as configured already.
func unwrapPath(err error) error {
	var pe *os.PathError
	if errors.As(err, &pe) {
		return pe.Err
	}
	return err
}
