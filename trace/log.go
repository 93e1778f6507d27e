package trace

import (
	"bufio"
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"net/textproto"
	"strconv"
	"strings"
	"time"
)

// A Record is one request read from an access log.
type Record struct {
	// Time is when the request arrived, in µs since the Unix epoch.
	Time int64
	// Source is the client as the log names it: an address or a host name.
	Source string
	// Method is the request method, "" when the log lacks it.
	Method string
	// Path is the request path without its query, "" when the log lacks it.
	Path string
	// Host is the request's Host, when the log records it (JSON logs only).
	Host string
	// Status is the response status, 0 when the log lacks it.
	Status int
	// Headers holds the request header fields the log records, by canonical
	// name: Referer and User-Agent for the Combined format, any for JSON.
	// Nil when there are none.
	Headers map[string]string
	// Edge is what edge's own JSON access log says it decided live; nil
	// for a line of another server's log.
	Edge *EdgeLine
}

// EdgeLine is the live decision a line of edge's JSON access log records
// (docs/access-log.md).
type EdgeLine struct {
	Domain  string
	Outcome string
	// Sample is how many refusals the line stands for (refused_sample);
	// 1 for itself.
	Sample int
	Rules  []EdgeRule
}

// EdgeRule is one rule's live judgement of a request.
type EdgeRule struct {
	Name      string
	Outcome   string // allowed, limited, mitigated, soft_limited
	Remaining int64
	Key       string // as the admin API renders it, when HasKey
	HasKey    bool
}

// Format is an access log format.
type Format int

const (
	// FormatAuto guesses from the first line: '{' is JSON lines, a tab
	// separated header naming host and time is the NASA trace, anything
	// else Common or Combined Log Format.
	FormatAuto Format = iota
	// FormatCLF is the Common Log Format, and the Combined Log Format that
	// appends the quoted Referer and User-Agent:
	//	host ident user [02/Jan/2006:15:04:05 -0700] "GET /p HTTP/1.0" 200 123 "ref" "ua"
	FormatCLF
	// FormatJSON is one JSON object per line (see ReadLog for the fields).
	FormatJSON
	// FormatNASA is a tab-separated layout of the NASA Kennedy Space Center
	// HTTP logs of 1995 (the Internet Traffic Archive's NASA-HTTP trace), as
	// in the sample replay/testdata/nasa_19950801.tsv.gz: a header line
	// naming the columns, among them host, time (Unix seconds), method, url
	// and response.
	FormatNASA
)

// String returns the flag spelling: auto, clf, json or nasa.
func (f Format) String() string {
	switch f {
	case FormatAuto:
		return "auto"
	case FormatCLF:
		return "clf"
	case FormatJSON:
		return "json"
	case FormatNASA:
		return "nasa"
	}
	return "Format(" + strconv.Itoa(int(f)) + ")"
}

// ParseFormat parses auto, clf (also common, combined), json or nasa (also
// tsv).
func ParseFormat(s string) (Format, error) {
	switch s {
	case "auto", "":
		return FormatAuto, nil
	case "clf", "common", "combined":
		return FormatCLF, nil
	case "json":
		return FormatJSON, nil
	case "nasa", "tsv":
		return FormatNASA, nil
	}
	return 0, fmt.Errorf("format: must be auto, clf, json or nasa, got %q", s)
}

// LogStats says what ReadLog read.
type LogStats struct {
	Format  Format // the format read (never FormatAuto after a line)
	Lines   int    // lines read, blank ones included
	Records int    // records passed on
	Skipped int    // malformed lines, not passed on
	// Edge says the first line is one of edge's own JSON access log.
	Edge bool
	// FirstError describes the first malformed line, with its number.
	FirstError error
}

// maxLine bounds one log line; longer lines are an error, not a skip,
// because they mean the input is not a log.
const maxLine = 1 << 20

