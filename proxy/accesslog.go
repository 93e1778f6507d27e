package proxy

import (
	"context"
	"fmt"
	"net/http"
	"sync"
	"sync/atomic"
	"time"

	"github.com/edgerate/edge/accesslog"
	"github.com/edgerate/edge/internal/wire"
	"github.com/edgerate/edge/rules"
)

// The access log (docs/access-log.md): a line for every request of a
// domain that does not turn it off, of the check listener's questions, and
// of requests refused before any domain, written when the answer ends.
// Both transports fill the same accesslog.Entry from the request's
// exchange (logExchange), so that the fast path's line is net/http's: the
// net/http path through a loggedWriter, which sees the status and body
// bytes net/http sends, the fast path (logFast) from the answer it appends
// or the relay's report.

// accessLog is one configuration's access log: its settings and the
// writer, which a reload keeps when path, format and buffer stay.
type accessLog struct {
	cfg rules.AccessLog
	w   *accesslog.Writer
	// refused counts the refusals met, for refused_sample.
	refused *atomic.Uint64
}

// openAccessLog returns the access log of configuration t: old's writer
// when t names the same file, format and buffer, else a new one; nil when
// t has none.
func (p *Proxy) openAccessLog(t *rules.Table, old *accessLog) (*accessLog, error) {
	c := t.AccessLog
	if c == nil {
		return nil, nil
	}
	if old != nil && old.cfg.Path == c.Path && old.cfg.Format == c.Format && old.cfg.Buffer == c.Buffer {
		return &accessLog{cfg: *c, w: old.w, refused: old.refused}, nil
	}
	w, err := accesslog.Open(accesslog.Options{Path: c.Path, Buffer: int(c.Buffer), Counters: &p.alogCounts,
		Failed: p.accessLogFailed, Stdout: p.alogStdout})
	if err != nil {
		return nil, fmt.Errorf("proxy: access_log.path: %w", err)
	}
	return &accessLog{cfg: *c, w: w, refused: new(atomic.Uint64)}, nil
}

// switchAccessLog closes old's writer once cur (the running
// configuration's) has taken over from it: the lines still coming to
// the old one go to the new.
func switchAccessLog(old, cur *accessLog) {
	if old == nil || cur != nil && cur.w == old.w {
		return
	}
	var next *accesslog.Writer
	if cur != nil {
		next = cur.w
	}
	old.w.Close(next)
}

// accessLogFailed logs a failed write, at most once a second (the
// writer's pace).
func (p *Proxy) accessLogFailed(err error, unreported uint64) {
	p.log.Error("access log write failed", "err", err, "failed_since_last", unreported)
}

// ReopenAccessLog reopens the access log's file, as logrotate's postrotate
// asks with SIGUSR1; it returns at once.
func (p *Proxy) ReopenAccessLog() {
	if al := p.state.Load().alog; al != nil {
		al.w.Reopen()
	}
}

// FlushAccessLog writes out what the access log holds, and returns when
// it is written: for a reader that must see every line so far (tests; edge
// itself relies on the writer's pace and on Close).
func (p *Proxy) FlushAccessLog() {
	if al := p.state.Load().alog; al != nil {
		al.w.Flush()
	}
}

// closeAccessLog writes out and closes the running access log (Close).
func (p *Proxy) closeAccessLog() {
	if al := p.state.Load().alog; al != nil {
		al.w.Close(nil)
	}
}

// refusedOutcome reports whether outcome is a refusal, which
// refused_sample thins.
func refusedOutcome(outcome string) bool {
	switch outcome {
	case outcomeBlocked, outcomeUnavailable, outcomeShed, outcomeOriginBusy, outcomeBadCost, outcomeBodyRefused,
		outcomeScreened, outcomeMisdirected, outcomeLoop:
		return true
	}
	return false
}

// lineScratch is a request's entry and its rendered line, pooled.
type lineScratch struct {
	e accesslog.Entry
	b []byte
}

