package headers

import (
	"encoding/base64"
	"fmt"
	"math"
	"strconv"
	"time"
	"unicode/utf8"
)

// ParsePolicies parses a RateLimit-Policy field value. A response that
// carries the field on several lines must have them joined with "," first
// (RFC 9110, Section 5.3), for example strings.Join(h.Values(k), ",").
//
// The value must be a valid RFC 9651 List, or the whole field is rejected,
// as Section 4.2 requires. Each member must be an Item (not an Inner List)
// whose value is a String or a Token (the policy name; earlier drafts used
// Tokens), with an Integer "q" ≥ 0 and, optionally, an Integer "w" ≥ 0 in
// seconds. An absent "w" gives a Window of 0, and a "w" too large for a
// time.Duration gives the largest one. Other parameters ("qu", "pk", vendor
// extensions) are checked for syntax and otherwise ignored; a repeated
// parameter takes its last value (RFC 9651, Section 4.2.3.2).
//
// An empty value, like an absent field, gives no policies and no error. On
// any error the result is nil. ParsePolicies never panics.
func ParsePolicies(v string) ([]Policy, error) {
	items, err := parseList(v, "q", "w")
	if err != nil {
		return nil, fmt.Errorf("parse RateLimit-Policy: %w", err)
	}
	var ps []Policy
	if len(items) > 0 {
		ps = make([]Policy, len(items))
	}
	for i, it := range items {
		ps[i] = Policy{Name: it.name, Quota: it.required, Window: secondsDuration(it.optional)}
	}
	return ps, nil
}

// ParseLimits parses a RateLimit field value, with the same rules as
// ParsePolicies except that the parameters are an Integer "r" ≥ 0, which is
// required, and an Integer "t" ≥ 0 in seconds, which is optional. An absent
// "t" gives a Reset of 0, so a caller that must tell "now" from "not
// stated" has to look for ";t=" itself; edge always sends it.
func ParseLimits(v string) ([]Limit, error) {
	items, err := parseList(v, "r", "t")
	if err != nil {
		return nil, fmt.Errorf("parse RateLimit: %w", err)
	}
	var ls []Limit
	if len(items) > 0 {
		ls = make([]Limit, len(items))
	}
	for i, it := range items {
		ls[i] = Limit{Name: it.name, Remaining: it.required, Reset: secondsDuration(it.optional)}
	}
	return ls, nil
}

// secondsDuration converts a non-negative number of seconds to a Duration,
// saturating instead of overflowing: an Integer may hold 10^15 seconds, a
// Duration only about 9.2*10^9.
func secondsDuration(s int64) time.Duration {
	if s > math.MaxInt64/int64(time.Second) {
		return math.MaxInt64
	}
	return time.Duration(s) * time.Second
}

// listItem is what parseList keeps of one member: its name and the values
// of the two integer parameters it was asked for (optional is 0 if absent).
type listItem struct {
	name     string
	required int64
	optional int64
}

// parseList parses v as an RFC 9651 List (Section 4.2.1) whose members are
// Items with a String or Token value, a required non-negative Integer
// parameter named req and an optional one named opt.
//
// It follows the parsing algorithms of RFC 9651, Section 4.2 step by step,
// for every type, so that a field with, say, a Decimal or Byte Sequence
// parameter is accepted or rejected exactly as the RFC says even though its
// value is thrown away. The only liberty is the one the RFC recommends: a
// Byte Sequence may omit its '=' padding (Section 4.2.7).
func parseList(v, req, opt string) ([]listItem, error) {
	p := parser{in: v}
	p.skipSP()
	var items []listItem
	for !p.eof() {
		n := len(items)
		if p.in[p.off] == '(' {
			if err := p.innerList(); err != nil {
				return nil, err
			}
			return nil, fmt.Errorf("member %d: want a string, got inner list", n)
		}
		it, err := p.member(n, req, opt)
		if err != nil {
			return nil, err
		}
		items = append(items, it)

		p.skipOWS()
		if p.eof() {
			break
		}
		if p.in[p.off] != ',' {
			return nil, p.errorf("after member %d: want ',', got %q", n, p.in[p.off])
		}
		p.off++
		p.skipOWS()
		if p.eof() {
			return nil, p.errorf("trailing ',' after member %d", n)
		}
	}
	return items, nil
}

