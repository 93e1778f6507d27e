// Package yamlkind names what a YAML node holds, in the words of edge's
// configuration errors ("must be a mapping, got a list"), for the loaders
// of edge's own file and of Lyft's ratelimit files.
package yamlkind

import "go.yaml.in/yaml/v4"

// Of names what n holds: "a list", "a mapping", "an alias", "null",
// "a number", "true or false" or "a string".
func Of(n *yaml.Node) string {
	switch {
	case n.Kind == yaml.SequenceNode:
		return "a list"
	case n.Kind == yaml.MappingNode:
		return "a mapping"
	case n.Kind == yaml.AliasNode:
		return "an alias"
	case n.Tag == "!!null":
		return "null"
	case n.Tag == "!!int" || n.Tag == "!!float":
		return "a number"
	case n.Tag == "!!bool":
		return "true or false"
	}
	return "a string"
}
