//go:build unix

package main

import (
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"net/url"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"

	"golang.org/x/net/html"
)

// drainHarness clicks the drain button of server, once its row shows it
// in rotation, then its undrain button once the page shows it drained,
// and stops once it is back: data-step says how far it got, data-before,
// data-drained and data-after keep the row's Rotation cell at each step,
// data-label the undrain button's label and data-confirmed the
// confirmations accepted. It answers the token form with token first.
const drainHarness = `<script>
window.confirm = text => { document.body.dataset.confirmed = (document.body.dataset.confirmed || '') + text + '\n'; return true; };
const server = %q, token = %q;
const poll = setInterval(() => {
  const body = document.body.dataset;
  const input = document.getElementById('token');
  if (input && !body.asked) {
    body.asked = 'yes';
    input.value = token;
    input.form.requestSubmit();
    return;
  }
  const b = document.querySelector('button.drain[data-server="' + server + '"]');
  if (!b || b.disabled) return;
  const rotation = b.closest('tr').cells[6].textContent;
  const step = body.step || '';
  if (step === '' && b.dataset.action === 'drain') {
    body.step = 'drain'; body.before = rotation; b.click();
  } else if (step === 'drain' && b.dataset.action === 'undrain') {
    body.step = 'undrain'; body.drained = rotation; body.label = b.getAttribute('aria-label'); b.click();
  } else if (step === 'undrain' && b.dataset.action === 'drain') {
    body.step = 'done'; body.after = rotation; clearInterval(poll);
  }
}, 100);
</script>`

// TestStatusPageDrainButton: in headless Chromium the status page's Drain
// button of a server, confirmed, drains it through the admin API (with
// the bearer token when one is set), the page then shows it drained with
// an Undrain button, which puts it back. A page of another origin that
// posts a form to the drain endpoint is refused (403) and drains nothing.
func TestStatusPageDrainButton(t *testing.T) {
	for _, token := range []string{"", "s3cret-token-for-drains"} {
		t.Run(map[bool]string{true: "token", false: "no token"}[token != ""], func(t *testing.T) {
			var servers [2]*httptest.Server
			for i := range servers {
				servers[i] = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { io.WriteString(w, "ok") }))
				t.Cleanup(servers[i].Close)
			}
			a := servers[0].URL
			cfg := fmt.Sprintf(`listen: "127.0.0.1:0"
admin_listen: "127.0.0.1:1"
domains:
  - name: app
    hosts: [app.example.com]
    origins: [{url: %q}, {url: %q}]
`, a, servers[1].URL)
			if token != "" {
				cfg += "admin_token: " + token + "\n"
			}
			p, _, reg := statusProxy(t, filepath.Join(t.TempDir(), "edge.yaml"), cfg)
			var ready atomic.Bool
			ready.Store(true)
			s := serveHarness(t, adminRouter(reg, p, &ready, true), fmt.Sprintf(drainHarness, a, token))

			out := chromium(t, "--dump-dom", s.url+"/harness")
			defer func() {
				if t.Failed() {
					t.Logf("the page as rendered:\n%s", out)
				}
			}()
			var body *html.Node
			parseDOM(t, out).each(func(n *html.Node) {
				if n.Data == "body" {
					body = n
				}
			})
			checks := []struct{ name, got, want string }{
				{"step", nodeAttr(body, "data-step"), "done"},
				{"before", nodeAttr(body, "data-before"), "in rotation"},
				{"drained", nodeAttr(body, "data-drained"), "drained"},
				{"after", nodeAttr(body, "data-after"), "in rotation"},
				{"undrain label", nodeAttr(body, "data-label"), "Undrain " + a + " of app"},
				{"confirmations", nodeAttr(body, "data-confirmed"),
					"Drain " + a + " of app? This node sends it no new requests; those in flight finish. Other nodes of the PoP are drained on their own.\n" +
						"Undrain " + a + " of app? This node sends it requests again.\n"},
			}
			for _, c := range checks {
				if c.got != c.want {
					t.Errorf("%s: got %q, want %q", c.name, c.got, c.want)
				}
			}
			var posts []string
			for _, r := range s.requests() {
				if token != "" && r.auth != "Bearer "+token {
					t.Errorf("%s %s sent Authorization %q, want the bearer token", r.method, r.path, r.auth)
				}
				if r.method == "POST" {
					posts = append(posts, fmt.Sprintf("%s?%s %d", r.path, r.query, r.status))
				}
			}
			q := "server=" + url.QueryEscape(a)
			if want := []string{"/v1/origins/app/drain?" + q + " 200", "/v1/origins/app/undrain?" + q + " 200"}; strings.Join(posts, ",") != strings.Join(want, ",") {
				t.Errorf("POST requests %q, want %q", posts, want)
			}

			// A page elsewhere (another port: another origin) posts a form
			// to the drain endpoint in the operator's browser.
			evil := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				w.Header().Set("Content-Type", "text/html; charset=utf-8")
				fmt.Fprintf(w, `<form method="POST" action="%s/v1/origins/app/drain?%s"></form><script>document.forms[0].submit()</script>`, s.url, q)
			}))
			t.Cleanup(evil.Close)
			chromium(t, "--dump-dom", evil.URL+"/")
			seen := s.requests()
			if last := seen[len(seen)-1]; last.method != "POST" || last.status != http.StatusForbidden {
				t.Errorf("the cross-origin form's request: %+v, want a POST refused 403", last)
			}
			v, err := originsAt(t, s.url, token)
			if err != nil || len(v.Domains) != 1 || v.Domains[0].Servers[0].Drained {
				t.Errorf("after the cross-origin form: %+v (%v), want %s in rotation", v, err, a)
			}
		})
	}
}