var lineScratches = sync.Pool{New: func() any { return &lineScratch{b: make([]byte, 0, 512)} }}

func getLine() *lineScratch { return lineScratches.Get().(*lineScratch) }

// putLine clears s, so that it keeps no request's bytes alive, and pools
// it unless it grew too large.
func putLine(s *lineScratch) {
	if cap(s.b) > 64<<10 || cap(s.e.Rules) > 64 {
		return
	}
	rs := s.e.Rules[:len(s.e.Rules)]
	clear(rs)
	s.e = accesslog.Entry{Rules: rs[:0]}
	lineScratches.Put(s)
}

// writeLine renders s's entry in al's format and hands it to the writer,
// unless refused_sample leaves it out.
func (p *Proxy) writeLine(al *accessLog, s *lineScratch) {
	defer putLine(s)
	if n := al.cfg.RefusedSample; n > 1 && refusedOutcome(s.e.Outcome) {
		if al.refused.Add(1)%uint64(n) != 1 {
			p.alogSkipped.Add(1)
			return
		}
		s.e.Sample = n
	}
	if al.cfg.Format == rules.AccessLogJSON {
		s.b = accesslog.AppendJSON(s.b[:0], &s.e)
	} else {
		s.b = accesslog.AppendCombined(s.b[:0], &s.e)
	}
	al.w.Write(s.b)
}

// logExchange fills e with what ex found: its domain, client, rules, the
// origin's report and the queue's wait. keys: each rule's key too.
func logExchange(e *accesslog.Entry, ex *exchange, keys bool) {
	d := ex.d
	if d == nil {
		return
	}
	e.Domain = d.Name
	if ex.id.Client.IsValid() {
		e.Client = ex.id.Client
	}
	if up := &ex.up; up.Attempts > 0 {
		e.Origin, e.OriginStatus, e.OriginTook, e.Attempts = up.Server, up.Status, up.Took, up.Attempts
	}
	e.Queued = ex.queued
	blocker := -1
	if ex.ans.outcome == outcomeBlocked && ex.dec.blocker >= 0 && ex.dec.blocker < len(ex.dec.vs) {
		blocker = ex.dec.blocker
	}
	for i, v := range ex.dec.vs {
		// v.rule indexes d.all: the rule, or its plan's state (plans.go),
		// whose limit judged the request; the line names the rule.
		rs := &d.all[v.rule]
		r := accesslog.Rule{Name: d.rules[v.base].Name, Outcome: ruleOutcome(rs, v), Limit: rs.Limit, Remaining: max(v.Remaining, 0)}
		if keys {
			r.Key, r.HasKey = rules.KeyText(rs.Key, &ex.src), true
		}
		e.Rules = append(e.Rules, r)
		if i == blocker {
			e.RefusedBy = r.Name
		}
	}
}

// ruleOutcome is v's outcome as edge_rule_decisions_total names it.
func ruleOutcome(rs *ruleState, v verdict) string {
	switch {
	case v.Allowed:
		return "allowed"
	case v.Mitigated:
		return "mitigated"
	case rs.Soft:
		return "soft_limited"
	}
	return "limited"
}

// loggedWriter is the net/http path's ResponseWriter while the access log
// is on: it sees the status and the body bytes sent, and the outcome of
// the answer edge made (noteOutcome).
type loggedWriter struct {
	http.ResponseWriter
	status  int
	bytes   int64
	head    bool // a HEAD request: no body bytes are sent
	outcome string
	line    *lineScratch
	skip    bool // the request's domain has access_log: false
	// returned: the handler returned; a handler that did not (a panic,
	// http.ErrAbortHandler) before any status was sent had its client go.
	returned bool
	// left: the request was forwarded and its client had left when the
	// origin answered (exchange.noteLeft).
	left bool
}

var loggedWriters = sync.Pool{New: func() any { return new(loggedWriter) }}

