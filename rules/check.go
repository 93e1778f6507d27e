package rules

import (
	"fmt"
	"net"

	"github.com/edgerate/edge/internal/algorithm"
)

// Defaults of the check section.
const (
	DefaultDenyStatus = 429
	// CheckTokenHeader is the request header in which the asking proxy
	// sends check.token.
	CheckTokenHeader = "X-Edge-Check-Token"
)

// CheckConfig is the check section: a listener on which every request is a
// question from another proxy, "may this client's request go on?", about
// the request that proxy describes in its forwarded fields. It is answered
// by the rules of the domains that serve check, as a proxied request would
// be, without forwarding anything.
type CheckConfig struct {
	// Listen is the check listener's address, host:port; required. It must
	// differ from listen and admin_listen.
	Listen string `mapstructure:"listen"`
	// DenyStatus is the status of every refusal: a request over a limit, a
	// question edge cannot read (missing or malformed forwarded fields, a
	// host no checked domain claims) and a missing or wrong token. Default
	// 429; valid 400..599. nginx's auth_request accepts only 401 and 403 as
	// refusals (anything else becomes a 500 for its client), so an nginx
	// in front wants 403, which its error_page turns into a 429.
	DenyStatus int `mapstructure:"deny_status"`
	// Token, when set, must arrive in every question's X-Edge-Check-Token
	// header, compared in constant time; a question without it is refused.
	// The check listener believes the forwarded fields it is sent, so one
	// that listens beyond loopback should have a token (edge warns when it
	// does not).
	Token string `mapstructure:"token"`
}

// Check is a compiled [CheckConfig].
type Check struct {
	Listen     string
	DenyStatus int
	Token      string // "" = none
}

// Serve values of a domain.
const (
	serveProxy = "proxy"
	serveCheck = "check"
	serveBoth  = "both"
)

// compileCheck validates the check section, whose listener must not collide
// with listen or admin_listen (checkListeners has reported theirs).
func compileCheck(p *problems, c *CheckConfig, listen, admin string) *Check {
	if c == nil {
		return nil
	}
	ch := &Check{Listen: c.Listen, DenyStatus: c.DenyStatus, Token: c.Token}
	if ch.Listen == "" {
		p.missing("check.listen", "with the check section (host:port)", "must be host:port, got %q", ch.Listen)
	} else if h, port, ok := checkAddr(p, "check.listen", ch.Listen); ok {
		for _, other := range []struct{ key, addr string }{{"listen", listen}, {"admin_listen", admin}} {
			oh, op, err := splitListen(other.addr)
			if err == nil && collide(ch.Listen, h, port, other.addr, oh, op) {
				p.add("check.listen", "must differ from %s (%q), got %q", other.key, other.addr, ch.Listen)
			}
		}
	}
	if ch.DenyStatus == 0 {
		ch.DenyStatus = DefaultDenyStatus
	}
	if ch.DenyStatus < 400 || ch.DenyStatus > 599 {
		p.add("check.deny_status", "must be between 400 and 599, got %d", ch.DenyStatus)
	}
	return ch
}

// splitListen splits a listen address that checkListeners has accepted.
func splitListen(addr string) (string, uint64, error) {
	h, ps, err := net.SplitHostPort(addr)
	if err != nil {
		return "", 0, err
	}
	var port uint64
	_, err = fmt.Sscan(ps, &port)
	return h, port, err
}

// collide reports whether two listen addresses could bind the same socket:
// equal strings, or the same port where either host is unspecified (it
// binds every address) or both hosts are equal. Port 0 never collides:
// the kernel picks a free port for each listener.
func collide(a, ah string, ap uint64, b, bh string, bp uint64) bool {
	unspecified := func(h string) bool { return h == "" || h == "0.0.0.0" || h == "::" }
	return ap == bp && ap != 0 && (a == b || ah == bh || unspecified(ah) || unspecified(bh))
}

// compileServe sets which listeners answer for domain d at path; check
// says whether the check section is set.
func compileServe(p *problems, d *Domain, path string, dc DomainConfig, check bool) {
	serve := dc.Serve
	if serve == "" {
		serve = serveProxy
		if check {
			serve = serveBoth
		}
	}
	switch serve {
	case serveProxy:
		d.Proxied = true
	case serveCheck:
		d.Checked = true
	case serveBoth:
		d.Proxied, d.Checked = true, true
	default:
		p.add(path+".serve", "must be proxy, check or both, got %q", dc.Serve)
		d.Proxied = true // check the rest as the default would
		return
	}
	if d.Checked && !check {
		p.add(path+".serve", "needs the check section (check.listen), got %q", serve)
	}
	if d.Proxied {
		return
	}
	// Never proxied: what only a proxied request uses is a mistake here.
	for _, k := range []struct {
		key string
		set bool
	}{
		{"origin", dc.Origin != ""},
		{"origins", len(dc.Origins) > 0},
		{"respond", dc.Respond != nil},
		{"request_buffering", dc.RequestBuffering != nil},
		{"request_buffer", dc.RequestBuffer != 0},
		{"max_request_body", dc.MaxRequestBody != 0},
	} {
		if k.set {
			p.add(path+"."+k.key, "does not apply to a domain with serve check, which is never proxied")
		}
	}
}

// checkCheckedRule refuses what rule r, at path, of a domain that the check
// listener answers for, would need of the response: the check listener
// answers before the request goes on, and never sees it again.
func checkCheckedRule(p *problems, path string, r *Rule) {
	switch {
	case r.Algorithm == algorithm.Concurrency:
		p.add(path+".algorithm", "concurrency holds a slot until the response, which the check listener never sees (set the domain's serve to proxy), got %s", r.Algorithm)
	case r.MaxDelay > 0:
		p.add(path+".max_delay", "a queue holds the request, which the check listener does not (set the domain's serve to proxy), got %s", fmtDuration(r.MaxDelay))
	}
	if r.CountStatus != nil {
		p.add(path+".count_status", "needs the response, which the check listener never sees (set the domain's serve to proxy)")
	}
	if r.ResponseCostHeader != "" {
		p.add(path+".response_cost_header", "needs the response, which the check listener never sees (set the domain's serve to proxy)")
	}
}
