// Package rls is edge as Envoy's rate limit service: the gRPC service
// envoy.service.ratelimit.v3.RateLimitService, answering ShouldRateLimit
// for the descriptors of Lyft's ratelimit configuration files, counted by
// edge's own stores (package window on one node, package cluster through
// Redis).
//
// This file reads Lyft's configuration format as Lyft's loader does
// (github.com/envoyproxy/ratelimit, src/config): one domain per file, a
// tree of descriptors of key and optional value, each with an optional
// rate_limit. It differs in three ways, all stricter or more helpful:
// every problem of every file is reported at once rather than the first
// one as a panic; each names the file, the line and the path of the key
// ("descriptors[1].rate_limit.unit"); and a key Lyft accepts anywhere but
// uses in one place only (unit at a descriptor's level, say) is accepted
// with a warning that it is ignored, where Lyft ignores it silently.
//
// Every unit Lyft has is counted, second to year, in epoch-aligned periods
// of Lyft's lengths (a month 30 days, a year 365): period k of a unit of n
// seconds starts at Unix second k×n, as Lyft's cache keys do, so a fixed
// window resets when Lyft's would. A year is longer than the 49.7 days
// that bound most of the store's periods; the service's windows keep no
// mitigation, which is what lets a window count it (window.MaxWindowPeriod).
package rls

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"time"

	"go.yaml.in/yaml/v4"

	"github.com/edgerate/edge/internal/yamlkind"
)

// A Unit is the period of a rate_limit, Lyft's units: epoch-aligned
// periods of a second to a year (a month is 30 days, a year 365, as Lyft
// counts them).
type Unit uint8

// Units, numbered as Envoy's RateLimitResponse.RateLimit.Unit numbers them.
const (
	Second Unit = 1
	Minute Unit = 2
	Hour   Unit = 3
	Day    Unit = 4
	Month  Unit = 5
	Year   Unit = 6
	Week   Unit = 7
)

var unitByName = map[string]Unit{
	"SECOND": Second, "MINUTE": Minute, "HOUR": Hour, "DAY": Day,
	"WEEK": Week, "MONTH": Month, "YEAR": Year,
}

// String returns the unit's name as a configuration spells it.
func (u Unit) String() string {
	for name, v := range unitByName {
		if v == u {
			return strings.ToLower(name)
		}
	}
	return "unit(" + strconv.Itoa(int(u)) + ")"
}

// Period returns the unit's length.
func (u Unit) Period() time.Duration {
	const day = 24 * time.Hour
	switch u {
	case Second:
		return time.Second
	case Minute:
		return time.Minute
	case Hour:
		return time.Hour
	case Day:
		return day
	case Week:
		return 7 * day
	case Month:
		return 30 * day
	case Year:
		return 365 * day
	}
	return 0
}

// A Limit is a descriptor's rate_limit.
type Limit struct {
	RequestsPerUnit uint32
	Unit            Unit // 0 when Unlimited
	Unlimited       bool
	Name            string   // "" when unnamed
	Replaces        []string // names of the limits this one drops
}

// A Descriptor is one entry of a domain's descriptor tree.
type Descriptor struct {
	Key   string
	Value string // "" matches any value (key only); a value with '*' is a wildcard
	// Path names the entry in metrics and logs as Lyft's stats do, from
	// the configuration only: "key_value.key2" (the domain left out).
	Path           string
	Limit          *Limit // nil: no limit at this entry
	ShadowMode     bool
	QuotaMode      bool
	ShareThreshold bool
	File           string // the file that defined it
	Line           int

	// Rule is the entry's rule number in its domain's store: one per
	// distinct counted limit of the domain (Domain.Limits[Rule]); -1 for
	// no limit or an unlimited one.
	Rule int

	parts    []string // a wildcard Value split at '*'
	children level
}