// member parses the Item at the parser's position and checks it as
// described at parseList; n is its index, for error messages.
func (p *parser) member(n int, req, opt string) (listItem, error) {
	var it listItem
	name, err := p.bareItem()
	if err != nil {
		return it, err
	}
	if name.kind != kindString && name.kind != kindToken {
		return it, fmt.Errorf("member %d: want a string, got %s", n, name.kind)
	}
	it.name = name.str

	var rv, ov bareItem
	var hasReq bool
	for !p.eof() && p.in[p.off] == ';' {
		key, val, err := p.param()
		if err != nil {
			return it, err
		}
		switch key {
		case req:
			rv, hasReq = val, true
		case opt:
			ov = val
		}
	}
	if !hasReq {
		return it, fmt.Errorf("member %d (%q): missing parameter %q", n, it.name, req)
	}
	if rv.kind != kindInteger || rv.num < 0 {
		return it, fmt.Errorf("member %d (%q): parameter %q: want an integer ≥ 0, got %s", n, it.name, req, rv.describe())
	}
	it.required = rv.num
	// The zero bareItem is an Integer 0, which stands for an absent
	// optional parameter.
	if ov.kind != kindInteger || ov.num < 0 {
		return it, fmt.Errorf("member %d (%q): parameter %q: want an integer ≥ 0, got %s", n, it.name, opt, ov.describe())
	}
	it.optional = ov.num
	return it, nil
}

// parser walks an RFC 9651 field value. Every method either advances past
// what it parsed or returns an error; none of them panics on any input.
type parser struct {
	in  string
	off int
}

func (p *parser) eof() bool { return p.off >= len(p.in) }

// skipSP discards leading SP (RFC 9651 uses SP alone in most places).
func (p *parser) skipSP() {
	for !p.eof() && p.in[p.off] == ' ' {
		p.off++
	}
}

// skipOWS discards SP and HTAB, around list commas.
func (p *parser) skipOWS() {
	for !p.eof() && (p.in[p.off] == ' ' || p.in[p.off] == '\t') {
		p.off++
	}
}

func (p *parser) errorf(format string, args ...any) error {
	return fmt.Errorf("offset %d: %w", p.off, fmt.Errorf(format, args...))
}

// innerList parses an Inner List (Section 4.2.1.2) and its parameters,
// keeping nothing.
func (p *parser) innerList() error {
	p.off++ // '('
	for !p.eof() {
		p.skipSP()
		if p.eof() {
			break
		}
		if p.in[p.off] == ')' {
			p.off++
			return p.params()
		}
		if _, err := p.bareItem(); err != nil {
			return err
		}
		if err := p.params(); err != nil {
			return err
		}
		if p.eof() {
			break
		}
		if c := p.in[p.off]; c != ' ' && c != ')' {
			return p.errorf("inner list: want ' ' or ')', got %q", c)
		}
	}
	return p.errorf("inner list: no closing ')'")
}

// params parses Parameters (Section 4.2.3.2), keeping nothing.
func (p *parser) params() error {
	for !p.eof() && p.in[p.off] == ';' {
		if _, _, err := p.param(); err != nil {
			return err
		}
	}
	return nil
}

// param parses one ";key[=value]" parameter; a key without a value is the
// Boolean true.
func (p *parser) param() (string, bareItem, error) {
	p.off++ // ';'
	p.skipSP()
	key, err := p.key()
	if err != nil {
		return "", bareItem{}, err
	}
	if p.eof() || p.in[p.off] != '=' {
		return key, bareItem{kind: kindBoolean, num: 1}, nil
	}
	p.off++
	val, err := p.bareItem()
	return key, val, err
}

// key parses a Key (Section 4.2.3.3).
func (p *parser) key() (string, error) {
	start := p.off
	if p.eof() || !(isLCAlpha(p.in[p.off]) || p.in[p.off] == '*') {
		return "", p.errorf("parameter key: want a-z or '*'")
	}
	p.off++
	for !p.eof() {
		c := p.in[p.off]
		if !(isLCAlpha(c) || isDigit(c) || c == '_' || c == '-' || c == '.' || c == '*') {
			break
		}
		p.off++
	}
	return p.in[start:p.off], nil
}

type bareKind uint8

