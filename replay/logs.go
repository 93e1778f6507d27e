package replay

import (
	"compress/gzip"
	"fmt"
	"io"
	"net/netip"
	"os"
	"slices"
	"strings"

	"github.com/edgerate/edge/internal/algorithm"
	"github.com/edgerate/edge/internal/wire"
	"github.com/edgerate/edge/rules"
	"github.com/edgerate/edge/trace"
)

// A LogRule is a rule replayed against access logs: what it enforces, what
// names a source, and which requests it counts.
type LogRule struct {
	Rule Rule
	// Key names a source, as the rule's key names a client in the proxy.
	Key []rules.KeyPart
	// Match reports whether the rule counts a request with this method,
	// as src describes it (cleaned path, header fields); nil counts every
	// request.
	Match func(method string, src *rules.KeySource) bool
	// CountBlocked is the rule's count_blocked, for Suggest.
	CountBlocked bool
}

// A Skip is a configuration's rule that a replay leaves out, and why.
type Skip struct {
	Rule   string `json:"rule"`   // domain/rule
	Reason string `json:"reason"` // a sentence without a capital or a full stop
}

// TableRules returns the rules of t a replay can count, named
// "domain/rule", in config order; with only set, just the rule so named
// (none if there is no such rule, or if it is skipped). TableSkips says
// why the others are left out.
func TableRules(t *rules.Table, only string) []LogRule {
	lrs, _ := tableRules(t, only)
	return lrs
}

// TableSkips returns the rules of t (with only set, the rule so named)
// that TableRules leaves out, each with its reason, in config order.
func TableSkips(t *rules.Table, only string) []Skip {
	_, skips := tableRules(t, only)
	return skips
}

// tableRules is TableRules and TableSkips.
func tableRules(t *rules.Table, only string) ([]LogRule, []Skip) {
	var out []LogRule
	var skips []Skip
	for _, d := range t.Domains {
		for _, r := range d.Rules {
			name := d.Name + "/" + r.Name
			if only != "" && only != name {
				continue
			}
			if reason := unreplayable(r); reason != "" {
				skips = append(skips, Skip{Rule: name, Reason: reason})
				continue
			}
			out = append(out, LogRule{
				Rule: Rule{
					Name: name, Algorithm: r.Algorithm, Limit: r.Limit, Period: r.Period,
					Burst: r.Burst, Mitigation: r.MitigationTimeout,
					Precision: r.Precision,
				},
				Key:          r.Key,
				Match:        r.Applies,
				CountBlocked: r.CountBlocked,
			})
		}
	}
	return out, skips
}

// unreplayable returns why r cannot be replayed from an access log, or ""
// if it is one of Algorithms.
func unreplayable(r *rules.Rule) string {
	switch {
	case r.Algorithm == algorithm.Concurrency:
		return "a concurrency rule counts requests in flight, which depend on response times an access log does not record"
	case r.Algorithm == algorithm.Quota:
		// The store counts a quota exactly; what a replay measures is how
		// far a counter strays from an exact sliding count over a fixed
		// period, and a calendar period is not one.
		return fmt.Sprintf("a quota counts exactly per calendar period (reset %s), and replay compares counters with an exact count over a fixed period", r.Reset)
	case !slices.Contains(Algorithms, r.Algorithm):
		return fmt.Sprintf("algorithm %s is not one replay counts by (%s)", r.Algorithm, algorithmList())
	}
	for _, k := range r.Key {
		if reason := unrecordedPart(k); reason != "" {
			return reason
		}
	}
	return ""
}

// unrecordedPart returns why no access log can key by k, or "".
func unrecordedPart(k rules.KeyPart) string {
	switch k.Kind {
	case rules.KeyCookie:
		return fmt.Sprintf("keyed by cookie %s, which an access log does not record", k.Name)
	case rules.KeyJWT:
		return fmt.Sprintf("keyed by %s, a claim of a verified token, which an access log does not record", k)
	case rules.KeyQuery:
		return fmt.Sprintf("keyed by query parameter %s, and an access log's paths are read without their query", k.Name)
	}
	return ""
}