// ReadLog reads an access log and calls each for every well-formed record,
// in file order. Malformed lines are counted in LogStats and skipped; the
// error is for failures to read, an over-long line, or a NASA file without
// its header.
//
// JSON lines may be flat or nest the request in a "request" object (as
// Caddy does). Fields, the first present winning:
//
//	time     time, ts, timestamp, @timestamp: Unix seconds (a number,
//	         fractions allowed) or an RFC 3339 or CLF time string
//	source   remote_addr, remote_ip, client_ip, ip, client (a "host:port"
//	         loses its port)
//	method   method
//	path     path, uri, url (the query is dropped)
//	host     host
//	status   status
//	headers  headers: an object of strings or lists of strings
func ReadLog(r io.Reader, format Format, each func(Record)) (LogStats, error) {
	st := LogStats{Format: format}
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 64<<10), maxLine)
	var nasa *nasaColumns
	for sc.Scan() {
		st.Lines++
		line := bytes.TrimRight(sc.Bytes(), "\r")
		if len(bytes.TrimSpace(line)) == 0 {
			continue
		}
		if st.Format == FormatAuto {
			st.Format = detect(line)
			st.Edge = st.Format == FormatJSON && edgeLine(line)
		} else if st.Lines == 1 && st.Format == FormatJSON {
			st.Edge = edgeLine(line)
		}
		if st.Format == FormatNASA && nasa == nil {
			cols, err := parseNASAHeader(line)
			if err != nil {
				return st, fmt.Errorf("line %d: %w", st.Lines, err)
			}
			nasa = cols
			continue
		}
		var rec Record
		var err error
		switch st.Format {
		case FormatCLF:
			rec, err = parseCLF(string(line))
		case FormatJSON:
			rec, err = parseJSON(line)
		case FormatNASA:
			rec, err = nasa.parse(string(line))
		}
		if err == nil && rec.Source == "" {
			err = errors.New("no client address")
		}
		if err != nil {
			st.Skipped++
			if st.FirstError == nil {
				st.FirstError = fmt.Errorf("line %d: %w", st.Lines, err)
			}
			continue
		}
		st.Records++
		each(rec)
	}
	if err := sc.Err(); err != nil {
		return st, fmt.Errorf("line %d: %w", st.Lines+1, err)
	}
	return st, nil
}

func detect(line []byte) Format {
	switch {
	case line[0] == '{':
		return FormatJSON
	case bytes.IndexByte(line, '\t') >= 0 && bytes.HasPrefix(line, []byte("host\t")):
		return FormatNASA
	}
	return FormatCLF
}

// clfTime is the time layout of the Common Log Format.
const clfTime = "02/Jan/2006:15:04:05 -0700"

// parseCLF parses one Common or Combined Log Format line.
func parseCLF(line string) (Record, error) {
	var rec Record
	sp := strings.IndexByte(line, ' ')
	if sp <= 0 {
		return rec, errors.New("no client address")
	}
	rec.Source = line[:sp]
	open := strings.IndexByte(line, '[')
	if open < 0 {
		return rec, errors.New("no [time]")
	}
	end := strings.IndexByte(line[open:], ']')
	if end < 0 {
		return rec, errors.New("no [time]")
	}
	ts, err := time.Parse(clfTime, line[open+1:open+end])
	if err != nil {
		return rec, fmt.Errorf("time %q: want %s", line[open+1:open+end], clfTime)
	}
	rec.Time = ts.UnixMicro()
	rest := strings.TrimLeft(line[open+end+1:], " ")
	request, status, rest, err := requestStatus(rest)
	if err != nil {
		return rec, err
	}
	rec.Status = status
	if f := strings.Fields(request); len(f) >= 2 {
		rec.Method, rec.Path = f[0], cleanTarget(f[1])
	}
	// Combined: the two quoted fields after the size.
	if i := strings.IndexByte(rest, '"'); i >= 0 {
		ref, more, ok1 := quoted(rest[i:])
		ua, _, ok2 := quoted(strings.TrimLeft(more, " "))
		if ok1 && ok2 {
			rec.Headers = map[string]string{"Referer": ref, "User-Agent": ua}
		}
	}
	return rec, nil
}

// requestStatus splits s, the part of a CLF line after the time, into the
// quoted request line, the status, and what follows the size (the Combined
// format's Referer and User-Agent).
//
// The request line ends at the first quote that the status and the size
// follow (" 404 -", then the end of the line or a space), not simply at the
// first quote: old Apache servers wrote quotes inside the request
// unescaped, as in "GET /a.gifalt=" HTTP/1.0" 404 -. A quote inside a
// request that is itself followed by something shaped like a status and a
// size would end the request early; reading logs of both kinds, escaped
// (\") and not, has that price.
func requestStatus(s string) (request string, status int, rest string, err error) {
	if len(s) == 0 || s[0] != '"' {
		return "", 0, "", errors.New("no quoted request line")
	}
	closed := false
	for i := 1; i < len(s); i++ {
		if s[i] != '"' {
			continue
		}
		closed = true
		if status, rest, ok := statusSize(s[i+1:]); ok {
			return s[1:i], status, rest, nil
		}
	}
	if !closed {
		return "", 0, "", errors.New("no quoted request line")
	}
	return "", 0, "", errors.New("no status and size after the quoted request line")
}

