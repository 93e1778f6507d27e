// edge's status page: reads the admin API every few seconds (not while the
// tab is hidden) and renders a summary of the domains, the node, the
// cluster, every domain and rule with its figures, and the top talkers
// with a button to reset each. The page is a list of sections (SECTIONS,
// below). No library: the charts are inline SVG drawn here.
'use strict';
(function () {
  const REFRESH_MS = 5000;     // between refreshes
  const PAUSED = 'Paused while this tab is hidden.';
  const CHART_SECONDS = 120;   // seconds a chart shows
  const RATE_SECONDS = 10;     // the "per second" figures average these
  const TOP_N = 10;            // top talkers shown per rule
  const KEY_CHARS = 80;        // of a key shown before an ellipsis
  const TOKEN_KEY = 'edge-admin-token';
  const SVG = 'http://www.w3.org/2000/svg';

  const main = document.getElementById('status');
  const note = document.getElementById('note');
  let timer = null;
  let busy = false;

  class Unauthorized extends Error {}

  // The admin API: the token, once given, goes with every request.
  function apiHeaders() {
    const h = { Accept: 'application/json' };
    const t = sessionStorage.getItem(TOKEN_KEY);
    if (t) h.Authorization = 'Bearer ' + t;
    return h;
  }
  async function api(method, path) {
    const r = await fetch(path, { method: method, headers: apiHeaders(), cache: 'no-store', credentials: 'omit' });
    if (r.status === 401) throw new Unauthorized('the admin token was refused');
    return r;
  }
  async function getJSON(path) {
    const r = await api('GET', path);
    if (!r.ok) throw new Error('GET ' + path + ': ' + r.status);
    return r.json();
  }
  async function readiness() {
    const r = await fetch('/readyz', { cache: 'no-store', credentials: 'omit' });
    const text = (await r.text()).trim();
    return { ok: r.ok, text: text || String(r.status) };
  }
  // A key as the page shows it: control, format (bidi overrides,
  // zero-width) and line separator characters percent-encoded, as the key
  // text writes its other hostile bytes, so the text shown still names the
  // key; shortKey cuts it after KEY_CHARS characters.
  function shownKey(key) {
    return key.replace(/[\p{Cc}\p{Cf}\p{Zl}\p{Zp}]/gu, encodeURIComponent);
  }
  function shortKey(key) {
    const chars = Array.from(shownKey(key));
    return chars.length > KEY_CHARS ? chars.slice(0, KEY_CHARS).join('') + '…' : chars.join('');
  }
  function drainPath(domain, action, server) {
    return '/v1/origins/' + encodeURIComponent(domain) + '/' + action + '?server=' + encodeURIComponent(server);
  }
  function keyPath(domain, rule, key) {
    return '/v1/keys/' + encodeURIComponent(domain) + '/' + encodeURIComponent(rule) + '/' + encodeURIComponent(key);
  }

  // el makes an element; children are nodes or text (never parsed as HTML).
  function el(tag, attrs, ...children) {
    const e = document.createElement(tag);
    for (const [k, v] of Object.entries(attrs || {})) {
      if (v !== undefined && v !== null && v !== false) e.setAttribute(k, v === true ? '' : v);
    }
    for (const c of children.flat()) {
      if (c !== undefined && c !== null) e.append(c instanceof Node ? c : String(c));
    }
    return e;
  }
  function svg(tag, attrs, ...children) {
    const e = document.createElementNS(SVG, tag);
    for (const [k, v] of Object.entries(attrs || {})) e.setAttribute(k, v);
    for (const c of children) e.append(c);
    return e;
  }
  function facts(pairs) {
    return el('dl', { class: 'facts' }, pairs.map(([k, v]) => el('div', null, el('dt', null, k), el('dd', null, v))));
  }
  function table(cls, caption, id, head, rows) {
    return el('div', { class: 'scroll', role: 'region', tabindex: '0', 'aria-labelledby': id },
      el('table', { class: cls },
        el('caption', { id: id }, caption),
        el('thead', null, el('tr', null, head.map(h => el('th', { scope: 'col' }, h)))),
        el('tbody', null, rows)));
  }

  function num(v) {
    if (v === null || v === undefined || Number.isNaN(v)) return '–';
    if (v === 0) return '0';
    if (Math.abs(v) >= 100) return Math.round(v).toLocaleString('en');
    if (Math.abs(v) >= 10) return v.toFixed(1);
    return v.toFixed(2);
  }
  function count(v) {
    if (v === null || v === undefined) return '–';
    return Math.round(v).toLocaleString('en');
  }
  function latency(seconds) {
    if (seconds === null || seconds === undefined) return '–';
    return seconds < 1 ? (seconds * 1000).toFixed(1) + ' ms' : seconds.toFixed(2) + ' s';
  }
  function uptime(s) {
    s = Math.floor(s);
    const d = Math.floor(s / 86400), h = Math.floor(s / 3600) % 24, m = Math.floor(s / 60) % 60;
    if (d > 0) return d + 'd ' + h + 'h ' + m + 'm';
    if (h > 0) return h + 'h ' + m + 'm';
    if (m > 0) return m + 'm ' + (s % 60) + 's';
    return s + 's';
  }
  function utc(iso) {
    return iso.replace('T', ' ').replace(/\.\d+/, '').replace('Z', '') + ' UTC';
  }
  // mean of the last n values of a series
  function recent(series, n) {
    if (!series || series.length === 0) return null;
    const tail = series.slice(-n);
    return tail.reduce((a, b) => a + b, 0) / tail.length;
  }
  function add(a, b) { return a.map((v, i) => v + (b[i] || 0)); }
  function changes(r) {
    const out = [];
    for (const [what, names] of [['domains added', r.domains_added], ['domains removed', r.domains_removed],
      ['rules added', r.rules_added], ['rules removed', r.rules_removed],
      ['rules changed', r.rules_changed], ['rules reset', r.rules_reset]]) {
      if (names && names.length) out.push(what + ': ' + names.join(', '));
    }
    if (r.keys_carried > 0) out.push('keys carried: ' + r.keys_carried);
    return out;
  }

  // seconds reads a Go duration as /v1/config writes it ("1m30s", "500ms").
  function seconds(d) {
    const unit = { h: 3600, m: 60, s: 1, ms: 1e-3, us: 1e-6, 'µs': 1e-6, ns: 1e-9 };
    let total = 0;
    for (const [, v, u] of (d || '').matchAll(/([\d.]+)(h|ms|m|s|us|µs|ns)/g)) total += parseFloat(v) * unit[u];
    return total;
  }
  // period writes a Go duration without its zero parts: "1m0s" is "1m".
  function period(d) {
    return d.replace(/(\D)0s$/, '$1').replace(/(h)0m$/, '$1');
  }
  const RESET_NOUN = { daily: 'day', weekly: 'week', monthly: 'month' };

  // ruleLimit is a rule's limit in its algorithm's own terms: a window's
  // count per period, a bucket's burst (capacity) and refill (drain) rate,
  // a concurrency rule's requests in flight (and its slots in use now, rf
  // being the rule's figures), a quota's count per calendar period and its
  // next reset.
  function ruleLimit(r, rf) {
    const rate = () => num(r.limit / seconds(r.period)) + '/s';
    switch (r.algorithm) {
      case 'token_bucket':
        return 'burst ' + count(r.burst) + ', refills ' + count(r.limit) + ' per ' + period(r.period) + ' (' + rate() + ')';
      case 'leaky_bucket':
        return 'capacity ' + count(r.burst) + ', drains ' + count(r.limit) + ' per ' + period(r.period) + ' (' + rate() + ')';
      case 'concurrency':
        return count(r.limit) + ' in flight per key; ' +
          (rf && rf.slots_in_use !== undefined ? count(rf.slots_in_use) : '–') + ' slots in use now';
      case 'quota':
        return count(r.limit) + ' per ' + (RESET_NOUN[r.reset] || r.reset) + ' (' + r.timezone + ')' +
          (rf && rf.resets_at ? '; resets ' + utc(rf.resets_at) : '');
    }
    return count(r.limit) + ' per ' + period(r.period);
  }
  // keyState is a top talker's counters against the rule's limit, in the
  // terms of ruleLimit: tokens left of the burst, a leaky bucket's level of
  // its capacity, slots in use, quota used, or a window's estimate.
  function keyState(r, k) {
    switch (r.algorithm) {
      case 'token_bucket':
        return num(Math.max(0, r.burst - k.estimate)) + ' tokens of ' + count(r.burst);
      case 'leaky_bucket':
        return 'level ' + num(k.estimate) + ' of ' + count(r.burst);
      case 'concurrency':
        return count(k.current) + ' in use of ' + count(k.limit);
      case 'quota':
        return count(k.current) + ' used of ' + count(k.limit);
    }
    return num(k.estimate) + ' of ' + count(k.limit);
  }
  // conditions lists what a rule applies to and how it counts and refuses,
  // beyond its algorithm and limit: match, cost, queueing, allow list,
  // mitigation and the headers it sends.
  function conditions(r) {
    const out = [];
    if (r.path_prefix) out.push('path ' + r.path_prefix + '…');
    if (r.methods && r.methods.length) out.push('methods ' + r.methods.join(', '));
    if (r.cost_header) out.push('cost from ' + r.cost_header + ' (at most ' + count(r.max_cost) + ', else ' + count(r.cost) + ')');
    else if (r.cost !== 1) out.push('cost ' + count(r.cost));
    if (r.response_cost_header) out.push('origin reports cost in ' + r.response_cost_header);
    if (r.count_status && r.count_status.length) out.push('counts only status ' + r.count_status.join(', '));
    if (r.max_delay) out.push('queues up to ' + r.max_delay);
    if (r.allow && r.allow.length) {
      out.push(el('span', { title: r.allow.join(', ') }, r.allow.length + (r.allow.length === 1 ? ' client' : ' clients') + ' allowed'));
    }
    if (r.count_blocked) out.push('counts refused requests');
    if (r.mitigation_timeout) out.push('blocks ' + period(r.mitigation_timeout) + ' once over');
    if (r.block_status) out.push('refuses with ' + r.block_status);
    out.push('headers ' + r.headers);
    return out.flatMap((c, i) => i ? ['; ', c] : [c]);
  }

  // chart draws allowed and refused per second as two lines.
  function chart(id, name, times, allowed, refused) {
    const W = 600, H = 140, L = 44, B = 20, T = 10;
    const peak = Math.max(1, ...allowed, ...refused);
    const tick = v => Number.isInteger(v) ? String(v) : num(v);
    const top = niceCeil(peak);
    const n = Math.max(times.length, 2);
    const x = i => L + (W - L - 4) * (i + (CHART_SECONDS - n + 1)) / CHART_SECONDS;
    const y = v => T + (H - T - B) * (1 - v / top);
    const line = (vals, cls) => svg('polyline', { class: cls, fill: 'none', points: vals.map((v, i) => x(i).toFixed(1) + ',' + y(v).toFixed(1)).join(' ') });
    const label = 'Requests per second of ' + name + ' over the last ' + (CHART_SECONDS / 60) + ' minutes: allowed up to ' +
      num(Math.max(0, ...allowed)) + ', refused up to ' + num(Math.max(0, ...refused));
    const s = svg('svg', { viewBox: '0 0 ' + W + ' ' + H, role: 'img', 'aria-labelledby': id, class: 'chart' },
      svg('title', { id: id }, label),
      svg('line', { class: 'axis', x1: L, y1: y(0), x2: W - 4, y2: y(0) }),
      svg('line', { class: 'grid', x1: L, y1: y(top), x2: W - 4, y2: y(top) }),
      svg('line', { class: 'grid', x1: L, y1: y(top / 2), x2: W - 4, y2: y(top / 2) }),
      svg('text', { x: L - 6, y: y(top) + 4, 'text-anchor': 'end' }, tick(top)),
      svg('text', { x: L - 6, y: y(top / 2) + 4, 'text-anchor': 'end' }, tick(top / 2)),
      svg('text', { x: L - 6, y: y(0) + 4, 'text-anchor': 'end' }, '0'),
      svg('text', { x: L, y: H - 4 }, '−' + (CHART_SECONDS / 60) + ' min'),
      svg('text', { x: W - 4, y: H - 4, 'text-anchor': 'end' }, 'now'),
      line(allowed, 'allowed'), line(refused, 'refused'));
    return el('figure', { class: 'chart' }, s,
      el('figcaption', null, el('span', { class: 'key allowed' }, 'allowed'), ' ', el('span', { class: 'key refused' }, 'refused'), ' per second'));
  }
  function niceCeil(v) {
    const p = Math.pow(10, Math.floor(Math.log10(v)));
    for (const m of [1, 2, 5, 10]) if (v <= m * p) return m * p;
    return 10 * p;
  }

  // renderSummary is one row a domain, linking to its section: what it
  // serves and refuses now, what edge answered itself (load shedding
  // first) and how its origin fails, so that a dozen domains read at a
  // glance.
  function renderSummary({ config, figures }) {
    const rows = config.domains.map((d, i) => {
      const f = figures.get(d.name);
      const t = f ? f.totals : {};
      const answered = Object.entries(t.answered || {}).filter(([o, n]) => o !== 'shed' && n > 0);
      const shed = (t.answered || {}).shed || 0;
      const errors = f ? recent(add(f.upstream_errors, f.upstream_5xx), RATE_SECONDS) : null;
      const refused = f ? recent(f.blocked, RATE_SECONDS) : null;
      return el('tr', null,
        el('th', { scope: 'row' }, el('a', { href: '#d' + i }, d.name)),
        el('td', null, d.hosts.join(', ')),
        el('td', null, f ? num(recent(f.served, RATE_SECONDS)) : '–'),
        el('td', { class: refused > 0 ? 'refused' : null }, f ? num(refused) : '–'),
        el('td', { class: shed > 0 ? 'refused' : null }, f ? count(shed) : '–'),
        el('td', { class: answered.length ? 'refused' : null },
          answered.map(([o, n]) => o.replace('_', ' ') + ' ' + count(n)).join(', ') || (f ? 'none' : '–')),
        el('td', { class: errors > 0 ? 'refused' : null }, f ? num(errors) : '–'));
    });
    return el('section', { class: 'panel wide', 'aria-labelledby': 'h-summary' },
      el('h2', { id: 'h-summary' }, 'Summary'),
      table('summary', 'Domains at a glance', 'summary-t',
        ['Domain', 'Hosts', 'Allowed/s', 'Refused/s', 'Shed since start', 'Other answers since start', 'Origin errors/s'], rows));
  }

  function renderNode({ config, status, ready }) {
    const parts = [
      ['Build', status.version + ' (' + status.go_version + ')'],
      ['Uptime', uptime(status.uptime_seconds)],
      ['PoP', config.pop],
      ['Node', config.cluster.node || 'this process (store: local)'],
      ['Readiness', el('span', { class: ready.ok ? 'ok' : 'bad' }, ready.text)],
      ['Config hash', el('code', { title: config.hash }, config.hash.slice(0, 16) + '…')],
      ['Loaded at', utc(config.loaded_at)],
      ['Last reload', config.last_reload_ok ? 'succeeded' :
        el('span', { class: 'bad' }, 'failed with ' + config.last_reload_problems + ' problem(s); the previous configuration is running')],
      ['What it changed', changes(config.last_load).join('; ') || 'nothing'],
      ['Needs a restart', (config.last_load.restart_required || []).join(', ') || 'nothing'],
    ];
    return el('section', { class: 'panel', 'aria-labelledby': 'h-node' },
      el('h2', { id: 'h-node' }, 'Node'), facts(parts),
      config.last_reload_error ? el('pre', { class: 'problems' }, config.last_reload_error) : null);
  }

  function renderCluster({ config, status }) {
    const c = config.cluster;
    let fallback = 0, fallbackRate = 0;
    for (const d of status.domains) {
      fallback += d.totals.fallback;
      fallbackRate += recent(d.fallback, RATE_SECONDS) || 0;
    }
    const circuit = c.circuit ? el('span', { class: c.circuit === 'closed' ? 'ok' : 'bad' }, c.circuit) : 'no Redis';
    return el('section', { class: 'panel', 'aria-labelledby': 'h-cluster' },
      el('h2', { id: 'h-cluster' }, 'Cluster'),
      facts([
        ['Store', c.store],
        ['Sync', c.sync || 'none (one node)'],
        ['Redis circuit', circuit],
        ['Live nodes', String(c.nodes || 1)],
        ['Fallback decisions', c.store === 'redis' ? num(fallback) + ' since start, ' + num(fallbackRate) + '/s now' : 'none (no Redis)'],
      ]));
  }

  // renderCertificates lists the certificates the HTTPS listener serves,
  // each with its names, issuer and expiry (highlighted within 14 days or
  // once expired, as /v1/status's expires_soon says), and the handshakes
  // since start by result; nothing when edge serves no TLS.
  const HANDSHAKE_RESULTS = ['ok', 'unknown_sni', 'rejected', 'plain_http', 'error']; // the page's order
  const FAILED_HANDSHAKE = ['rejected', 'plain_http', 'error'];
  // loadCertificates reads each name tls.acme obtains a certificate for,
  // with its state (/v1/certificates).
  function loadCertificates() {
    return getJSON('/v1/certificates');
  }

  function renderCertificates({ status }, certs) {
    const tls = status.tls;
    if (!tls) return null;
    const dash = '–';
    const acme = ((certs && certs.acme) || []).map(a => el('tr', null,
      el('th', { scope: 'row' }, a.name),
      el('td', null, el('span', { class: a.state === 'valid' ? 'ok' : (a.state === 'failed' || a.state === 'expired') ? 'bad' : null }, a.state)),
      el('td', null, a.not_after ? utc(a.not_after) : dash), el('td', null, a.next_renewal ? utc(a.next_renewal) : dash),
      el('td', null, a.last_error ? a.last_error + (a.last_error_at ? ' (' + utc(a.last_error_at) + ')' : '') : dash)));
    const rows = tls.certificates.map(c => {
      const cls = c.expires_soon ? 'bad' : null;
      return el('tr', null,
        el('th', { scope: 'row' }, c.file),
        el('td', null, c.names.join(', ') || '–'),
        el('td', null, c.issuer),
        el('td', { class: cls }, utc(c.not_after)),
        el('td', { class: cls }, c.expired ? 'expired' : String(c.days_left)));
    });
    const known = HANDSHAKE_RESULTS.filter(r => r in tls.handshakes);
    const results = known.concat(Object.keys(tls.handshakes).filter(r => !known.includes(r))).map(r => el('tr', null,
      el('th', { scope: 'row' }, r),
      el('td', { class: FAILED_HANDSHAKE.includes(r) && tls.handshakes[r] > 0 ? 'refused' : null }, count(tls.handshakes[r]))));
    return el('section', { class: 'panel wide', 'aria-labelledby': 'h-certificates' },
      el('h2', { id: 'h-certificates' }, 'Certificates'),
      table('certificates', 'Certificates the HTTPS listener serves', 'certificates-t',
        ['File', 'Names', 'Issuer', 'Expires', 'Days left'], rows),
      acme.length ? table('acme', 'Names obtained by ACME', 'acme-t',
        ['Name', 'State', 'Valid until', 'Next renewal', 'Last error'], acme) : null,
      table('handshakes', 'TLS handshakes since start', 'handshakes-t', ['Result', 'Handshakes'], results));
  }

  // renderOrigins lists the domains' origin servers (/v1/origins): each
  // with its weight, whether it takes requests, whether it is drained on
  // this node, its requests in flight, its last active check and its
  // ejections, and a button to drain or undrain it; nothing when no
  // domain forwards to origins.
  function loadOrigins() {
    return getJSON('/v1/origins');
  }

  function renderOrigins(_, origins) {
    // Groups of several servers, active checks, a max_in_flight or a
    // server drained, and routes, as the page's own rendering (a lone
    // origin is in its domain's settings already).
    const groups = ((origins && origins.domains) || []).filter(d => d.servers.length > 1 || d.checked || d.route || d.queue || d.servers.some(s => s.drained));
    if (!groups.length) return null;
    const dash = '–';
    const rows = [];
    for (const d of groups) {
      for (const s of d.servers) {
        rows.push(el('tr', null,
          el('th', { scope: 'row' }, d.domain),
          el('td', null, d.route || dash),
          el('td', null, d.match ? [el('code', null, d.match.path_prefix || '/'), d.match.methods.map(m => ' ' + m).join('')] : 'the rest'),
          el('td', null, s.server),
          el('td', null, String(s.weight)),
          el('td', null, el('span', { class: s.healthy ? 'ok' : 'bad' }, s.healthy ? 'healthy' : 'out')),
          el('td', null, s.drained ? el('span', { class: 'bad' }, 'drained') : 'in rotation'),
          el('td', null, count(s.in_flight) + (s.max_in_flight ? ' of ' + count(s.max_in_flight) : '') +
            (d.queue && d.queue.waiting ? ', ' + count(d.queue.waiting) + ' waiting' : '')),
          el('td', null, s.last_check ? s.last_check.outcome + ' (' + utc(s.last_check.at) + ')' : dash),
          el('td', null, count(s.ejections.passive) + ' passive, ' + count(s.ejections.active) + ' active'),
          el('td', null, el('button', {
            type: 'button', class: 'drain',
            'data-domain': d.domain, 'data-server': s.server, 'data-action': s.drained ? 'undrain' : 'drain',
            'aria-label': (s.drained ? 'Undrain ' : 'Drain ') + s.server + ' of ' + d.domain,
          }, s.drained ? 'Undrain' : 'Drain'))));
      }
    }
    return el('section', { class: 'panel wide', 'aria-labelledby': 'h-origins' },
      el('h2', { id: 'h-origins' }, 'Origins'),
      table('origins', 'Origin servers by domain', 'origins-t',
        ['Domain', 'Route', 'Takes', 'Server', 'Weight', 'Health', 'Rotation', 'In flight', 'Last check', 'Ejections', 'Drain'], rows));
  }

  function renderDomain(i, d, fig, times, tops) {
    const id = 'd' + i;
    const f = fig || { served: [], blocked: [], upstream_errors: [], upstream_5xx: [], upstream_latency_seconds: [], totals: {}, rules: [] };
    const lat = f.upstream_latency_seconds.slice(-RATE_SECONDS).filter(v => v !== null);
    const meanLat = lat.length ? lat.reduce((a, b) => a + b, 0) / lat.length : null;
    const t = f.totals;
    const totalLat = t.upstream_responses ? t.upstream_latency_seconds_sum / t.upstream_responses : null;
    const row = (name, rate, total, cls) => el('tr', null, el('th', { scope: 'row' }, name),
      el('td', { class: cls }, rate), el('td', { class: cls }, total));
    const figures = table('figures', 'Requests of ' + d.name, id + '-fig',
      ['Figure', 'Per second, last ' + RATE_SECONDS + ' s', 'Since start'], [
        row('Allowed', num(recent(f.served, RATE_SECONDS)), count(t.served)),
        row('Refused', num(recent(f.blocked, RATE_SECONDS)), count(t.blocked), t.blocked > 0 ? 'refused' : null),
        row('Upstream errors (no response)', num(recent(f.upstream_errors, RATE_SECONDS)), count(t.upstream_errors)),
        row('Upstream 5xx', num(recent(f.upstream_5xx, RATE_SECONDS)), count(t.upstream_5xx)),
        row('Upstream latency (mean)', latency(meanLat), latency(totalLat)),
      ].concat(Object.entries(t.answered || {}).filter(([, n]) => n > 0).map(([o, n]) =>
        row('Answered ' + o.replace('_', ' '), '–', count(n), 'refused'))));
    const ruleFig = name => f.rules.find(r => r.name === name);
    const children = [
      el('h3', { id: id }, d.name),
      facts([['Hosts', d.hosts.join(', ')], d.respond ? ['Answers', 'a static response'] : ['Origin', d.origin || '–']].concat(d.routes ? [['Routes', d.routes.join(', ')]] : [])),
      el('div', { class: 'pair' }, chart(id + '-chart', d.name, times, f.served, f.blocked), figures),
    ];
    if (d.rules.length) {
      children.push(table('rules', 'Rules of ' + d.name, id + '-rules',
        ['Rule', 'Algorithm', 'Limit', 'Conditions', 'Key', 'Action', 'Allowed/s', 'Refused/s', 'Refused since start'],
        d.rules.map(r => {
          const rf = ruleFig(r.name);
          const refused = rf ? add(rf.limited, rf.mitigated) : [];
          const refusedTotal = rf ? rf.totals.limited + rf.totals.mitigated : null;
          return el('tr', null,
            el('th', { scope: 'row' }, r.name),
            el('td', null, r.algorithm + [r.mode, r.precision].filter(Boolean).map(m => ' (' + m + ')').join('')),
            el('td', null, ruleLimit(r, rf)),
            el('td', { class: 'conds' }, conditions(r)),
            el('td', null, (r.key || []).join(' | ')),
            el('td', null, r.action),
            el('td', null, rf ? num(recent(rf.allowed, RATE_SECONDS)) : '–'),
            el('td', { class: refusedTotal > 0 ? 'refused' : null }, rf ? num(recent(refused, RATE_SECONDS)) : '–'),
            el('td', { class: refusedTotal > 0 ? 'refused' : null }, count(refusedTotal)));
        })));
      children.push(el('div', { class: 'talkers-grid' }, d.rules.map((r, j) => renderTalkers(id + '-r' + j, d, r, tops[j]))));
    }
    return el('section', { class: 'panel domain', 'aria-labelledby': id }, children);
  }

  function renderTalkers(id, d, r, top) {
    const heading = el('h4', { id: id }, 'Top talkers of ' + r.name);
    if (!top || top.length === 0) {
      return el('div', { class: 'talkers' }, heading, el('p', { class: 'quiet' }, top ? 'No key near its limit or refused.' : 'Not available.'));
    }
    const rows = top.map((k, n) => el('tr', null,
      el('th', { scope: 'row' }, el('code', { title: shownKey(k.key) }, shortKey(k.key))),
      el('td', null, keyState(r, k)),
      el('td', null, String(k.count) + (k.count_error ? ' (±' + k.count_error + ')' : '')),
      el('td', { class: k.blocked > 0 ? 'refused' : null }, String(k.blocked || 0)),
      el('td', null, k.mitigated_until ? 'until ' + utc(k.mitigated_until) : '–'),
      el('td', null, el('button', {
        type: 'button', class: 'reset', id: id + '-k' + n,
        'data-domain': d.name, 'data-rule': r.name, 'data-key': k.key,
        'aria-label': 'Reset key ' + shortKey(k.key) + ' of rule ' + r.name,
      }, 'Reset'))));
    return el('div', { class: 'talkers' }, heading,
      table('talkers', 'Heaviest keys of ' + d.name + '/' + r.name + ', as this node saw them', id + '-t',
        ['Key', 'Now', 'Seen', 'Blocked', 'Mitigated', 'Reset'], rows));
  }

  // loadTops reads the top talkers of every rule, in configuration order;
  // a rule whose list fails to load shows "Not available".
  function loadTops(config) {
    return Promise.all(config.domains.flatMap(d => d.rules.map(r =>
      getJSON('/v1/top/' + encodeURIComponent(d.name) + '/' + encodeURIComponent(r.name) + '?n=' + TOP_N)
        .catch(e => { if (e instanceof Unauthorized) throw e; return null; }))));
  }

  function renderDomains({ config, status, figures }, tops) {
    let k = 0;
    const domains = config.domains.map((d, i) => {
      const t = tops.slice(k, k + d.rules.length);
      k += d.rules.length;
      return renderDomain(i, d, figures.get(d.name), status.times, t);
    });
    return el('section', { class: 'wide', 'aria-labelledby': 'h-domains' }, el('h2', { id: 'h-domains' }, 'Domains'), domains);
  }

  // loadConnections reads the clients whose connections were refused
  // most, when the connections section limits anything.
  function loadConnections(config) {
    if (!config.connections) return Promise.resolve(null);
    return getJSON('/v1/top/connections?n=' + TOP_N)
      .catch(e => { if (e instanceof Unauthorized) throw e; return null; });
  }

  // renderConnections shows the connection limits, the connections they
  // refused since start, and the clients refused most; nothing without
  // the connections or proxy_protocol section.
  function renderConnections({ config, status }, top) {
    const c = config.connections, pp = config.proxy_protocol;
    if (!c && !pp) return null;
    const parts = [];
    if (pp) {
      parts.push(['PROXY protocol from', pp.from.join(', ')], ['Read on', pp.listeners.join(', ') || 'no listener']);
    }
    const children = [el('h2', { id: 'h-connections' }, 'Connections')];
    if (c) {
      const refused = status.connections_refused || {};
      parts.push(
        ['Open per client', c.max_per_client ? 'at most ' + c.max_per_client : 'no limit'],
        ['New per client', c.rate_per_client ? c.rate_per_client.limit + ' per ' + period(c.rate_per_client.period) +
          ' (' + count(c.max_clients) + ' clients tracked)' : 'no limit'],
        ['Exempt', (c.allow || []).join(', ') || 'none'],
        ['Refused since start', el('span', { class: (refused.per_client || refused.rate) ? 'refused' : null },
          count(refused.per_client || 0) + ' over max_per_client, ' + count(refused.rate || 0) + ' over rate_per_client')]);
    }
    children.push(facts(parts));
    if (c) {
      if (!top || top.length === 0) {
        children.push(el('p', { class: 'quiet' }, top ? 'No connection refused.' : 'Not available.'));
      } else {
        children.push(table('talkers', 'Clients whose connections were refused most, as this node saw them', 'connections-t',
          ['Client', 'Refused', 'Over rate', 'Over open', 'Open now'],
          top.map(k => el('tr', null,
            el('th', { scope: 'row' }, el('code', null, k.client)),
            el('td', { class: 'refused' }, String(k.refused) + (k.refused_error ? ' (±' + k.refused_error + ')' : '')),
            el('td', null, String(k.rate)),
            el('td', null, String(k.per_client)),
            el('td', null, String(k.open))))));
      }
    }
    return el('section', { class: 'panel', 'aria-labelledby': 'h-connections' }, children);
  }

  // SECTIONS are the page, top to bottom. Each is { load, render }: load
  // (optional) gets the configuration and returns a promise of what else
  // the section reads from the admin API, fetched alongside the other
  // sections' (an Unauthorized error asks for the token again; any other
  // is the section's to catch); render gets the view ({ config, status,
  // ready, figures: /v1/status's domains by name }) and what load read,
  // and returns the section's element, or null to show nothing. A
  // section's headings and ids are its own. A later feature (origin
  // servers, refused connections) adds a renderer and an entry here, as
  // the certificates did, without touching the other sections; a section that spans both
  // columns has the class "wide".
  const SECTIONS = [
    { render: renderSummary },
    { render: renderNode },
    { render: renderCluster },
    { load: loadConnections, render: renderConnections },
    { load: loadCertificates, render: renderCertificates },
    { load: loadOrigins, render: renderOrigins },
    { load: loadTops, render: renderDomains },
  ];

  function render(view, loaded) {
    // Keep the keyboard focus where it was across the re-render.
    const focused = document.activeElement && document.activeElement.id;
    main.replaceChildren(...SECTIONS.map((s, i) => s.render(view, loaded[i])).filter(Boolean));
    if (focused) {
      const e = document.getElementById(focused);
      if (e) e.focus();
    }
  }

  async function refresh() {
    clearTimeout(timer);
    timer = null;
    if (busy) return;
    busy = true;
    try {
      const [config, status, ready] = await Promise.all([
        getJSON('/v1/config'), getJSON('/v1/status?seconds=' + CHART_SECONDS), readiness()]);
      const loaded = await Promise.all(SECTIONS.map(s => s.load ? s.load(config) : null));
      const figures = new Map(status.domains.map(d => [d.name, d]));
      render({ config, status, ready, figures }, loaded);
      // A refresh that ends after the tab was hidden must not hide the
      // pause: schedule() starts no timer then.
      note.textContent = document.hidden ? PAUSED :
        'Updated ' + new Date().toLocaleTimeString('en-GB') + '; refreshes every ' + REFRESH_MS / 1000 + ' s while this tab is visible.';
    } catch (e) {
      busy = false;
      if (e instanceof Unauthorized) {
        sessionStorage.removeItem(TOKEN_KEY);
        askToken('That token was refused.');
        return;
      }
      note.textContent = 'Update failed (' + e.message + '); trying again.';
    }
    busy = false;
    schedule();
  }
  function schedule() {
    if (!document.hidden && timer === null) timer = setTimeout(refresh, REFRESH_MS);
  }
  document.addEventListener('visibilitychange', () => {
    if (document.hidden) {
      clearTimeout(timer);
      timer = null;
      note.textContent = PAUSED;
    } else if (!document.getElementById('login')) {
      refresh();
    }
  });

  // askToken shows the sign-in form; the token is kept in this tab's
  // session storage and sent as a bearer token.
  function askToken(problem) {
    clearTimeout(timer);
    timer = null;
    const input = el('input', { id: 'token', name: 'token', type: 'password', autocomplete: 'off', required: true });
    const form = el('form', { id: 'login', class: 'panel', 'aria-labelledby': 'h-login' },
      el('h2', { id: 'h-login' }, 'Admin token'),
      el('p', null, 'This admin listener needs its token (admin_token or EDGE_ADMIN_TOKEN). It is kept in this tab only.'),
      el('label', { for: 'token' }, 'Token'), ' ', input, ' ',
      el('button', { type: 'submit' }, 'Show status'),
      problem ? el('p', { role: 'alert', class: 'bad' }, problem) : null);
    form.addEventListener('submit', ev => {
      ev.preventDefault();
      sessionStorage.setItem(TOKEN_KEY, input.value);
      main.replaceChildren();
      note.textContent = 'Loading…';
      refresh();
    });
    main.replaceChildren(form);
    note.textContent = 'Sign in to see the status.';
    input.focus();
  }

  // Reset buttons: the existing DELETE of the admin API, after a
  // confirmation.
  main.addEventListener('click', async ev => {
    const b = ev.target.closest('button.reset');
    if (!b) return;
    const { domain, rule, key } = b.dataset;
    const shown = shortKey(key);
    if (!window.confirm('Reset key ' + shown + ' of ' + domain + '/' + rule + '? Its counters and any mitigation are forgotten.')) return;
    b.disabled = true;
    try {
      const r = await api('DELETE', keyPath(domain, rule, key));
      note.textContent = r.status === 204 ? 'Key ' + shown + ' of ' + domain + '/' + rule + ' reset.' :
        'Reset of ' + shown + ' failed: ' + r.status + ' ' + ((await r.json().catch(() => ({}))).error || '');
    } catch (e) {
      if (e instanceof Unauthorized) { askToken('That token was refused.'); return; }
      note.textContent = 'Reset of ' + shown + ' failed: ' + e.message;
    }
    refresh();
  });

  // Drain buttons: POST .../drain or .../undrain of the admin API, after
  // a confirmation. A drain is this node's: the confirmation says so.
  main.addEventListener('click', async ev => {
    const b = ev.target.closest('button.drain');
    if (!b) return;
    const { domain, server, action } = b.dataset;
    const question = action === 'drain' ?
      'Drain ' + server + ' of ' + domain + '? This node sends it no new requests; those in flight finish. Other nodes of the PoP are drained on their own.' :
      'Undrain ' + server + ' of ' + domain + '? This node sends it requests again.';
    if (!window.confirm(question)) return;
    b.disabled = true;
    try {
      const r = await api('POST', drainPath(domain, action, server));
      const body = await r.json().catch(() => ({}));
      note.textContent = r.ok ? server + ' of ' + domain + (body.drained ? ' drained; requests in flight: ' + count(body.in_flight) + '.' : ' back in rotation.') :
        (action === 'drain' ? 'Drain' : 'Undrain') + ' of ' + server + ' failed: ' + r.status + ' ' + (body.error || '');
    } catch (e) {
      if (e instanceof Unauthorized) { askToken('That token was refused.'); return; }
      note.textContent = (action === 'drain' ? 'Drain' : 'Undrain') + ' of ' + server + ' failed: ' + e.message;
    }
    refresh();
  });

  if (document.body.dataset.token === 'required' && !sessionStorage.getItem(TOKEN_KEY)) {
    askToken('');
  } else {
    refresh();
  }
})();
