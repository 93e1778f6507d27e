package config

import (
	"errors"
	"fmt"
	"regexp"
	"strconv"
	"strings"
	"unicode/utf8"

	"github.com/edgerate/edge/rules"
	"go.yaml.in/yaml/v4"

	"github.com/edgerate/edge/internal/yamlkind"
)

// readYAML parses data and returns its top-level mapping (empty for an
// empty file). Its errors are ones a person can act on: a syntax error
// gives the line and column the parser reports and quotes that line, and a
// file that is not a mapping says what it is. It adds the file's secrets
// to secrets: from its node tree, or from its lines when it does not parse.
func readYAML(data []byte, secrets fileSecrets) (map[string]any, error) {
	var doc yaml.Node
	if err := yaml.Unmarshal(data, &doc); err != nil {
		lineSecrets(secrets, data)
		return nil, yamlError(data, secrets, err)
	}
	treeSecrets(secrets.Secrets, &doc)
	settings := map[string]any{}
	if len(doc.Content) == 0 {
		return settings, nil // empty, or only comments
	}
	root := doc.Content[0]
	switch {
	case root.Kind == yaml.ScalarNode && root.Tag == "!!null":
		return settings, nil
	case root.Kind != yaml.MappingNode:
		return nil, fmt.Errorf("the file must be a mapping of settings; it is %s", yamlkind.Of(root))
	}
	if err := root.Decode(&settings); err != nil {
		return nil, yamlError(data, secrets, err) // a key given twice, say
	}
	return settings, nil
}

// yamlError rewrites the YAML parser's errors as
//
//	yaml: line 3, column 4: did not find expected '-' indicator (while ...)
//	    3 |    origin: x
//	      |    ^
func yamlError(data []byte, secrets fileSecrets, err error) error {
	var many *yaml.LoadErrors
	if errors.As(err, &many) {
		var out []error
		for _, le := range many.Errors {
			out = append(out, loadError(data, secrets, le))
		}
		return errors.Join(out...)
	}
	var le *yaml.LoadError
	if errors.As(err, &le) {
		return loadError(data, secrets, le)
	}
	return fmt.Errorf("yaml: %s", strings.TrimPrefix(err.Error(), "yaml: "))
}

func loadError(data []byte, secrets fileSecrets, le *yaml.LoadError) error {
	var b strings.Builder
	at := le.Mark
	if at.Line > 0 {
		fmt.Fprintf(&b, "yaml: line %d, column %d: %s", at.Line, at.Column, le.Message)
	} else {
		fmt.Fprintf(&b, "yaml: %s", le.Message)
	}
	if line := []rune(fileLine(data, at.Line)); at.Column >= 1 && at.Column <= len(line) && line[at.Column-1] == '\t' {
		b.WriteString(" (a tab: YAML indents with spaces)")
	}
	ctx := le.ContextMark
	if le.ContextMsg != "" && ctx.Line > 0 && ctx != at {
		fmt.Fprintf(&b, " (%s at line %d, column %d)", le.ContextMsg, ctx.Line, ctx.Column)
	}
	// Quote the line the problem is on. When that is blank, as at the end
	// of the file after an unclosed quote or bracket, quote the line where
	// the construct began, or else the last line with text before it.
	if line := fileLine(data, at.Line); strings.TrimSpace(line) != "" {
		quoteLine(&b, secrets, line, at.Line, at.Column)
	} else if line := fileLine(data, ctx.Line); le.ContextMsg != "" && strings.TrimSpace(line) != "" {
		quoteLine(&b, secrets, line, ctx.Line, ctx.Column)
	} else {
		for n := at.Line - 1; n > 0; n-- {
			if line := fileLine(data, n); strings.TrimSpace(line) != "" {
				quoteLine(&b, secrets, line, n, utf8.RuneCountInString(line)+1)
				break
			}
		}
	}
	return errors.New(b.String())
}

// fileLine returns line n (1-based) of data, or "" when it has none.
func fileLine(data []byte, n int) string {
	lines := strings.Split(string(data), "\n")
	if n < 1 || n > len(lines) {
		return ""
	}
	return strings.TrimSuffix(lines[n-1], "\r")
}

// secretOnLine finds a secret's key on a quoted line; what follows it is
// not shown.
var secretOnLine = regexp.MustCompile(`(?i)\b[a-z0-9_]*(password|token|secret)["']?\s*:`)

// quoteLine appends the file's line n, indented below the message, with a
// caret under column col (1-based, in characters). Control characters are
// shown as '?', a long line only around col, and as [redacted]: whatever
// follows a secret's key, a line that may continue a secret's value
// (secrets.hidden), and any secret's value. Secrets are replaced before
// the line is cut to fit, so that no part of one shows.
func quoteLine(b *strings.Builder, secrets fileSecrets, line string, n, col int) {
	runes := []rune(line)
	caret := min(max(col-1, 0), len(runes))
	if secrets.hidden[n] {
		text := strings.TrimLeft(line, " \t")
		line = line[:len(line)-len(text)] + string(rules.Redacted)
	} else if loc := secretOnLine.FindStringIndex(line); loc != nil {
		line = line[:loc[1]] + " " + string(rules.Redacted)
	}
	caret = utf8.RuneCountInString(secrets.Redact(string(runes[:caret])))
	runes = []rune(secrets.Redact(line))
	caret = min(caret, len(runes))
	const window = 60 // characters either side of the caret on a long line
	start, end := 0, len(runes)
	if len(runes) > 2*window {
		start, end = max(caret-window, 0), min(caret+window, len(runes))
	}
	var text, under strings.Builder
	if start > 0 {
		text.WriteString("...")
		under.WriteString("   ")
	}
	for i := start; i < end; i++ {
		r := runes[i]
		switch {
		case r == '\t':
		case r < 0x20 || r == 0x7f || r == utf8.RuneError:
			r = '?'
		}
		text.WriteRune(r)
		if i < caret {
			if r == '\t' {
				under.WriteByte('\t')
			} else {
				under.WriteByte(' ')
			}
		}
	}
	if end < len(runes) {
		text.WriteString("...")
	}
	num := strconv.Itoa(n)
	fmt.Fprintf(b, "\n    %s | %s\n    %s | %s^", num, text.String(), strings.Repeat(" ", len(num)), under.String())
}
