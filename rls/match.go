package rls

import (
	"strings"

	rlspb "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
)

// Match returns the entry of d that a request descriptor's entries select,
// as Lyft documents it: at each level the entry with the request entry's
// key and value if there is one, else the first wildcard entry of that key
// whose value pattern matches, else the entry of the key alone; the
// descriptor's limit is that of the entry its last request entry reaches.
// It returns nil when the path stops before the last request entry, and
// when the entry reached has no rate_limit.
//
// A wildcard's '*' matches any run of bytes, empty included, anywhere in
// the value (Lyft's loader takes '*' in the middle too). Lyft matches a
// wildcard against key and value joined by '_'; edge compares the key
// first, so that key "a_b" with value "c" cannot match key "a".
func (d *Domain) Match(entries []*rlspb.RateLimitDescriptor_Entry) *Descriptor {
	lv := &d.root
	for i, en := range entries {
		e := lv.find(en.GetKey(), en.GetValue())
		if e == nil {
			return nil
		}
		if i == len(entries)-1 {
			if e.Limit == nil {
				return nil
			}
			return e
		}
		lv = &e.children
	}
	return nil
}

func (lv *level) find(key, value string) *Descriptor {
	if e := lv.exact[key][value]; e != nil && e.parts == nil {
		return e
	}
	for _, e := range lv.wild {
		if e.Key == key && wildcardMatch(e.parts, value) {
			return e
		}
	}
	return lv.keyOnly[key]
}

// wildcardMatch reports whether value matches the pattern split at '*'
// into parts (at least two): it starts with the first, ends with the last,
// and holds the others in order between them, without overlap.
func wildcardMatch(parts []string, value string) bool {
	first, last := parts[0], parts[len(parts)-1]
	if len(value) < len(first)+len(last) || !strings.HasPrefix(value, first) || !strings.HasSuffix(value, last) {
		return false
	}
	rest := value[len(first) : len(value)-len(last)]
	for _, p := range parts[1 : len(parts)-1] {
		i := strings.Index(rest, p)
		if i < 0 {
			return false
		}
		rest = rest[i+len(p):]
	}
	return true
}