// level is one level of a descriptor tree, indexed for matching.
type level struct {
	exact   map[string]map[string]*Descriptor // key → value → entry
	keyOnly map[string]*Descriptor
	wild    []*Descriptor // wildcard entries, in configuration order
	list    []*Descriptor // every entry, in configuration order
}

// A LimitKey is what a rule of a domain's store counts: requests per unit.
type LimitKey struct {
	RequestsPerUnit uint32
	Unit            Unit
}

// A Domain is the descriptor tree of one domain, from one file or, with
// merge_domains, several.
type Domain struct {
	Name   string
	Files  []string
	Limits []LimitKey // the domain's counted limits; Descriptor.Rule indexes it
	root   level
}

// Descriptors returns the domain's top-level entries in configuration order.
func (d *Domain) Descriptors() []*Descriptor { return d.root.list }

// Children returns e's nested entries in configuration order.
func (e *Descriptor) Children() []*Descriptor { return e.children.list }

// A Config is a set of Lyft configuration files, loaded and checked. It is
// immutable once made.
type Config struct {
	Domains map[string]*Domain
	// Files are the files read, in the order read.
	Files []string
	// Warnings say what edge does with keys it accepts but does not use as
	// Lyft does (detailed_metric, value_to_metric, metadata, keys at a
	// level where they mean nothing): one per kind, naming the first place.
	Warnings []string
}

// A File is one configuration file's name (for errors) and content.
type File struct {
	Name string
	Data []byte
}

// MaxRules is the most distinct limits (requests per unit) one domain may
// count: a domain's counters are one store, and a store counts up to 256
// rules (window.MaxRules).
const MaxRules = 256

// Bounds that keep a hostile file from costing more than a large honest one.
const (
	maxDepth = 64        // nesting of descriptors
	maxNodes = 1_000_000 // YAML nodes visited per file, aliases expanded
)

// Load reads the files that paths name, relative to dir: each a file name
// or a glob (filepath.Match syntax), every match in lexical order, each file
// once. A glob that matches nothing is an error (a path written wrong would
// otherwise load no limits). Every problem of every file is reported.
func Load(dir string, paths []string, mergeDomains bool) (*Config, error) {
	var files []File
	var errs []error
	seen := map[string]bool{}
	for _, p := range paths {
		full := p
		if !filepath.IsAbs(full) {
			full = filepath.Join(dir, p)
		}
		matches, err := filepath.Glob(full)
		if err != nil {
			errs = append(errs, fmt.Errorf("rls.config: %q: %w", p, err))
			continue
		}
		// A directory a glob matches is not a file to load.
		matches = slices.DeleteFunc(matches, func(m string) bool {
			fi, err := os.Stat(m)
			return err == nil && fi.IsDir()
		})
		if len(matches) == 0 {
			errs = append(errs, fmt.Errorf("rls.config: %q matches no file", p))
			continue
		}
		slices.Sort(matches)
		for _, m := range matches {
			if seen[m] {
				continue
			}
			seen[m] = true
			data, err := os.ReadFile(m)
			if err != nil {
				errs = append(errs, fmt.Errorf("rls.config: %w", err))
				continue
			}
			files = append(files, File{Name: m, Data: data})
		}
	}
	if len(errs) > 0 {
		return nil, errors.Join(errs...)
	}
	return Parse(files, mergeDomains)
}

// Parse loads files in order. A domain given by two files is an error
// unless mergeDomains, when the later file's descriptors join the earlier
// one's; a descriptor given twice at one place is an error either way.
func Parse(files []File, mergeDomains bool) (*Config, error) {
	l := loader{
		cfg:  &Config{Domains: map[string]*Domain{}},
		warn: map[string]bool{},
	}
	for _, f := range files {
		l.cfg.Files = append(l.cfg.Files, f.Name)
		l.file(f, mergeDomains)
	}
	if len(l.errs) > 0 {
		return nil, errors.Join(l.errs...)
	}
	return l.cfg, nil
}

type loader struct {
	cfg   *Config
	errs  []error
	warn  map[string]bool // kinds already warned of
	name  string          // the file being read
	nodes int             // nodes visited in it
}

