package proxy

import (
	"net/http"

	"github.com/edgerate/edge/certs"
	"strings"
	"sync/atomic"
	"time"
)

// ACME's HTTP-01 validations (RFC 8555 §8.3): a certificate authority
// fetches http://host/.well-known/acme-challenge/TOKEN from a host of a
// domain with acme: true, over plain HTTP, and wants the token's key
// authorization back. Edge answers it itself, right after route and before
// any rule, on both paths: no rule counts or refuses it, https_redirect does
// not send it away, and it never reaches the origin. The answer comes from
// the hook cmd/edge installs (SetACMEChallenge), which knows the tokens of
// every node of the PoP; a token it does not know is answered 404.

// ACMEChallenge returns the key authorization of the HTTP-01 challenge of
// token for host (normalised, without its port), and whether there is one.
// It must be safe for concurrent use.
type ACMEChallenge func(host, token string) (keyAuth string, ok bool)

// acmeState is what the hooks of tls.acme installed.
type acmeState struct {
	acmeChallenge atomic.Pointer[ACMEChallenge]
	acmeStatus    atomic.Pointer[func() []certs.ManagedInfo]
}

// SetACMEStatus installs the function that describes the names whose
// certificates edge obtains (tls.acme), for the status page and the
// expiry metric; it is called on every look and must be quick.
func (p *Proxy) SetACMEStatus(f func() []certs.ManagedInfo) {
	p.acmeStatus.Store(&f)
}

// ACMEStatus returns what SetACMEStatus's function says, nil without one.
func (p *Proxy) ACMEStatus() []certs.ManagedInfo {
	if f := p.acmeStatus.Load(); f != nil && *f != nil {
		return (*f)()
	}
	return nil
}

// ACMEResult counts a finished ACME order (renewal false) or renewal of
// this node, and whether it got a certificate; give it to
// acme.Options.OnResult.
func (p *Proxy) ACMEResult(renewal, ok bool) {
	c, result := p.metrics.acmeOrders, "ok"
	if renewal {
		c = p.metrics.acmeRenewals
	}
	if !ok {
		result = "error"
	}
	c.WithLabelValues(result).Inc()
}

// SetACMEChallenge installs the hook that answers HTTP-01 validations; nil
// removes it (a domain with acme: true then answers them 404).
func (p *Proxy) SetACMEChallenge(f ACMEChallenge) {
	if f == nil {
		p.acmeChallenge.Store(nil)
		return
	}
	p.acmeChallenge.Store(&f)
}

// isChallenge reports whether a request of d for target (as sent) with
// method is an HTTP-01 validation edge answers: GET or HEAD under
// /.well-known/acme-challenge/ of a domain with acme: true.
func isChallenge(d *domain, method, target string) bool {
	return d.ACME && (method == http.MethodGet || method == http.MethodHead) && strings.HasPrefix(target, acmeChallenge)
}

// challenge answers the HTTP-01 validation of target for host in a: 200
// with the key authorization, or 404 for a token no node of the PoP has.
func (p *Proxy) challenge(a *answer, d *domain, host, target string) {
	token, _, _ := strings.Cut(target[len(acmeChallenge):], "?")
	keyAuth, ok := "", false
	if f := p.acmeChallenge.Load(); f != nil && token != "" && !strings.Contains(token, "/") {
		keyAuth, ok = (*f)(host, token)
	}
	if ok {
		a.textAnswer(http.StatusOK, outcomeACME, keyAuth)
	} else {
		a.textAnswer(http.StatusNotFound, outcomeACME, "not found: no ACME challenge for this token\n")
	}
	d.requests.count(a)
}

// certificatesView is GET /v1/certificates: the certificates from files,
// and each name tls.acme obtains a certificate for, with its state.
type certificatesView struct {
	Files []fileCertView `json:"files"`
	ACME  []acmeNameView `json:"acme"`
}

type fileCertView struct {
	File     string    `json:"file"`
	Names    []string  `json:"names"`
	Issuer   string    `json:"issuer"`
	NotAfter time.Time `json:"not_after"`
}

// acmeNameView is one ACME name; a time it has none of is left out.
type acmeNameView struct {
	Name        string     `json:"name"`
	State       string     `json:"state"`
	NotAfter    *time.Time `json:"not_after,omitempty"`
	NextRenewal *time.Time `json:"next_renewal,omitempty"`
	LastError   string     `json:"last_error,omitempty"`
	LastErrorAt *time.Time `json:"last_error_at,omitempty"`
}

func (p *Proxy) certificatesView() certificatesView {
	v := certificatesView{Files: []fileCertView{}, ACME: []acmeNameView{}}
	for _, c := range p.Certificates() {
		v.Files = append(v.Files, fileCertView{File: c.File, Names: c.Names, Issuer: c.Issuer, NotAfter: c.NotAfter.UTC()})
	}
	for _, m := range p.ACMEStatus() {
		v.ACME = append(v.ACME, acmeNameView{Name: m.Name, State: m.State, NotAfter: timeOrNil(m.NotAfter),
			NextRenewal: timeOrNil(m.NextRenewal), LastError: m.LastError, LastErrorAt: timeOrNil(m.LastErrorAt)})
	}
	return v
}

// timeOrNil is t in UTC, nil for the zero time.
func timeOrNil(t time.Time) *time.Time {
	if t.IsZero() {
		return nil
	}
	t = t.UTC()
	return &t
}

func (p *Proxy) getCertificates(w http.ResponseWriter, _ *http.Request) {
	writeJSON(w, http.StatusOK, p.certificatesView())
}
