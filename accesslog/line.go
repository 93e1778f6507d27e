// Package accesslog writes edge's access log: one line per request, in
// nginx's combined format or as one JSON object (docs/access-log.md), to a
// file through a bounded buffer that one goroutine writes out, so that a
// request never waits for the disk.
//
// What a line says is an [Entry], which the proxy fills from a request's
// exchange; [AppendCombined] and [AppendJSON] render it, and a [Writer]
// takes the rendered lines.
package accesslog

import (
	"net/netip"
	"strconv"
	"sync/atomic"
	"time"
	"unicode/utf8"
)

// Entry is what one line reports of a request. Strings are as received
// (the renderers escape them); a zero number or an empty string is a
// fact the request did not have (no origin, no queue).
type Entry struct {
	Time     time.Time     // when the request's head arrived
	Peer     netip.Addr    // the TCP peer
	Client   netip.Addr    // the client identity edge used (the trusted X-Forwarded-For hop, or the peer)
	Host     string        // the Host as received
	Method   string        //
	Target   string        // the request target as received
	Proto    string        // "HTTP/1.1", "HTTP/2.0"
	Status   int           // the status sent, 499 when the client left first
	Bytes    int64         // body bytes sent
	Duration time.Duration // from the head's arrival to the answer's end
	Domain   string        // the domain as configured; "" when none claimed the request

	Origin       string        // the origin server, when forwarded
	OriginStatus int           // the origin's status (0: none came)
	OriginTook   time.Duration // the last try's time, request sent to response head
	Attempts     int           // tries (1 without retries); 0: not forwarded

	Referer   string
	UserAgent string

	Outcome   string        // the answer's outcome, as edge_requests_total names it
	Queued    time.Duration // how long it waited in a queue; 0: it did not
	Rules     []Rule        // each rule that judged the request, in config order
	RefusedBy string        // the refusing rule's name
	Sample    int           // the line stands for Sample refusals (refused_sample); 0 or 1: itself
}

// Rule is one rule's judgement of a request.
type Rule struct {
	Name      string
	Outcome   string // allowed, limited, mitigated, soft_limited (edge_rule_decisions_total's outcome)
	Limit     int64
	Remaining int64
	// Key is the key the rule counted by, as the admin API renders it;
	// written only when HasKey (access_log.keys).
	Key    string
	HasKey bool
}

// clfTime is $time_local's layout.
const clfTime = "02/Jan/2006:15:04:05 -0700"

// AppendCombined appends e as nginx's combined line, newline included:
//
//	$remote_addr - $remote_user [$time_local] "$request" $status $body_bytes_sent "$http_referer" "$http_user_agent"
//
// with $remote_user always "-", an empty field as "-", and the bytes nginx
// escapes in a variable (a double quote, a backslash, control bytes and
// bytes of 0x7f and above) written as \xHH, so that one line is one line
// whatever the client sent.
func AppendCombined(b []byte, e *Entry) []byte {
	b = appendAddr(b, e.Client)
	b = append(b, " - - ["...)
	b = appendLocalTime(b, e.Time)
	b = append(b, `] "`...)
	if e.Method == "" && e.Target == "" {
		b = append(b, '-') // nginx's $request of a request it could not read
	} else {
		b = appendEscaped(b, e.Method)
		b = append(b, ' ')
		b = appendEscaped(b, e.Target)
		b = append(b, ' ')
		b = appendEscaped(b, e.Proto)
	}
	b = append(b, `" `...)
	b = strconv.AppendInt(b, int64(e.Status), 10)
	b = append(b, ' ')
	b = strconv.AppendInt(b, e.Bytes, 10)
	b = append(b, ` "`...)
	b = appendDash(b, e.Referer)
	b = append(b, `" "`...)
	b = appendDash(b, e.UserAgent)
	return append(b, "\"\n"...)
}

func appendAddr(b []byte, a netip.Addr) []byte {
	if !a.IsValid() {
		return append(b, '-')
	}
	return a.AppendTo(b)
}