// A ConfigError is one problem of a file, at a path of keys.
type ConfigError struct {
	File string
	Line int    // 0 when unknown
	Path string // "descriptors[0].rate_limit.unit"; "" for the whole file
	Msg  string
}

func (e *ConfigError) Error() string {
	var b strings.Builder
	b.WriteString(e.File)
	if e.Line > 0 {
		b.WriteString(":" + strconv.Itoa(e.Line))
	}
	b.WriteString(": ")
	if e.Path != "" {
		b.WriteString(e.Path + ": ")
	}
	b.WriteString(e.Msg)
	return b.String()
}

func (l *loader) fail(n *yaml.Node, path, format string, args ...any) {
	line := 0
	if n != nil {
		line = n.Line
	}
	l.errs = append(l.errs, &ConfigError{File: l.name, Line: line, Path: path, Msg: fmt.Sprintf(format, args...)})
}

// warnOnce records a warning of kind, the first time it is met.
func (l *loader) warnOnce(kind string, n *yaml.Node, path, msg string) {
	if l.warn[kind] {
		return
	}
	l.warn[kind] = true
	l.cfg.Warnings = append(l.cfg.Warnings, (&ConfigError{File: l.name, Line: n.Line, Path: path, Msg: msg}).Error())
}

func (l *loader) file(f File, merge bool) {
	l.name, l.nodes = f.Name, 0
	var doc yaml.Node
	if err := yaml.Unmarshal(f.Data, &doc); err != nil {
		l.errs = append(l.errs, &ConfigError{File: f.Name, Msg: "error loading config file: " + strings.TrimPrefix(err.Error(), "yaml: ")})
		return
	}
	var root *yaml.Node
	if len(doc.Content) > 0 {
		root = l.deref(doc.Content[0])
	}
	if root == nil || (root.Kind == yaml.ScalarNode && root.Tag == "!!null") {
		l.fail(nil, "", "config file cannot have empty domain")
		return
	}
	if root.Kind != yaml.MappingNode {
		l.fail(root, "", "the file must be a mapping with domain and descriptors; it is %s", yamlkind.Of(root))
		return
	}
	var name string
	var descs *yaml.Node
	l.mapping(root, "", func(key string, k, v *yaml.Node, path string) {
		switch key {
		case "domain":
			name, _ = l.str(v, path)
		case "descriptors":
			descs = v
		default:
			l.misplaced(key, k, path)
		}
	})
	if name == "" {
		l.fail(root, "domain", "config file cannot have empty domain")
		return
	}
	d := l.cfg.Domains[name]
	if d != nil && !merge {
		l.fail(root, "domain", "duplicate domain %q: also in %s (set rls.merge_domains to merge them)", name, d.Files[0])
		return
	}
	if d == nil {
		d = &Domain{Name: name}
		l.cfg.Domains[name] = d
	}
	d.Files = append(d.Files, f.Name)
	if descs != nil {
		l.descriptors(d, &d.root, descs, "descriptors", "", 1)
	}
}

// deref follows aliases and counts the node; it returns nil past the
// node budget, having reported it once.
func (l *loader) deref(n *yaml.Node) *yaml.Node {
	for i := 0; n != nil && n.Kind == yaml.AliasNode && i < maxDepth; i++ {
		n = n.Alias
	}
	if n != nil && n.Kind == yaml.AliasNode {
		return nil
	}
	l.nodes++
	if l.nodes == maxNodes {
		l.fail(n, "", "file too large: more than %d YAML nodes (aliases expanded)", maxNodes)
	}
	if l.nodes >= maxNodes {
		return nil
	}
	return n
}

