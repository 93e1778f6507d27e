// Package configs holds edge's example configurations. It is a Go package
// only so that the default configuration, edge.yaml, can be embedded in the
// binary: go:embed cannot reach files outside the embedding package's tree.
package configs

import _ "embed"

// Default is edge.yaml, the configuration edge runs when given none.
//
//go:embed edge.yaml
var Default []byte