// statusSize reads " status size" from the start of s: spaces, a
// three-digit status, spaces, a size in digits or "-", then the end of s
// or a space. It returns the status and what follows the size.
func statusSize(s string) (status int, rest string, ok bool) {
	t := strings.TrimLeft(s, " ")
	if len(t) == len(s) || len(t) < 3 {
		return 0, "", false
	}
	for i := range 3 {
		if t[i] < '0' || t[i] > '9' {
			return 0, "", false
		}
		status = status*10 + int(t[i]-'0')
	}
	t = t[3:]
	u := strings.TrimLeft(t, " ")
	if len(u) == len(t) || len(u) == 0 {
		return 0, "", false
	}
	n := 0
	if u[0] == '-' {
		n = 1
	} else {
		for n < len(u) && u[n] >= '0' && u[n] <= '9' {
			n++
		}
	}
	if n == 0 || (n < len(u) && u[n] != ' ') {
		return 0, "", false
	}
	return status, u[n:], true
}

// quoted splits a leading "…" field (with \" escapes) from s.
func quoted(s string) (field, rest string, ok bool) {
	if len(s) == 0 || s[0] != '"' {
		return "", s, false
	}
	for i := 1; i < len(s); i++ {
		switch s[i] {
		case '\\':
			i++
		case '"':
			return s[1:i], s[i+1:], true
		}
	}
	return "", s, false
}

// cleanTarget returns the path of a request target: without the query or
// fragment, and without the scheme and authority of an absolute form.
func cleanTarget(t string) string {
	if i := strings.Index(t, "://"); i >= 0 && i < 10 {
		t = t[i+3:]
		if j := strings.IndexByte(t, '/'); j >= 0 {
			t = t[j:]
		} else {
			t = "/"
		}
	}
	if i := strings.IndexAny(t, "?#"); i >= 0 {
		t = t[:i]
	}
	return t
}

// nasaColumns locates the columns of a NASA-style TSV file.
type nasaColumns struct {
	n                                        int
	host, time, method, url, status, ref, ua int
}

func parseNASAHeader(line []byte) (*nasaColumns, error) {
	c := &nasaColumns{host: -1, time: -1, method: -1, url: -1, status: -1, ref: -1, ua: -1}
	names := strings.Split(string(line), "\t")
	c.n = len(names)
	for i, name := range names {
		switch strings.ToLower(strings.TrimSpace(name)) {
		case "host":
			c.host = i
		case "time":
			c.time = i
		case "method":
			c.method = i
		case "url":
			c.url = i
		case "response":
			c.status = i
		case "referer":
			c.ref = i
		case "useragent":
			c.ua = i
		}
	}
	if c.host < 0 || c.time < 0 {
		return nil, fmt.Errorf("tsv header must name host and time columns, got %q", line)
	}
	return c, nil
}

func (c *nasaColumns) parse(line string) (Record, error) {
	var rec Record
	f := strings.Split(line, "\t")
	get := func(i int) string {
		if i < 0 || i >= len(f) {
			return ""
		}
		return f[i]
	}
	if len(f) <= max(c.host, c.time) {
		return rec, fmt.Errorf("%d columns, want at least %d", len(f), max(c.host, c.time)+1)
	}
	sec, err := strconv.ParseInt(f[c.time], 10, 64)
	if err != nil || sec < 0 || sec > math.MaxInt64/1_000_000 {
		return rec, fmt.Errorf("time %q: want Unix seconds", f[c.time])
	}
	rec.Time = sec * 1e6
	rec.Source = f[c.host]
	rec.Method = get(c.method)
	rec.Path = cleanTarget(get(c.url))
	rec.Status, _ = strconv.Atoi(get(c.status))
	if ref, ua := get(c.ref), get(c.ua); ref != "" || ua != "" {
		rec.Headers = map[string]string{"Referer": ref, "User-Agent": ua}
	}
	return rec, nil
}