// mapping calls f for each key of mapping node m at path, in order,
// reporting keys that are not strings and keys given twice.
func (l *loader) mapping(m *yaml.Node, path string, f func(key string, k, v *yaml.Node, path string)) {
	seen := map[string]bool{}
	for i := 0; i+1 < len(m.Content); i += 2 {
		k, v := l.deref(m.Content[i]), l.deref(m.Content[i+1])
		if k == nil || v == nil {
			return
		}
		if k.Kind == yaml.ScalarNode && k.Tag == "!!merge" {
			l.fail(k, path, "YAML merge keys (<<) are not supported yet: write the keys out")
			continue
		}
		if k.Kind != yaml.ScalarNode || k.Tag != "!!str" {
			l.fail(k, path, "config error, key is not of type string: %s", yamlkind.Of(k))
			continue
		}
		p := k.Value
		if path != "" {
			p = path + "." + k.Value
		}
		if seen[k.Value] {
			l.fail(k, p, "key given twice")
			continue
		}
		seen[k.Value] = true
		f(k.Value, k, v, p)
	}
}

// lyftKeys are every key Lyft's loader accepts, anywhere in a file.
var lyftKeys = map[string]bool{
	"domain": true, "key": true, "value": true, "descriptors": true, "rate_limit": true,
	"unit": true, "requests_per_unit": true, "unlimited": true, "shadow_mode": true,
	"quota_mode": true, "name": true, "replaces": true, "detailed_metric": true,
	"value_to_metric": true, "share_threshold": true, "metadata": true,
}

// misplaced reports key, found where it means nothing: an error if Lyft
// does not know it either, else a warning (Lyft ignores it silently).
func (l *loader) misplaced(key string, k *yaml.Node, path string) {
	if !lyftKeys[key] {
		l.fail(k, path, "config error, unknown key %q", key)
		return
	}
	l.warnOnce("misplaced:"+key, k, path, "ignored: "+key+" means nothing at this level (Lyft's loader ignores it too)")
}

func (l *loader) descriptors(d *Domain, lv *level, n *yaml.Node, path, parent string, depth int) {
	if n.Kind == yaml.ScalarNode && n.Tag == "!!null" {
		return
	}
	if n.Kind != yaml.SequenceNode {
		l.fail(n, path, "must be a list of descriptors, got %s", yamlkind.Of(n))
		return
	}
	if depth > maxDepth {
		l.fail(n, path, "descriptors nested more than %d deep", maxDepth)
		return
	}
	for i, item := range n.Content {
		item = l.deref(item)
		if item == nil {
			return
		}
		p := path + "[" + strconv.Itoa(i) + "]"
		if item.Kind != yaml.MappingNode {
			l.fail(item, p, "config error, yaml file contains list of type other than map: %s", yamlkind.Of(item))
			continue
		}
		l.descriptor(d, lv, item, p, parent, depth)
	}
}

