package proxy

import (
	"bytes"
	"embed"
	"fmt"
	"html/template"
	"net/http"
	"runtime"
	"strconv"
	"strings"
	"time"

	"github.com/edgerate/edge/internal/algorithm"
)

// The status page is three files built into the binary: the admin network
// may have no internet, so the page loads nothing from elsewhere (no
// fonts, scripts or style sheets from a CDN).
//
//go:embed status/index.html status/status.css status/status.js
var statusFiles embed.FS

var statusTemplate = template.Must(template.New("index.html").Funcs(template.FuncMap{
	"join":       strings.Join,
	"changes":    reloadChanges,
	"ruleLimit":  ruleLimit,
	"conditions": ruleConditions,
	"daysLeft":   daysLeft,
	"results":    func() []string { return handshakeResults },
	"utc":        utcTime,
}).ParseFS(statusFiles, "status/index.html"))

// StatusPageOptions say what the status page needs from the admin
// listener's wiring.
type StatusPageOptions struct {
	// TokenRequired reports, at each request, whether the admin API needs
	// a bearer token. Then the page carries no data: its script asks for
	// the token and reads everything from the API.
	TokenRequired func() bool
	// Ready reports whether /readyz answers ready.
	Ready func() bool
}

// statusPageData is what index.html renders without the script: the
// running configuration (as GET /v1/config shows it) and the build.
type statusPageData struct {
	TokenRequired bool
	Version       string
	GoVersion     string
	Uptime        string
	Ready         bool
	Config        configView
	TLS           *tlsStatusView // nil when edge serves no TLS
	Certificates  certificatesView
	Origins       originsView
	Rendered      string
}

// StatusPage serves the status page of the admin listener: GET / (the
// page), /status.css and /status.js. Without a token the page is rendered
// with the configuration's names and settings, readable without the
// script, which then fills in and refreshes the figures from the admin
// API (GET /v1/config, /v1/status, /v1/top and /readyz) every few seconds.
// With a token it is a bare page whose script asks for the token, keeps
// it in the tab's session storage and sends it as a bearer token.
func (p *Proxy) StatusPage(opts StatusPageOptions) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		h := w.Header()
		// Everything the page loads comes from this listener; its script
		// connects only here.
		h.Set("Content-Security-Policy", "default-src 'none'; script-src 'self'; style-src 'self'; connect-src 'self'; img-src 'self'; base-uri 'none'; form-action 'none'; frame-ancestors 'none'")
		h.Set("X-Content-Type-Options", "nosniff")
		h.Set("Referrer-Policy", "no-referrer")
		h.Set("Cache-Control", "no-store")
		switch r.URL.Path {
		case "/status.css":
			serveStatusFile(w, "status/status.css", "text/css; charset=utf-8")
			return
		case "/status.js":
			serveStatusFile(w, "status/status.js", "text/javascript; charset=utf-8")
			return
		case "/":
		default:
			http.NotFound(w, r)
			return
		}
		d := statusPageData{TokenRequired: opts.TokenRequired()}
		if !d.TokenRequired {
			now := p.now()
			d.Version, d.GoVersion = p.version, runtime.Version()
			d.Uptime = formatUptime(now.Sub(p.startedAt))
			d.Ready = opts.Ready()
			d.Config = p.configView()
			d.TLS = p.tlsStatus(now)
			d.Certificates = p.certificatesView()
			d.Origins = p.originsView().grouped()
			d.Rendered = now.UTC().Format(time.DateTime) + " UTC"
		}
		var buf bytes.Buffer
		if err := statusTemplate.Execute(&buf, d); err != nil {
			http.Error(w, "rendering the status page: "+err.Error(), http.StatusInternalServerError)
			return
		}
		h.Set("Content-Type", "text/html; charset=utf-8")
		w.Write(buf.Bytes())
	})
}

// utcTime writes a time (a time.Time or a *time.Time) as the page does:
// "2026-01-02 15:04:05 UTC".
func utcTime(t any) string {
	switch v := t.(type) {
	case time.Time:
		return v.UTC().Format(time.DateTime) + " UTC"
	case *time.Time:
		return v.UTC().Format(time.DateTime) + " UTC"
	}
	return "–"
}

func serveStatusFile(w http.ResponseWriter, name, contentType string) {
	b, err := statusFiles.ReadFile(name)
	if err != nil { // cannot happen: the file is embedded
		http.Error(w, err.Error(), http.StatusInternalServerError)
		return
	}
	w.Header().Set("Content-Type", contentType)
	w.Write(b)
}

