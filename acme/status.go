package acme

import (
	"context"
	"crypto/x509"
	"encoding/json"
	"encoding/pem"
	"io/fs"
	"slices"
	"time"

	"github.com/caddyserver/certmagic"
	"github.com/edgerate/edge/certs"
	"github.com/mholt/acmez/v3/acme"
)

// What each name is doing, from certmagic's events (onEvent) and the
// certificate cache: a name is pending until its first certificate, valid
// while it has one, failed while it has none and its last order failed;
// obtaining or renewing while an order runs on this node.

// nameState is what the Manager keeps of one name for its status.
type nameState struct {
	busy       string    // certs.ManagedObtaining or certs.ManagedRenewing while an order runs here
	failed     bool      // the last order or renewal failed
	lastErr    string    // the last order's or renewal's error, kept after a success
	lastErrAt  time.Time // when it failed
	hash       string    // the certificate whose renewal information is below
	ari        time.Time // the renewal time the CA's renewal information chose; zero without
	readARIAt  time.Time // when ari was read from storage
	notBefore  time.Time
	notAfter   time.Time
	renewRatio float64
}

// ariReread is how often the renewal information of a certificate is read
// again from storage, for the status page: certmagic refreshes it when the
// CA's Retry-After says, every few hours.
const ariReread = time.Hour

// state returns name's state, made if new. Caller must not hold m.mu.
func (m *Manager) state(name string) *nameState {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.stateLocked(name)
}

func (m *Manager) stateLocked(name string) *nameState {
	s := m.states[name]
	if s == nil {
		s = &nameState{renewRatio: renewalRatio(bucketOf(name))}
		m.states[name] = s
	}
	return s
}

// forget drops the states of names no longer managed.
func (m *Manager) forget(names map[string]bool) {
	m.mu.Lock()
	defer m.mu.Unlock()
	for n := range m.states {
		if !names[n] {
			delete(m.states, n)
		}
	}
}

// onEvent is certmagic's Config.OnEvent: it counts orders and renewals
// and keeps each name's state. It returns nil: no event is refused.
func (m *Manager) onEvent(ctx context.Context, event string, data map[string]any) error {
	name, _ := data["identifier"].(string)
	renewal, _ := data["renewal"].(bool)
	switch event {
	case "cert_obtaining":
		busy := certs.ManagedObtaining
		if renewal {
			busy = certs.ManagedRenewing
		}
		m.mu.Lock()
		m.stateLocked(name).busy = busy
		m.mu.Unlock()
	case "cert_obtained":
		if path, _ := data["certificate_path"].(string); path != "" {
			m.noteCertificate(ctx, name, path)
		}
		m.mu.Lock()
		s := m.stateLocked(name)
		s.busy, s.failed = "", false
		m.mu.Unlock()
		if m.onResult != nil {
			m.onResult(renewal, true)
		}
	case "cert_failed":
		msg := "unknown error"
		if err, _ := data["error"].(error); err != nil {
			msg = err.Error()
		}
		m.mu.Lock()
		s := m.stateLocked(name)
		s.busy, s.failed, s.lastErr, s.lastErrAt = "", true, msg, time.Now()
		m.mu.Unlock()
		if m.onResult != nil {
			m.onResult(renewal, false)
		}
	case "cached_managed_cert":
		sans, _ := data["sans"].([]string)
		for _, n := range sans {
			if c := m.Certificate(n); c != nil && c.Leaf != nil {
				m.noteLifetime(c.Leaf.NotAfter.Sub(c.Leaf.NotBefore))
			}
		}
	}
	return nil
}

// noteCertificate reads the certificate just obtained for name from
// storage at path, before certmagic decides whether it needs renewing
// (manageOne), so that a short-lived one shortens the check interval first.
func (m *Manager) noteCertificate(ctx context.Context, name, path string) {
	b, err := m.configs[0].Storage.Load(ctx, path)
	if err != nil {
		return
	}
	blk, _ := pem.Decode(b)
	if blk == nil {
		return
	}
	leaf, err := x509.ParseCertificate(blk.Bytes)
	if err != nil {
		return
	}
	m.noteLifetime(leaf.NotAfter.Sub(leaf.NotBefore))
}