func appendDash(b []byte, s string) []byte {
	if s == "" {
		return append(b, '-')
	}
	return appendEscaped(b, s)
}

const upperHex = "0123456789ABCDEF"

// appendEscaped appends s as nginx's ngx_http_log_escape writes a variable.
// Runs of bytes that need no escape are appended at once.
func appendEscaped(b []byte, s string) []byte {
	start := 0
	for i := 0; i < len(s); i++ {
		c := s[i]
		if clfPlain[c] {
			continue
		}
		b = append(b, s[start:i]...)
		b = append(b, '\\', 'x', upperHex[c>>4], upperHex[c&0xf])
		start = i + 1
	}
	return append(b, s[start:]...)
}

// clfPlain and jsonPlain are the bytes a combined field and a JSON string
// hold as they are.
var clfPlain, jsonPlain = func() (clf, js [256]bool) {
	for c := 0x20; c < 0x7f; c++ {
		clf[c] = c != '"' && c != '\\'
		js[c] = clf[c]
	}
	return clf, js
}()

// AppendJSON appends e as one JSON object and a newline. The fields, in
// this order: time (RFC 3339, milliseconds, UTC), peer, client, host,
// method, target, proto, status, bytes, duration_ms, domain; origin,
// origin_status, origin_ms and attempts when forwarded; referer,
// user_agent, outcome; queued_ms when it waited; rules (each with name,
// outcome, limit, remaining, and key when recorded); refused_by when
// refused; sample when the line stands for more than itself. Invalid
// UTF-8 becomes U+FFFD, as encoding/json writes it.
func AppendJSON(b []byte, e *Entry) []byte {
	b = append(b, `{"time":"`...)
	b = appendUTCMillis(b, e.Time)
	b = append(b, `","peer":"`...)
	if e.Peer.IsValid() {
		b = e.Peer.AppendTo(b)
	}
	b = append(b, `","client":"`...)
	if e.Client.IsValid() {
		b = e.Client.AppendTo(b)
	}
	b = append(b, `","host":`...)
	b = AppendJSONString(b, e.Host)
	b = append(b, `,"method":`...)
	b = AppendJSONString(b, e.Method)
	b = append(b, `,"target":`...)
	b = AppendJSONString(b, e.Target)
	b = append(b, `,"proto":`...)
	b = AppendJSONString(b, e.Proto)
	b = append(b, `,"status":`...)
	b = strconv.AppendInt(b, int64(e.Status), 10)
	b = append(b, `,"bytes":`...)
	b = strconv.AppendInt(b, e.Bytes, 10)
	b = append(b, `,"duration_ms":`...)
	b = appendMillis(b, e.Duration)
	b = append(b, `,"domain":`...)
	b = AppendJSONString(b, e.Domain)
	if e.Attempts > 0 {
		b = append(b, `,"origin":`...)
		b = AppendJSONString(b, e.Origin)
		b = append(b, `,"origin_status":`...)
		b = strconv.AppendInt(b, int64(e.OriginStatus), 10)
		b = append(b, `,"origin_ms":`...)
		b = appendMillis(b, e.OriginTook)
		b = append(b, `,"attempts":`...)
		b = strconv.AppendInt(b, int64(e.Attempts), 10)
	}
	b = append(b, `,"referer":`...)
	b = AppendJSONString(b, e.Referer)
	b = append(b, `,"user_agent":`...)
	b = AppendJSONString(b, e.UserAgent)
	b = append(b, `,"outcome":`...)
	b = AppendJSONString(b, e.Outcome)
	if e.Queued > 0 {
		b = append(b, `,"queued_ms":`...)
		b = appendMillis(b, e.Queued)
	}
	b = append(b, `,"rules":[`...)
	for i := range e.Rules {
		r := &e.Rules[i]
		if i > 0 {
			b = append(b, ',')
		}
		b = append(b, `{"name":`...)
		b = AppendJSONString(b, r.Name)
		b = append(b, `,"outcome":"`...)
		b = append(b, r.Outcome...)
		b = append(b, `","limit":`...)
		b = strconv.AppendInt(b, r.Limit, 10)
		b = append(b, `,"remaining":`...)
		b = strconv.AppendInt(b, r.Remaining, 10)
		if r.HasKey {
			b = append(b, `,"key":`...)
			b = AppendJSONString(b, r.Key)
		}
		b = append(b, '}')
	}
	b = append(b, ']')
	if e.RefusedBy != "" {
		b = append(b, `,"refused_by":`...)
		b = AppendJSONString(b, e.RefusedBy)
	}
	if e.Sample > 1 {
		b = append(b, `,"sample":`...)
		b = strconv.AppendInt(b, int64(e.Sample), 10)
	}
	return append(b, "}\n"...)
}

