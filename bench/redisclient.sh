#!/usr/bin/env bash
# Compares go-redis v9 (what package cluster uses) with rueidis on edge's
# Redis round trips (exact mode's decide script; batched mode's flush
# pipeline, as EVALSHA of the flush script and as plain INCRBY/PEXPIRE/GET),
# at 1 and 64 goroutines, against a redis-server the benchmark starts on a
# free loopback port. Prints the medians over COUNT runs and the ratios
# rueidis ÷ go-redis computed from them; besides ops/s, p99 latency and
# allocations, the CPU time per op of the client process and of
# redis-server, which a machine shared with other work disturbs far less.
#
#   bash bench/redisclient.sh              # default -benchtime=2s -count=3
#   BENCHTIME=1s COUNT=5 bash bench/redisclient.sh
#   bash bench/redisclient.sh run1.txt run2.txt   # summarise saved outputs, pooled
set -euo pipefail
cd "$(dirname "$0")"
out=$(mktemp)
trap 'rm -f "$out"' EXIT
if [ $# -gt 0 ]; then
	cat "$@" > "$out"
else
	go test -run='^$' -bench='^BenchmarkCompareRedisClient$' -benchtime="${BENCHTIME:-2s}" -count="${COUNT:-3}" ./redisclient/ | tee "$out"
fi
echo
echo "Medians over all runs of each; ratio = rueidis ÷ go-redis (ops/s: higher is better; the rest: lower is better):"
awk '
/^BenchmarkCompareRedisClient\// {
	split($1, p, "/"); cl = p[4]; sub(/-[0-9]+$/, "", cl)
	row = p[2] SUBSEP p[3]; k = row SUBSEP cl
	if (!(row in seen)) { seen[row] = 1; order[++n] = row }
	for (i = 2; i < NF; i++) {
		u = $(i+1)
		if (u == "ops/s" || u == "p99-µs" || u == "cpu-µs/op" || u == "redis-cpu-µs/op" || u == "allocs/op")
			v[k, u, ++c[k, u]] = $i
	}
}
# median of the values of k under unit u (insertion sort: mawk has no asort)
function med(k, u,    m, i, j, t, a) {
	m = c[k, u]
	if (!m) return 0
	for (i = 1; i <= m; i++) a[i] = v[k, u, i] + 0
	for (i = 2; i <= m; i++) { t = a[i]; for (j = i - 1; j >= 1 && a[j] > t; j--) a[j+1] = a[j]; a[j+1] = t }
	return (m % 2) ? a[(m+1)/2] : (a[m/2] + a[m/2+1]) / 2
}
# one metric for both clients and their ratio
function cell(row, u, fmt,    g, r) {
	g = med(row SUBSEP "go-redis", u); r = med(row SUBSEP "rueidis", u)
	return sprintf(" | " fmt " " fmt " %6s", g, r, g ? sprintf("%.2fx", r / g) : "-")
}
function header(ng, a, b, c,    i) {
	printf "  %-10s %4s | %-26s | %-26s", "", "", a, b
	if (ng > 2) printf " | %-26s", c
	printf "\n  %-10s %4s", "workload", "conc"
	for (i = 0; i < ng; i++) printf " | %9s %9s %6s", "go-redis", "rueidis", "ratio"
	printf "\n"
}
END {
	header(3, "ops/s", "p99 µs/op", "allocs/op")
	for (i = 1; i <= n; i++) {
		split(order[i], w, SUBSEP)
		printf "  %-10s %4s%s%s%s\n", w[1], w[2], cell(order[i], "ops/s", "%9.0f"),
			cell(order[i], "p99-µs", "%9.0f"), cell(order[i], "allocs/op", "%9.0f")
	}
	print ""
	header(2, "client CPU µs/op", "redis-server CPU µs/op")
	for (i = 1; i <= n; i++) {
		split(order[i], w, SUBSEP)
		printf "  %-10s %4s%s%s\n", w[1], w[2], cell(order[i], "cpu-µs/op", "%9.1f"),
			cell(order[i], "redis-cpu-µs/op", "%9.1f")
	}
}' "$out"
