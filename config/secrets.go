package config

import (
	"strconv"
	"strings"

	"github.com/edgerate/edge/rules"
	"go.yaml.in/yaml/v4"
)

// fileSecrets is what is known of a file's secrets while its problems are
// worded: their values, and the lines quoteLine shows only as [redacted]
// (those that continue a secret's value, see secretLines).
type fileSecrets struct {
	*rules.Secrets
	hidden map[int]bool
}

// newFileSecrets returns the secrets of a file: none until they are added,
// those of the environment (readEnv) and, once the file is parsed, those
// of its node tree (see treeSecrets); when it does not parse, those its
// lines show (lineSecrets).
func newFileSecrets(data []byte) fileSecrets {
	return fileSecrets{Secrets: &rules.Secrets{}, hidden: secretLines(data)}
}

// treeSecrets adds the secrets of a parsed file: every scalar (key or
// value) under a key that [rules.IsSecret] names, through aliases, and the
// password of any URL. An alias copies a value elsewhere, so the value is
// the secret, not the place.
func treeSecrets(s *rules.Secrets, root *yaml.Node) {
	type visit struct {
		n      *yaml.Node
		secret bool
	}
	// A node reached again through an alias holds the same scalars:
	// visiting each node once per kind keeps an alias bomb linear.
	seen := map[visit]bool{}
	var walk func(path string, n *yaml.Node, secret bool)
	walk = func(path string, n *yaml.Node, secret bool) {
		if n.Kind == yaml.AliasNode && n.Alias != nil {
			n = n.Alias
		}
		if seen[visit{n, secret}] {
			return
		}
		seen[visit{n, secret}] = true
		switch n.Kind {
		case yaml.ScalarNode:
			if secret {
				s.Add(path, n.Value)
			}
			addURLPassword(s, path, n.Value)
		case yaml.SequenceNode:
			for i, e := range n.Content {
				walk(path+"["+strconv.Itoa(i)+"]", e, secret)
			}
		case yaml.MappingNode:
			for i := 0; i+1 < len(n.Content); i += 2 {
				k, v := n.Content[i], n.Content[i+1]
				p := k.Value
				if path != "" {
					p = path + "." + k.Value
				}
				walk(p, k, secret)
				walk(p, v, secret || rules.IsSecret(p))
			}
		case yaml.DocumentNode:
			for _, e := range n.Content {
				walk(path, e, secret)
			}
		}
	}
	walk("", root, false)
}

// lineSecrets adds what the lines of a file that does not parse show of
// its secrets: the value after a secret's key on the key's line, and each
// line that continues it (see secretLines).
func lineSecrets(s fileSecrets, data []byte) {
	for i, line := range strings.Split(string(data), "\n") {
		n := i + 1
		if s.hidden[n] {
			s.Add("line "+strconv.Itoa(n), strings.Trim(line, " \t\r\"'"))
			continue
		}
		loc := secretOnLine.FindStringIndex(line)
		if loc == nil {
			continue
		}
		s.Add("line "+strconv.Itoa(n), valueAfterKey(line[loc[1]:], strings.ContainsAny(line[:loc[0]], "{[")))
	}
}

// valueAfterKey returns the scalar that rest, the text after a key's
// colon, begins with: without an anchor or tag, comment or quotes, and in
// a flow collection without what follows it.
func valueAfterKey(rest string, flow bool) string {
	v := strings.TrimSpace(rest)
	for len(v) > 0 && (v[0] == '&' || v[0] == '!') { // an anchor or a tag
		_, v, _ = strings.Cut(v, " ")
		v = strings.TrimSpace(v)
	}
	if v != "" && (v[0] == '"' || v[0] == '\'') {
		if end := strings.IndexByte(v[1:], v[0]); end >= 0 {
			return v[1 : end+1]
		}
		return v[1:] // unclosed: the rest of the line
	}
	if i := strings.Index(v, " #"); i >= 0 {
		v = v[:i]
	}
	if flow {
		if i := strings.IndexAny(v, ",]}"); i >= 0 {
			v = v[:i]
		}
	}
	if v = strings.TrimSpace(v); v == "|" || v == ">" || strings.HasPrefix(v, "|") || strings.HasPrefix(v, ">") {
		return "" // a block scalar: its lines follow
	}
	return v
}

// secretLines returns the numbers (1-based) of the lines that may hold a
// secret's value on their own: after a line with a secret's key, every
// line more indented than it (or blank), as a block scalar, a plain or
// quoted scalar continued or a value on the next line would be. It reads
// lines, not YAML, so that it holds for a file that does not parse; it
// may hide more than a value, never less.
func secretLines(data []byte) map[int]bool {
	hidden := map[int]bool{}
	indent := -1 // of the secret's key line; -1 outside a secret
	for i, line := range strings.Split(string(data), "\n") {
		text := strings.TrimLeft(line, " \t")
		depth := len(line) - len(text)
		if indent >= 0 && (strings.TrimSpace(text) == "" || depth > indent) {
			hidden[i+1] = true
			continue
		}
		indent = -1
		if secretOnLine.MatchString(line) {
			indent = depth
		}
	}
	return hidden
}