// algorithmList is Algorithms, comma-separated.
func algorithmList() string {
	names := make([]string, len(Algorithms))
	for i, a := range Algorithms {
		names[i] = a.String()
	}
	return strings.Join(names, ", ")
}

// Unrecorded returns why lr cannot be keyed from recs, or "": a rule keyed
// by a header field that no record carries would count every client by
// its address, as the proxy does only for clients that do not send it.
func (lr *LogRule) Unrecorded(recs []trace.Record) string {
	for _, k := range lr.Key {
		if k.Kind == rules.KeyJA4 {
			return "keyed by ja4, the client's TLS fingerprint, which no access log records"
		}
		if k.Kind != rules.KeyHeader {
			continue
		}
		recorded := slices.ContainsFunc(recs, func(r trace.Record) bool {
			_, ok := r.Headers[k.Header]
			return ok
		})
		if !recorded {
			return fmt.Sprintf("keyed by header %s, which the log records for no request", k.Header)
		}
	}
	return ""
}

// ParseKeyList reads a comma-separated list of key parts in the config's
// spelling ("ip,header:X-Api-Key").
func ParseKeyList(s string) ([]rules.KeyPart, error) {
	var parts []rules.KeyPart
	for p := range strings.SplitSeq(s, ",") {
		kp, err := rules.ParseKeyPart(strings.TrimSpace(p))
		if err != nil {
			return nil, err
		}
		if reason := unrecordedPart(kp); reason != "" {
			return nil, fmt.Errorf("%s: %s", kp, reason)
		}
		parts = append(parts, kp)
	}
	return parts, nil
}

// ReadLogs reads the access logs files in format, "-" being stdin and a
// name ending in .gz a gzip-compressed file. It
// reports each file's skipped lines to skipped and fails for a file with
// no request in it.
func ReadLogs(files []string, format trace.Format, stdin io.Reader, skipped func(file string, st trace.LogStats)) ([]trace.Record, error) {
	var recs []trace.Record
	for _, file := range files {
		st, err := readLog(file, format, stdin, func(r trace.Record) { recs = append(recs, r) })
		if err != nil {
			return nil, fmt.Errorf("%s: %w", file, err)
		}
		if st.Skipped > 0 {
			skipped(file, st)
		}
		if st.Records == 0 {
			return nil, fmt.Errorf("%s: no requests read (format %s)", file, st.Format)
		}
	}
	return recs, nil
}

// readLog reads one log file, "-" being stdin.
func readLog(file string, format trace.Format, stdin io.Reader, each func(trace.Record)) (trace.LogStats, error) {
	if file == "-" {
		return trace.ReadLog(stdin, format, each)
	}
	fh, err := os.Open(file)
	if err != nil {
		return trace.LogStats{}, err
	}
	defer fh.Close()
	if !strings.HasSuffix(file, ".gz") {
		return trace.ReadLog(fh, format, each)
	}
	// Rotated logs are usually compressed (access.log.2.gz).
	zr, err := gzip.NewReader(fh)
	if err != nil {
		return trace.LogStats{}, err
	}
	defer zr.Close()
	return trace.ReadLog(zr, format, each)
}

// ScreenStats counts the records Screen drops.
type ScreenStats struct {
	Screened int   // records the proxy would refuse before any rule
	First    error // why the first of them is refused; nil if none is
}

// Screen returns the records of recs the proxy would let reach its rules,
// in order, and counts the others: those whose path net/http or the
// proxy's screen refuses (rules.DecodePath). It reuses recs' array.
func Screen(recs []trace.Record) ([]trace.Record, ScreenStats) {
	var st ScreenStats
	kept := recs[:0]
	for _, r := range recs {
		if _, err := rules.DecodePath(r.Path); err != nil {
			st.Screened++
			if st.First == nil {
				st.First = err
			}
			continue
		}
		kept = append(kept, r)
	}
	return kept, st
}