// formatUptime writes d in whole seconds, minutes, hours and days, the
// way the page's script does: "3d 4h 5m", "12m 7s".
func formatUptime(d time.Duration) string {
	s := int64(d / time.Second)
	days, hours, mins, secs := s/86400, s/3600%24, s/60%60, s%60
	switch {
	case days > 0:
		return fmt.Sprintf("%dd %dh %dm", days, hours, mins)
	case hours > 0:
		return fmt.Sprintf("%dh %dm", hours, mins)
	case mins > 0:
		return fmt.Sprintf("%dm %ds", mins, secs)
	}
	return fmt.Sprintf("%ds", secs)
}

// daysLeft writes a certificate's days left as the page's script does:
// the whole days, or "expired".
func daysLeft(c certificateView) string {
	if c.Expired {
		return "expired"
	}
	return strconv.Itoa(c.DaysLeft)
}

// reloadChanges lists what a load changed, one phrase a kind, as the
// page's script does: "rules changed: api/per-ip, api/login".
func reloadChanges(r ReloadResult) []string {
	var out []string
	for _, c := range []struct {
		what  string
		names []string
	}{
		{"domains added", r.DomainsAdded}, {"domains removed", r.DomainsRemoved},
		{"rules added", r.RulesAdded}, {"rules removed", r.RulesRemoved},
		{"rules changed", r.RulesChanged}, {"rules reset", r.RulesReset},
	} {
		if len(c.names) > 0 {
			out = append(out, c.what+": "+strings.Join(c.names, ", "))
		}
	}
	if r.KeysCarried > 0 {
		out = append(out, fmt.Sprintf("keys carried: %d", r.KeysCarried))
	}
	return out
}

// ruleLimit writes a rule's limit in its algorithm's own terms, as the
// page's script does without the figures it reads from /v1/status: "20
// per 10s", "burst 40, refills 20 per 10s", "4 in flight per key", "1000
// per day (Europe/Berlin)".
func ruleLimit(r ruleView) string {
	switch r.Algorithm {
	case algorithm.TokenBucket.String():
		return fmt.Sprintf("burst %d, refills %d per %s", r.Burst, r.Limit, shortDuration(r.Period))
	case algorithm.LeakyBucket.String():
		return fmt.Sprintf("capacity %d, drains %d per %s", r.Burst, r.Limit, shortDuration(r.Period))
	case algorithm.Concurrency.String():
		return fmt.Sprintf("%d in flight per key", r.Limit)
	case algorithm.Quota.String():
		return fmt.Sprintf("%d per %s (%s)", r.Limit, resetNoun[r.Reset], r.Timezone)
	}
	return fmt.Sprintf("%d per %s", r.Limit, shortDuration(r.Period))
}

var resetNoun = map[string]string{"daily": "day", "weekly": "week", "monthly": "month"}

// shortDuration writes a duration as /v1/config does without its zero
// parts, as the page's script does: "1m0s" is "1m", "1h0m0s" "1h".
func shortDuration(d string) string {
	if strings.HasSuffix(d, "m0s") {
		d = strings.TrimSuffix(d, "0s")
	}
	if strings.HasSuffix(d, "h0m") {
		d = strings.TrimSuffix(d, "0m")
	}
	return d
}

// ruleConditions lists what a rule applies to and how it counts and
// refuses beyond its algorithm and limit, one phrase each, as the page's
// script does (which adds the allow list's prefixes as a tooltip).
func ruleConditions(r ruleView) []string {
	var out []string
	add := func(format string, a ...any) { out = append(out, fmt.Sprintf(format, a...)) }
	if r.PathPrefix != "" {
		add("path %s…", r.PathPrefix)
	}
	if len(r.Methods) > 0 {
		add("methods %s", strings.Join(r.Methods, ", "))
	}
	switch {
	case r.CostHeader != "":
		add("cost from %s (at most %d, else %d)", r.CostHeader, r.MaxCost, r.Cost)
	case r.Cost != 1:
		add("cost %d", r.Cost)
	}
	if r.ResponseCostHeader != "" {
		add("origin reports cost in %s", r.ResponseCostHeader)
	}
	if len(r.CountStatus) > 0 {
		codes := make([]string, len(r.CountStatus))
		for i, c := range r.CountStatus {
			codes[i] = strconv.Itoa(c)
		}
		add("counts only status %s", strings.Join(codes, ", "))
	}
	if r.MaxDelay != "" {
		add("queues up to %s", r.MaxDelay)
	}
	switch n := len(r.Allow); {
	case n == 1:
		add("1 client allowed")
	case n > 1:
		add("%d clients allowed", n)
	}
	if r.CountBlocked {
		add("counts refused requests")
	}
	if r.MitigationTimeout != "" {
		add("blocks %s once over", shortDuration(r.MitigationTimeout))
	}
	if r.BlockStatus != 0 {
		add("refuses with %d", r.BlockStatus)
	}
	add("headers %s", r.Headers)
	return out
}