const (
	kindInteger bareKind = iota
	kindDecimal
	kindString
	kindToken
	kindByteSequence
	kindBoolean
	kindDate
	kindDisplayString
)

func (k bareKind) String() string {
	switch k {
	case kindInteger:
		return "integer"
	case kindDecimal:
		return "decimal"
	case kindString:
		return "string"
	case kindToken:
		return "token"
	case kindByteSequence:
		return "byte sequence"
	case kindBoolean:
		return "boolean"
	case kindDate:
		return "date"
	case kindDisplayString:
		return "display string"
	}
	return "bare item"
}

// bareItem keeps what the callers need of a Bare Item: its kind, the value
// of an Integer and the value of a String or Token.
type bareItem struct {
	kind bareKind
	num  int64
	str  string
}

// describe names b's kind, with the value of an Integer, for errors.
func (b bareItem) describe() string {
	if b.kind == kindInteger {
		return strconv.FormatInt(b.num, 10)
	}
	return b.kind.String()
}

// bareItem parses a Bare Item (Section 4.2.3.1).
func (p *parser) bareItem() (bareItem, error) {
	if p.eof() {
		return bareItem{}, p.errorf("want an item, got the end of the value")
	}
	switch c := p.in[p.off]; {
	case c == '-' || isDigit(c):
		return p.number()
	case c == '"':
		s, err := p.sfString()
		return bareItem{kind: kindString, str: s}, err
	case c == '*' || isAlpha(c):
		return bareItem{kind: kindToken, str: p.token()}, nil
	case c == ':':
		return bareItem{kind: kindByteSequence}, p.byteSequence()
	case c == '?':
		return p.boolean()
	case c == '@':
		p.off++
		n, err := p.number()
		if err == nil && n.kind != kindInteger {
			err = p.errorf("date: want an integer, got a decimal")
		}
		return bareItem{kind: kindDate}, err
	case c == '%':
		return bareItem{kind: kindDisplayString}, p.displayString()
	default:
		return bareItem{}, p.errorf("want an item, got %q", c)
	}
}

// number parses an Integer or Decimal (Section 4.2.4).
func (p *parser) number() (bareItem, error) {
	neg := false
	if !p.eof() && p.in[p.off] == '-' {
		neg = true
		p.off++
	}
	if p.eof() || !isDigit(p.in[p.off]) {
		return bareItem{}, p.errorf("number: want a digit")
	}
	start, dot := p.off, -1
	for !p.eof() {
		c := p.in[p.off]
		if isDigit(c) {
			p.off++
		} else if dot < 0 && c == '.' {
			if p.off-start > 12 {
				return bareItem{}, p.errorf("decimal: more than 12 integer digits")
			}
			dot = p.off
			p.off++
		} else {
			break
		}
		if dot < 0 && p.off-start > 15 {
			return bareItem{}, p.errorf("integer: more than 15 digits")
		}
		if p.off-start > 16 {
			return bareItem{}, p.errorf("decimal: more than 16 characters")
		}
	}
	if dot >= 0 {
		if frac := p.off - dot - 1; frac == 0 || frac > 3 {
			return bareItem{}, p.errorf("decimal: want 1 to 3 fractional digits, got %d", frac)
		}
		return bareItem{kind: kindDecimal}, nil
	}
	// At most 15 digits: no overflow.
	var n int64
	for _, c := range []byte(p.in[start:p.off]) {
		n = n*10 + int64(c-'0')
	}
	if neg {
		n = -n
	}
	return bareItem{kind: kindInteger, num: n}, nil
}

// sfString parses a String (Section 4.2.5). The result shares memory with
// the input unless it contained escapes.
func (p *parser) sfString() (string, error) {
	p.off++ // '"'
	start := p.off
	var buf []byte // nil until the first escape
	for !p.eof() {
		c := p.in[p.off]
		switch {
		case c == '"':
			s := p.in[start:p.off]
			if buf != nil {
				s = string(append(buf, s...))
			}
			p.off++
			return s, nil
		case c == '\\':
			if p.off+1 >= len(p.in) || (p.in[p.off+1] != '"' && p.in[p.off+1] != '\\') {
				return "", p.errorf(`string: '\' must be followed by '"' or '\'`)
			}
			buf = append(buf, p.in[start:p.off]...)
			buf = append(buf, p.in[p.off+1])
			p.off += 2
			start = p.off
		case c < 0x20 || c > 0x7e:
			return "", p.errorf("string: character %q outside printable ASCII", c)
		default:
			p.off++
		}
	}
	return "", p.errorf("string: no closing '\"'")
}