func (l *loader) descriptor(d *Domain, lv *level, m *yaml.Node, path, parent string, depth int) {
	e := &Descriptor{File: l.name, Line: m.Line, Rule: -1}
	var rl, children *yaml.Node
	var rlPath, childPath string
	var detailed, valueToMetric bool
	l.mapping(m, path, func(key string, k, v *yaml.Node, p string) {
		switch key {
		case "key":
			e.Key, _ = l.str(v, p)
		case "value":
			e.Value, _ = l.str(v, p)
		case "rate_limit":
			rl, rlPath = v, p
		case "descriptors":
			children, childPath = v, p
		case "shadow_mode":
			e.ShadowMode = l.boolean(v, p)
		case "quota_mode":
			e.QuotaMode = l.boolean(v, p)
		case "share_threshold":
			e.ShareThreshold = l.boolean(v, p)
		case "detailed_metric":
			if detailed = l.boolean(v, p); detailed {
				l.warnOnce("detailed_metric", k, p, "accepted; edge labels metrics by the configuration entry only, never by a value a client sends, so detailed_metric changes nothing")
			}
		case "value_to_metric":
			if valueToMetric = l.boolean(v, p); valueToMetric {
				l.warnOnce("value_to_metric", k, p, "accepted; edge labels metrics by the configuration entry only, never by a value a client sends, so value_to_metric changes nothing")
			}
		case "metadata":
			if v.Kind != yaml.MappingNode && !(v.Kind == yaml.ScalarNode && v.Tag == "!!null") {
				l.fail(v, p, "error parsing metadata: must be a mapping, got %s", yamlkind.Of(v))
				return
			}
			l.warnOnce("metadata", k, p, "accepted; edge sends no dynamic metadata in its answers, so metadata is not used")
		default:
			l.misplaced(key, k, p)
		}
	})
	if e.Key == "" {
		l.fail(m, path+".key", "descriptor has empty key")
		return
	}
	final := e.Key
	if e.Value != "" {
		final += "_" + e.Value
	}
	e.Path = parent + final
	if strings.Contains(e.Value, "*") {
		e.parts = strings.Split(e.Value, "*")
	}
	if e.ShareThreshold && e.parts == nil {
		l.fail(m, path+".share_threshold", "share_threshold can only be used with wildcard values (containing '*'), but found key '%s'", final)
	}
	if rl != nil {
		e.Limit = l.rateLimit(rl, rlPath)
	}
	if e.Limit != nil && !e.Limit.Unlimited && e.Limit.Unit != 0 {
		k := LimitKey{e.Limit.RequestsPerUnit, e.Limit.Unit}
		e.Rule = slices.Index(d.Limits, k)
		if e.Rule < 0 {
			if len(d.Limits) == MaxRules {
				l.fail(rl, rlPath, "domain %q has more than %d distinct limits (requests_per_unit and unit); edge counts at most %d per domain", d.Name, MaxRules, MaxRules)
			}
			d.Limits = append(d.Limits, k)
			e.Rule = len(d.Limits) - 1
		}
	}
	if !lv.add(e) {
		l.fail(m, path, "duplicate descriptor composite key '%s.%s'", d.Name, e.Path)
		return
	}
	if children != nil {
		l.descriptors(d, &e.children, children, childPath, e.Path+".", depth+1)
	}
}

// add indexes e at lv; it reports false if lv has an entry of e's key and
// value already.
func (lv *level) add(e *Descriptor) bool {
	switch {
	case e.Value == "":
		if lv.keyOnly[e.Key] != nil {
			return false
		}
		if lv.keyOnly == nil {
			lv.keyOnly = map[string]*Descriptor{}
		}
		lv.keyOnly[e.Key] = e
	default:
		if lv.exact[e.Key][e.Value] != nil {
			return false
		}
		if lv.exact == nil {
			lv.exact = map[string]map[string]*Descriptor{}
		}
		if lv.exact[e.Key] == nil {
			lv.exact[e.Key] = map[string]*Descriptor{}
		}
		lv.exact[e.Key][e.Value] = e
		if e.parts != nil {
			lv.wild = append(lv.wild, e)
		}
	}
	lv.list = append(lv.list, e)
	return true
}

func (l *loader) rateLimit(n *yaml.Node, path string) *Limit {
	if n.Kind == yaml.ScalarNode && n.Tag == "!!null" {
		return nil // "rate_limit:" with nothing: no limit, as in Lyft
	}
	if n.Kind != yaml.MappingNode {
		l.fail(n, path, "must be a mapping, got %s", yamlkind.Of(n))
		return nil
	}
	lim := &Limit{}
	var unit string
	var unitNode *yaml.Node
	l.mapping(n, path, func(key string, k, v *yaml.Node, p string) {
		switch key {
		case "requests_per_unit":
			lim.RequestsPerUnit = l.uint32(v, p)
		case "unit":
			unit, _ = l.str(v, p)
			unitNode = v
		case "unlimited":
			lim.Unlimited = l.boolean(v, p)
		case "name":
			lim.Name, _ = l.str(v, p)
		case "replaces":
			lim.Replaces = l.replaces(v, p)
		default:
			l.misplaced(key, k, p)
		}
	})
	u, valid := unitByName[strings.ToUpper(unit)]
	switch {
	case lim.Unlimited && valid:
		l.fail(unitNode, path+".unit", "should not specify rate limit unit when unlimited")
	case lim.Unlimited:
		// Lyft ignores a unit it cannot read on an unlimited entry.
	case !valid:
		l.fail(orNode(unitNode, n), path+".unit", "invalid rate limit unit '%s' (valid: second, minute, hour, day, week, month, year)", unit)
	default:
		lim.Unit = u
	}
	for i, r := range lim.Replaces {
		p := path + ".replaces[" + strconv.Itoa(i) + "].name"
		switch {
		case r == "":
			l.fail(n, p, "should not have an empty replaces entry")
		case r == lim.Name:
			l.fail(n, p, "replaces should not contain name of same descriptor (%q)", r)
		}
	}
	return lim
}

