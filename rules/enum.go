package rules

import (
	"strconv"
	"strings"
)

// spelling is an enumeration's config spellings, indexed by value; value 0
// is the default an empty string selects. It gives each enum its String
// method and its parsing, with one error message shape for all of them.
type spelling[T ~uint8] struct {
	typ   string   // the Go type's name, for out-of-range values
	names []string // names[v] spells value v
}

// name returns the config spelling of v.
func (s spelling[T]) name(v T) string {
	if int(v) < len(s.names) {
		return s.names[v]
	}
	return s.typ + "(" + strconv.Itoa(int(v)) + ")"
}

// parse returns the value raw spells ("" is the default). An unknown
// spelling is recorded at path, listing the choices, and gives the default.
func (s spelling[T]) parse(p *problems, path, raw string) T {
	if raw == "" {
		return 0
	}
	for v, n := range s.names {
		if raw == n {
			return T(v)
		}
	}
	choices := strings.Join(s.names[:len(s.names)-1], ", ") + " or " + s.names[len(s.names)-1]
	p.add(path, "must be %s, got %q", choices, raw)
	return 0
}

var (
	actionSpelling  = spelling[Action]{"Action", []string{"block", "log"}}
	headerSpelling  = spelling[HeaderMode]{"HeaderMode", []string{"blocked", "always", "none"}}
	keyKindSpelling = spelling[KeyKind]{"KeyKind", []string{"ip", "header", "path", "host", "ja4", "cookie", "query", "jwt"}}
	storeSpelling   = spelling[StoreKind]{"StoreKind", []string{"local", "redis"}}
	syncSpelling    = spelling[SyncMode]{"SyncMode", []string{"exact", "batched", "share"}}
	splitSpelling   = spelling[SplitMode]{"SplitMode", []string{"even", "poisson"}}
	failureSpelling = spelling[FailureMode]{"FailureMode", []string{"local", "open", "closed"}}
)

// parseAt returns the value parse reads from raw, recording its error, if
// any, at path: for the enumerations package algorithm spells.
func parseAt[T any](p *problems, path, raw string, parse func(string) (T, error)) T {
	v, err := parse(raw)
	if err != nil {
		p.add(path, "%v", err)
	}
	return v
}
