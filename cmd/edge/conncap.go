package main

import (
	"log/slog"

	"github.com/edgerate/edge/rules"
)

// connectionCap returns the public listener's connection cap: max_connections,
// or by default the smaller of 10,000 and 90% of the open-file limit. It warns
// when a configured cap is above that limit: accepting would then fail with
// "too many open files" before the cap is reached.
func connectionCap(t *rules.Table, log *slog.Logger) int {
	limit := openFileLimit()
	if t.MaxConnections == 0 {
		return rules.DefaultMaxConnections(limit)
	}
	if limit != 0 && uint64(t.MaxConnections) >= limit {
		log.Warn("max_connections is not below the open-file limit; raise the limit (ulimit -n, LimitNOFILE=) or lower max_connections",
			"max_connections", t.MaxConnections, "open_file_limit", limit)
	}
	return t.MaxConnections
}