func (l *loader) replaces(n *yaml.Node, path string) []string {
	if n.Kind == yaml.ScalarNode && n.Tag == "!!null" {
		return nil
	}
	if n.Kind != yaml.SequenceNode {
		l.fail(n, path, "must be a list of {name: ...}, got %s", yamlkind.Of(n))
		return nil
	}
	out := make([]string, 0, len(n.Content))
	for i, item := range n.Content {
		item = l.deref(item)
		if item == nil {
			return out
		}
		p := path + "[" + strconv.Itoa(i) + "]"
		if item.Kind != yaml.MappingNode {
			l.fail(item, p, "config error, yaml file contains list of type other than map: %s", yamlkind.Of(item))
			continue
		}
		name := ""
		l.mapping(item, p, func(key string, k, v *yaml.Node, p string) {
			if key == "name" {
				name, _ = l.str(v, p)
				return
			}
			l.misplaced(key, k, p)
		})
		out = append(out, name)
	}
	return out
}

// str reads a scalar as text, as Lyft's loader reads any scalar into a
// string field ("value: 200" is "200"); null is "".
func (l *loader) str(n *yaml.Node, path string) (string, bool) {
	if n.Kind != yaml.ScalarNode {
		l.fail(n, path, "must be a string, got %s", yamlkind.Of(n))
		return "", false
	}
	if n.Tag == "!!null" {
		return "", true
	}
	return n.Value, true
}

// boolean reads true or false, and the YAML 1.1 spellings Lyft's parser
// (yaml.v2) also takes (yes, no, on, off).
func (l *loader) boolean(n *yaml.Node, path string) bool {
	if n.Kind == yaml.ScalarNode {
		switch n.Value {
		case "true", "True", "TRUE", "yes", "Yes", "YES", "on", "On", "ON", "y", "Y":
			return true
		case "false", "False", "FALSE", "no", "No", "NO", "off", "Off", "OFF", "n", "N", "":
			return false
		}
	}
	l.fail(n, path, "must be true or false, got %s", describe(n))
	return false
}

func (l *loader) uint32(n *yaml.Node, path string) uint32 {
	if n.Kind == yaml.ScalarNode && n.Tag == "!!int" {
		if v, err := strconv.ParseUint(n.Value, 0, 32); err == nil {
			return uint32(v)
		}
	}
	l.fail(n, path, "must be a whole number from 0 to 4294967295, got %s", describe(n))
	return 0
}

func orNode(n, or *yaml.Node) *yaml.Node {
	if n != nil {
		return n
	}
	return or
}

// describe quotes a scalar, or names what a node holds.
func describe(n *yaml.Node) string {
	if n.Kind == yaml.ScalarNode && n.Tag != "!!null" {
		v := n.Value
		if len(v) > 64 {
			v = v[:64] + "…"
		}
		return strconv.Quote(v)
	}
	return yamlkind.Of(n)
}

// WarningsOrNil returns c's warnings; nil for a nil Config.
func (c *Config) WarningsOrNil() []string {
	if c == nil {
		return nil
	}
	return c.Warnings
}