// LogInputs groups recs into the sources of each rule, one Input per rule,
// in order. A record counts for a rule as a request does in the proxy: its
// path decoded and cleaned with rules.DecodePath is matched (a record the
// proxy would refuse before any rule counts for none; see Screen), and its
// source is its key under the rule, IPv6 clients keyed by their first
// ipv6Bits bits. Sources are named as rules.KeyText writes keys.
func LogInputs(recs []trace.Record, rs []LogRule, ipv6Bits int) []Input {
	srcs := make([]rules.KeySource, len(recs))
	refused := make([]bool, len(recs))
	for i := range recs {
		var err error
		srcs[i], err = recordSource(&recs[i], ipv6Bits)
		refused[i] = err != nil
	}
	var ins []Input
	var buf []byte
	for _, lr := range rs {
		grouped := group(recs, func(i int) (string, bool) {
			if refused[i] || lr.Match != nil && !lr.Match(recs[i].Method, &srcs[i]) {
				return "", false
			}
			buf = rules.AppendKey(buf[:0], lr.Key, &srcs[i])
			return string(buf), true
		}, func(i int) string { return rules.KeyText(lr.Key, &srcs[i]) })
		ins = append(ins, SourcesInput(lr.Rule.Name, lr.Rule, grouped))
	}
	return ins
}

// RecordSource is what a log record offers to a client key, normalised as
// the proxy normalises a request: the client an address (IPv4-mapped
// unmapped, IPv6 masked to ipv6Bits) or, when the log names it otherwise, a
// host name as it is; the path decoded and cleaned (rules.DecodePath), or
// "" for a path the proxy refuses before any rule (Screen); the host
// normalised.
func RecordSource(r *trace.Record, ipv6Bits int) rules.KeySource {
	src, _ := recordSource(r, ipv6Bits)
	return src
}

// recordSource is RecordSource, and DecodePath's error for a refused path.
func recordSource(r *trace.Record, ipv6Bits int) (rules.KeySource, error) {
	path, err := rules.DecodePath(r.Path)
	src := rules.KeySource{Path: path, Header: recordHeaders(r.Headers)}
	src.Host, _ = wire.NormalizeHost(r.Host)
	if a, err := netip.ParseAddr(r.Source); err == nil {
		src.Client = rules.ClientPrefix(a, ipv6Bits)
	} else {
		src.ClientName = r.Source
	}
	return src, err
}

// recordHeaders are a log record's header fields, one value each.
type recordHeaders map[string]string

// Values returns the field's value, nil if the log lacks it.
func (h recordHeaders) Values(name string) []string {
	if v, ok := h[name]; ok {
		return []string{v}
	}
	return nil
}

// Group collects records into sources, in order of first appearance. key
// names a record's source, or reports false to leave the record out (a rule
// that does not match it). Each source's times are sorted, equal times
// keeping file order.
func Group(recs []trace.Record, key func(*trace.Record) (string, bool)) []Source {
	return group(recs, func(i int) (string, bool) { return key(&recs[i]) }, func(i int) string {
		k, _ := key(&recs[i])
		return k
	})
}

// group is Group for sources identified by id and named, once, by name.
func group(recs []trace.Record, id func(i int) (string, bool), name func(i int) string) []Source {
	index := make(map[string]int)
	var srcs []Source
	for i := range recs {
		k, ok := id(i)
		if !ok {
			continue
		}
		j, seen := index[k]
		if !seen {
			j = len(srcs)
			index[k] = j
			srcs = append(srcs, Source{Name: name(i), Key: k})
		}
		srcs[j].Times = append(srcs[j].Times, recs[i].Time)
	}
	for i := range srcs {
		slices.Sort(srcs[i].Times) // equal int64s are interchangeable
	}
	return srcs
}

// SyntheticInputs returns the inputs of the synthetic scenario name, or of
// every scenario for "all", at scale; seed 0 takes each scenario's default.
func SyntheticInputs(name string, seed uint64, scale trace.Scale) ([]Input, error) {
	names := []string{name}
	if name == "all" {
		names = trace.Scenarios()
	}
	var ins []Input
	for _, name := range names {
		s := seed
		if s == 0 {
			s, _ = trace.DefaultSeed(name)
		}
		cells, err := trace.Scenario(name, s, scale)
		if err != nil {
			return nil, err
		}
		for _, c := range cells {
			ins = append(ins, CellInput(c))
		}
	}
	return ins, nil
}