func (w *loggedWriter) WriteHeader(code int) {
	if w.status == 0 && (code >= 200 || code == http.StatusSwitchingProtocols) {
		w.status = code
	}
	w.ResponseWriter.WriteHeader(code)
}

func (w *loggedWriter) Write(b []byte) (int, error) {
	if w.status == 0 {
		w.status = http.StatusOK
	}
	n, err := w.ResponseWriter.Write(b)
	if !w.head {
		w.bytes += int64(n)
	}
	return n, err
}

// leftKey carries a connection that can tell whether its client left
// (the guard's, on the public listener) in its requests' contexts.
type leftKey struct{}

// leaver is a connection that reports whether its client has closed or
// reset its side, without blocking (guard's, by poll(2)); the fast
// path's wire.ClientWriter is one.
type leaver interface{ Left() bool }

// connLeaver returns the connection a request's context carries that can
// tell whether its client left, nil for none: over HTTP/1 only, where
// net/http's own signal, the request's context, is done by any failed
// read (a malformed body, a read timeout: answered, not left) and the
// forward goes on after a FIN (forward.go). Over HTTP/2 and HTTP/3 a
// client leaves by resetting its stream, which ends the forward.
func connLeaver(ctx context.Context) leaver {
	l, _ := ctx.Value(leftKey{}).(leaver)
	return l
}

// noteLeft notes, once the origin has answered a forward of ex (or
// failed), whether its client has left meanwhile, for the access log
// (called only when it reports ex, logged): it is then logged 499, as nginx logs a client that closed
// while its request was at the origin. A client that only half-closed
// sends the same FIN, and still gets the answer. Only forwards: an answer
// edge makes at once is logged as it was sent (fail2ban counts 429s).
func (ex *exchange) noteLeft(l leaver) { ex.left = l != nil && l.Left() }

// logged reports whether the access log reports ex's request (ex may be
// nil): only then is it asked whether its client left.
func (ex *exchange) logged() bool { return ex != nil && ex.st != nil && ex.st.alog != nil }

// Unwrap gives http.ResponseController (ReverseProxy's flushes and
// upgrades) the server's writer.
func (w *loggedWriter) Unwrap() http.ResponseWriter { return w.ResponseWriter }

// noteOutcome tells the loggedWriter under w, if any, the outcome of the
// answer edge writes through it (answer.write).
func noteOutcome(w http.ResponseWriter, outcome string) {
	for {
		switch x := w.(type) {
		case *loggedWriter:
			x.outcome = outcome
			return
		case interface{ Unwrap() http.ResponseWriter }:
			w = x.Unwrap()
		default:
			return
		}
	}
}

// startLog begins the line of r, which arrived at now.
func startLog(w http.ResponseWriter, r *http.Request, now time.Time) *loggedWriter {
	lw := loggedWriters.Get().(*loggedWriter)
	*lw = loggedWriter{ResponseWriter: w, head: r.Method == http.MethodHead, line: getLine()}
	e := &lw.line.e
	e.Time = now
	if peer, ok := parsePeerAddr(r.RemoteAddr); ok {
		e.Peer, e.Client = peer, peer
	}
	e.Host, e.Method, e.Target, e.Proto = r.Host, r.Method, r.RequestURI, r.Proto
	if v := r.Header["Referer"]; len(v) > 0 {
		e.Referer = v[0]
	}
	if v := r.Header["User-Agent"]; len(v) > 0 {
		e.UserAgent = v[0]
	}
	return lw
}

// took notes what ex found, before the exchange is reused.
func (w *loggedWriter) took(ex *exchange, keys bool) {
	w.skip = ex.d != nil && ex.d.NoAccessLog
	w.left = ex.left
	logExchange(&w.line.e, ex, keys)
	if r := ex.req; !ex.id.Client.IsValid() && r != nil && ex.st != nil {
		// A domain without rules was not identified: the client is whom
		// identify would name, as on the fast path (logFast).
		w.line.e.Client = ex.st.clientIP.Resolve(r.RemoteAddr, r.Header.Values("X-Forwarded-For")).Client
	}
}