// secondText is a time's text to the second, formatted once a second:
// time.Time.AppendFormat costs a line more than the rest of it.
type secondText struct {
	sec int64
	loc *time.Location
	b   []byte
}

var lastUTC, lastLocal atomic.Pointer[secondText]

// appendUTCMillis appends t as RFC 3339 in UTC with milliseconds
// (2026-12-02T12:30:05.123Z).
func appendUTCMillis(b []byte, t time.Time) []byte {
	t = t.UTC()
	sec := t.Unix()
	c := lastUTC.Load()
	if c == nil || c.sec != sec {
		c = &secondText{sec: sec, b: t.AppendFormat(nil, "2006-01-02T15:04:05")}
		lastUTC.Store(c)
	}
	b = append(b, c.b...)
	ms := t.Nanosecond() / 1e6
	return append(b, '.', byte('0'+ms/100), byte('0'+ms/10%10), byte('0'+ms%10), 'Z')
}

// appendLocalTime appends t as $time_local (02/Dec/2026:12:30:05 +0000),
// in t's location.
func appendLocalTime(b []byte, t time.Time) []byte {
	sec := t.Unix()
	c := lastLocal.Load()
	if c == nil || c.sec != sec || c.loc != t.Location() {
		c = &secondText{sec: sec, loc: t.Location(), b: t.AppendFormat(nil, clfTime)}
		lastLocal.Store(c)
	}
	return append(b, c.b...)
}

// appendMillis appends d in milliseconds with three decimals (µs).
func appendMillis(b []byte, d time.Duration) []byte {
	if d < 0 {
		d = 0
	}
	us := int64(d / time.Microsecond)
	b = strconv.AppendInt(b, us/1000, 10)
	frac := us % 1000
	return append(b, '.', byte('0'+frac/100), byte('0'+frac/10%10), byte('0'+frac%10))
}

// AppendJSONString appends s as a JSON string: quotes, backslashes and
// control bytes escaped, invalid UTF-8 replaced by U+FFFD, and U+2028
// and U+2029 escaped, as encoding/json writes them.
func AppendJSONString(b []byte, s string) []byte {
	b = append(b, '"')
	start := 0
	for i := 0; i < len(s); {
		c := s[i]
		if jsonPlain[c] {
			i++
			continue
		}
		b = append(b, s[start:i]...)
		if c < utf8.RuneSelf {
			switch {
			case c == '"' || c == '\\':
				b = append(b, '\\', c)
			case c == '\n':
				b = append(b, '\\', 'n')
			case c == '\r':
				b = append(b, '\\', 'r')
			case c == '\t':
				b = append(b, '\\', 't')
			case c < 0x20:
				b = append(b, '\\', 'u', '0', '0', upperHex[c>>4], upperHex[c&0xf])
			default: // 0x7f: valid as it is
				b = append(b, c)
			}
			i++
			start = i
			continue
		}
		r, size := utf8.DecodeRuneInString(s[i:])
		switch {
		case r == utf8.RuneError && size == 1:
			b = append(b, `\ufffd`...)
		case r == '\u2028' || r == '\u2029':
			b = append(b, '\\', 'u', '2', '0', '2', upperHex[r&0xf])
		default:
			b = append(b, s[i:i+size]...)
		}
		i += size
		start = i
	}
	b = append(b, s[start:]...)
	return append(b, '"')
}