// token parses a Token (Section 4.2.6); its first character, ALPHA or '*',
// has been checked.
func (p *parser) token() string {
	start := p.off
	p.off++
	for !p.eof() && isTokenChar(p.in[p.off]) {
		p.off++
	}
	return p.in[start:p.off]
}

// byteSequence parses a Byte Sequence (Section 4.2.7), keeping nothing.
func (p *parser) byteSequence() error {
	p.off++ // ':'
	start := p.off
	padded := false
	for !p.eof() {
		c := p.in[p.off]
		switch {
		case c == ':':
			b64 := p.in[start:p.off]
			p.off++
			// Section 4.2.7: parsers SHOULD NOT fail when '=' padding is
			// missing. Go's decoders take either fully padded or
			// unpadded input; a partly padded one is an error.
			enc := base64.RawStdEncoding
			if padded {
				enc = base64.StdEncoding
			}
			if _, err := enc.DecodeString(b64); err != nil {
				return p.errorf("byte sequence: %w", err)
			}
			return nil
		case c == '=':
			padded = true
		case !(isAlpha(c) || isDigit(c) || c == '+' || c == '/'):
			return p.errorf("byte sequence: character %q outside base64", c)
		}
		p.off++
	}
	return p.errorf("byte sequence: no closing ':'")
}

// boolean parses a Boolean (Section 4.2.8).
func (p *parser) boolean() (bareItem, error) {
	p.off++ // '?'
	if p.eof() || (p.in[p.off] != '0' && p.in[p.off] != '1') {
		return bareItem{}, p.errorf("boolean: want ?0 or ?1")
	}
	b := int64(p.in[p.off] - '0')
	p.off++
	return bareItem{kind: kindBoolean, num: b}, nil
}

// displayString parses a Display String (Section 4.2.10), keeping nothing
// but checking that the percent-decoded bytes are UTF-8.
func (p *parser) displayString() error {
	p.off++ // '%'
	if p.eof() || p.in[p.off] != '"' {
		return p.errorf(`display string: want '"' after '%%'`)
	}
	p.off++
	var buf []byte
	for !p.eof() {
		c := p.in[p.off]
		switch {
		case c == '"':
			p.off++
			if !utf8.Valid(buf) {
				return p.errorf("display string: not UTF-8")
			}
			return nil
		case c == '%':
			if p.off+2 >= len(p.in) {
				return p.errorf("display string: truncated escape")
			}
			hi, ok1 := unhex(p.in[p.off+1])
			lo, ok2 := unhex(p.in[p.off+2])
			if !ok1 || !ok2 {
				return p.errorf("display string: want two lower-case hex digits after '%%'")
			}
			buf = append(buf, hi<<4|lo)
			p.off += 3
		case c < 0x20 || c > 0x7e:
			return p.errorf("display string: character %q outside printable ASCII", c)
		default:
			buf = append(buf, c)
			p.off++
		}
	}
	return p.errorf("display string: no closing '\"'")
}

func isDigit(c byte) bool   { return '0' <= c && c <= '9' }
func isLCAlpha(c byte) bool { return 'a' <= c && c <= 'z' }
func isAlpha(c byte) bool   { return isLCAlpha(c) || ('A' <= c && c <= 'Z') }

// isTokenChar reports whether c may follow the first character of a Token:
// tchar (RFC 9110, Section 5.6.2), ':' or '/'.
func isTokenChar(c byte) bool {
	if isAlpha(c) || isDigit(c) {
		return true
	}
	switch c {
	case '!', '#', '$', '%', '&', '\'', '*', '+', '-', '.', '^', '_', '`', '|', '~', ':', '/':
		return true
	}
	return false
}

// unhex decodes a lower-case hex digit, as Display Strings require.
func unhex(c byte) (byte, bool) {
	switch {
	case isDigit(c):
		return c - '0', true
	case 'a' <= c && c <= 'f':
		return c - 'a' + 10, true
	}
	return 0, false
}