// endLog writes the line of w's request, as the deferred last step of its
// handler: a request whose client had left when its answer began, or
// whose handler did not return (it panicked, with
// http.ErrAbortHandler when edge aborts a request whose client left)
// before any status was sent is logged 499, as nginx logs a client that
// closed first. It does not recover: the panic goes on as it was.
func (p *Proxy) endLog(al *accessLog, w *loggedWriter) {
	if !w.skip {
		e := &w.line.e
		e.Status, e.Bytes = w.status, w.bytes
		if w.left || !w.returned && w.status == 0 {
			e.Status = statusClientGone
		}
		if e.Status == 0 {
			e.Status = http.StatusOK // net/http's for a handler that wrote nothing
		}
		e.Outcome = w.outcome
		if e.Outcome == "" {
			e.Outcome = outcomeServed
		}
		e.Duration = p.now().Sub(e.Time)
		p.writeLine(al, w.line)
	} else {
		putLine(w.line)
	}
	*w = loggedWriter{}
	loggedWriters.Put(w)
}

// statusClientGone is nginx's status for a request whose client closed
// the connection before the answer.
const statusClientGone = 499

// logFast writes the line of a request the fast path answered: ex is its
// exchange, head its head, and the answer ex.done, or ex.ans when the
// fast path refused it.
func (p *Proxy) logFast(al *accessLog, ex *exchange, h *Head) {
	if ex.d != nil && ex.d.NoAccessLog {
		return
	}
	s := getLine()
	e := &s.e
	e.Time, e.Peer, e.Client = ex.now, h.Peer, h.Peer
	e.Host, e.Method, e.Target, e.Proto = bytesString(h.Host), ex.method, bytesString(h.Target), "HTTP/1.1"
	for _, f := range h.Fields {
		switch {
		case e.Referer == "" && wire.EqualFoldLower(f.Name, "referer"):
			e.Referer = bytesString(f.Value)
		case e.UserAgent == "" && wire.EqualFoldLower(f.Name, "user-agent"):
			e.UserAgent = bytesString(f.Value)
		}
	}
	if ex.done.status != 0 {
		e.Status, e.Bytes, e.Outcome = ex.done.status, ex.done.bytes, ex.done.outcome
		if ex.left {
			e.Status = statusClientGone
		}
	} else {
		e.Status, e.Outcome = ex.ans.status, ex.ans.outcome
		if ex.method != http.MethodHead {
			e.Bytes = int64(len(ex.ans.body))
		}
	}
	logExchange(e, ex, al.cfg.Keys)
	if !ex.id.Client.IsValid() && ex.st != nil {
		// A domain without rules was not identified: the client is whom
		// net/http's path would name (identify).
		e.Client = ex.st.clientIP.resolvePeer(h.Peer, fieldValues(h, "x-forwarded-for")).Client
	}
	e.Duration = time.Since(h.Now)
	if !p.wallClock {
		e.Duration = p.now().Sub(ex.now)
	}
	p.writeLine(al, s)
}

// answerReport is what the fast forward sent its client: the status (0:
// nothing yet), the body bytes, and the answer's outcome.
type answerReport struct {
	status  int
	bytes   int64
	outcome string
}

// sentAnswer reports a, an answer edge made, as sent (head: without its
// body).
func (r *answerReport) sentAnswer(a *answer, head bool) {
	*r = answerReport{status: a.status, outcome: a.outcome}
	if !head {
		r.bytes = int64(len(a.body))
	}
}

// fieldValues returns the values of h's fields named lower.
func fieldValues(h *Head, lower string) []string {
	var out []string
	for _, f := range h.Fields {
		if wire.EqualFoldLower(f.Name, lower) {
			out = append(out, bytesString(f.Value))
		}
	}
	return out
}