// Status describes every name managed, sorted by name: its state, how
// long its certificate is valid, when it is due for renewal, and the last
// error of an order or renewal. It reads the renewal information the CA
// gave from storage once an hour per certificate.
func (m *Manager) Status() []certs.ManagedInfo {
	names := *m.names.Load()
	out := make([]certs.ManagedInfo, 0, len(names))
	now := time.Now()
	for n := range names {
		info := certs.ManagedInfo{Name: n, State: certs.ManagedPending}
		c := m.current(n)
		m.mu.Lock()
		s := m.stateLocked(n)
		stale := c != nil && (c.Hash() != s.hash || now.Sub(s.readARIAt) >= ariReread)
		m.mu.Unlock()
		var ari time.Time
		if stale {
			ari = m.readARI(c)
		}
		m.mu.Lock()
		if stale {
			s.hash, s.ari, s.readARIAt = c.Hash(), ari, now
			s.notBefore, s.notAfter = c.Leaf.NotBefore, c.Leaf.NotAfter
		}
		switch {
		case s.busy != "":
			info.State = s.busy
		case c != nil && now.After(c.Leaf.NotAfter):
			info.State = certs.ManagedExpired
		case c != nil:
			info.State = certs.ManagedValid
		case s.failed:
			info.State = certs.ManagedFailed
		}
		if c != nil {
			info.NotAfter = c.Leaf.NotAfter
			info.NextRenewal = s.ari
			if info.NextRenewal.IsZero() {
				lifetime := c.Leaf.NotAfter.Sub(c.Leaf.NotBefore)
				info.NextRenewal = c.Leaf.NotAfter.Add(-time.Duration(float64(lifetime) * s.renewRatio))
			}
		}
		info.LastError, info.LastErrorAt = s.lastErr, s.lastErrAt
		m.mu.Unlock()
		out = append(out, info)
	}
	slices.SortFunc(out, func(a, b certs.ManagedInfo) int {
		switch {
		case a.Name < b.Name:
			return -1
		case a.Name > b.Name:
			return 1
		}
		return 0
	})
	return out
}

// current returns the certmagic certificate served for name, nil without.
func (m *Manager) current(name string) *certmagic.Certificate {
	var best *certmagic.Certificate
	for _, c := range m.cache.AllMatchingCertificates(name) {
		if c.Leaf != nil && slices.Contains(c.Names, name) && (best == nil || c.Leaf.NotAfter.After(best.Leaf.NotAfter)) {
			best = &c
		}
	}
	return best
}

// readARI reads the renewal time the CA's renewal information chose for c
// from its metadata: in a PoP from the node's copy first (a file: a
// scrape of the expiry metric must not wait on Redis), else from the
// shared storage; zero without.
func (m *Manager) readARI(c *certmagic.Certificate) time.Time {
	if len(c.Names) == 0 {
		return time.Time{}
	}
	key := certmagic.StorageKeys.SiteMeta(m.issuer.IssuerKey(), c.Names[0])
	cfg := m.configs[0]
	ctx, cancel := context.WithTimeout(m.ctx, 2*time.Second)
	defer cancel()
	var b []byte
	err := fs.ErrNotExist
	if cfg.LocalCache != nil {
		b, err = cfg.LocalCache.Load(ctx, key)
	}
	if err != nil {
		b, err = cfg.Storage.Load(ctx, key)
	}
	if err != nil {
		return time.Time{}
	}
	var res certmagic.CertificateResource
	var meta acme.Certificate
	if json.Unmarshal(b, &res) != nil || json.Unmarshal(res.IssuerData, &meta) != nil || meta.RenewalInfo == nil {
		return time.Time{}
	}
	return meta.RenewalInfo.SelectedTime
}
