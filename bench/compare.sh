#!/usr/bin/env bash
# Compares edge's counter store with go-chi/httprate's local counter and a
# mutex-guarded map of golang.org/x/time/rate limiters, side by side in one
# `go test -bench` run, and prints the ratios computed from that run.
#
#   bash bench/compare.sh            # default -benchtime=1s -count=1
#   BENCHTIME=3s COUNT=3 bash bench/compare.sh
set -euo pipefail
cd "$(dirname "$0")"
out=$(mktemp)
trap 'rm -f "$out"' EXIT
go test -run='^$' -bench='^BenchmarkCompare' -benchtime="${BENCHTIME:-1s}" -count="${COUNT:-1}" ./window/ | tee "$out"
echo
echo "Ratios (edge ÷ other; throughput higher is better, memory lower is better):"
awk '
/^BenchmarkCompareThroughput\// {
	split($1, p, "/"); name = p[2]; mode = p[3]; sub(/-[0-9]+$/, "", mode)
	for (i = 2; i <= NF; i++) if ($(i+1) == "decisions/s") { tp[name "/" mode] += $i; n[name "/" mode]++ }
}
/^BenchmarkCompareMemory\// {
	split($1, p, "/"); name = p[2]; sub(/-[0-9]+$/, "", name)
	for (i = 2; i <= NF; i++) if ($(i+1) == "bytes/key") { mem[name] += $i; m[name]++ }
}
END {
	for (mode in modes) {}
	split("1thread parallel", ms, " ")
	for (j = 1; j <= 2; j++) {
		md = ms[j]
		e = tp["edge/" md] / n["edge/" md]; eh = tp["edge-hash/" md] / n["edge-hash/" md]
		h = tp["httprate/" md] / n["httprate/" md]; x = tp["xrate/" md] / n["xrate/" md]
		printf "  throughput %-8s  edge %.2fM/s (%.2fx httprate, %.2fx xrate)   edge incl. hashing %.2fM/s (%.2fx httprate, %.2fx xrate)\n", md, e/1e6, e/h, e/x, eh/1e6, eh/h, eh/x
	}
	e = mem["edge"]/m["edge"]; h = mem["httprate"]/m["httprate"]; x = mem["xrate"]/m["xrate"]
	printf "  memory: edge %.1f B/key = %.2fx httprate (%.1f), %.2fx xrate (%.1f)\n", e, e/h, h, e/x, x
}' "$out"