// parseJSON parses one JSON lines record.
func parseJSON(line []byte) (Record, error) {
	var rec Record
	var top map[string]any
	dec := json.NewDecoder(bytes.NewReader(line))
	dec.UseNumber()
	if err := dec.Decode(&top); err != nil {
		return rec, fmt.Errorf("json: %w", err)
	}
	objs := []map[string]any{top}
	if req, ok := top["request"].(map[string]any); ok {
		objs = append(objs, req)
	}
	lookup := func(names ...string) (any, bool) {
		for _, o := range objs {
			for _, n := range names {
				if v, ok := o[n]; ok && v != nil {
					return v, true
				}
			}
		}
		return nil, false
	}
	str := func(names ...string) string {
		v, _ := lookup(names...)
		switch v := v.(type) {
		case string:
			return v
		case json.Number:
			return v.String()
		}
		return ""
	}
	tv, ok := lookup("time", "ts", "timestamp", "@timestamp")
	if !ok {
		return rec, errors.New("no time field")
	}
	t, err := jsonTime(tv)
	if err != nil {
		return rec, err
	}
	rec.Time = t
	rec.Source = str("remote_addr", "remote_ip", "client_ip", "ip", "client")
	if host, _, ok := strings.Cut(rec.Source, ":"); ok && strings.Count(rec.Source, ":") == 1 {
		rec.Source = host // a.b.c.d:port; IPv6 "[…]:port" is left to the caller
	} else if strings.HasPrefix(rec.Source, "[") {
		if i := strings.IndexByte(rec.Source, ']'); i > 0 {
			rec.Source = rec.Source[1:i]
		}
	}
	rec.Method = str("method")
	rec.Path = cleanTarget(str("path", "uri", "url", "target"))
	rec.Host = str("host")
	if s := str("status"); s != "" {
		rec.Status, _ = strconv.Atoi(s)
	}
	if h, ok := lookup("headers"); ok {
		if hm, ok := h.(map[string]any); ok && len(hm) > 0 {
			rec.Headers = make(map[string]string, len(hm))
			for k, v := range hm {
				switch v := v.(type) {
				case string:
					rec.Headers[textproto.CanonicalMIMEHeaderKey(k)] = v
				case []any:
					if len(v) > 0 {
						if s, ok := v[0].(string); ok {
							rec.Headers[textproto.CanonicalMIMEHeaderKey(k)] = s
						}
					}
				}
			}
		}
	}
	if _, ok := top["rules"]; ok {
		if _, ok := top["outcome"]; ok {
			rec.Edge, err = parseEdge(line)
			if err != nil {
				return rec, err
			}
			for field, v := range map[string]string{"Referer": str("referer"), "User-Agent": str("user_agent")} {
				if v == "" {
					continue
				}
				if rec.Headers == nil {
					rec.Headers = make(map[string]string, 2)
				}
				rec.Headers[field] = v
			}
		}
	}
	return rec, nil
}

// edgeLine reports whether line is one of edge's JSON access log: an
// object with rules and outcome (docs/access-log.md).
func edgeLine(line []byte) bool {
	var probe struct {
		Rules   json.RawMessage `json:"rules"`
		Outcome *string         `json:"outcome"`
	}
	return json.Unmarshal(line, &probe) == nil && probe.Rules != nil && probe.Outcome != nil
}

// parseEdge reads the live decision of a line of edge's access log.
func parseEdge(line []byte) (*EdgeLine, error) {
	var l struct {
		Domain  string `json:"domain"`
		Outcome string `json:"outcome"`
		Sample  int    `json:"sample"`
		Rules   []struct {
			Name      string  `json:"name"`
			Outcome   string  `json:"outcome"`
			Remaining int64   `json:"remaining"`
			Key       *string `json:"key"`
		} `json:"rules"`
	}
	if err := json.Unmarshal(line, &l); err != nil {
		return nil, fmt.Errorf("edge line: %w", err)
	}
	e := &EdgeLine{Domain: l.Domain, Outcome: l.Outcome, Sample: max(l.Sample, 1)}
	for _, r := range l.Rules {
		er := EdgeRule{Name: r.Name, Outcome: r.Outcome, Remaining: r.Remaining}
		if r.Key != nil {
			er.Key, er.HasKey = *r.Key, true
		}
		e.Rules = append(e.Rules, er)
	}
	return e, nil
}

// jsonTime converts a JSON time value to µs since the epoch.
func jsonTime(v any) (int64, error) {
	switch v := v.(type) {
	case json.Number:
		f, err := strconv.ParseFloat(v.String(), 64)
		if err != nil || f < 0 || f > 1e13 {
			return 0, fmt.Errorf("time %s: want Unix seconds", v)
		}
		return int64(math.Round(f * 1e6)), nil
	case string:
		for _, layout := range []string{time.RFC3339Nano, clfTime} {
			if t, err := time.Parse(layout, v); err == nil {
				return t.UnixMicro(), nil
			}
		}
		return 0, fmt.Errorf("time %q: want RFC 3339 or %s", v, clfTime)
	}
	return 0, fmt.Errorf("time %v: want a number or a string", v)
}
