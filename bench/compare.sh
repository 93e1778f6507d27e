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
	split($1, p, "/"); size = p[4]; sub(/-[0-9]+$/, "", size)
	for (i = 2; i <= NF; i++) if ($(i+1) == "decisions/s") { tp[p[2] "/" p[3] "/" size] += $i; n[p[2] "/" p[3] "/" size]++ }
	sizes[size] = 1
}
/^BenchmarkCompareMemory\// {
	split($1, p, "/"); name = p[2]; sub(/-[0-9]+$/, "", name)
	for (i = 2; i <= NF; i++) if ($(i+1) == "bytes/key") { mem[name] += $i; m[name]++ }
}
function avg(k) { return n[k] ? tp[k] / n[k] : 0 }
END {
	for (size in sizes) for (j = 1; j <= 2; j++) {
		md = (j == 1) ? "1thread" : "parallel"
		e = avg("edge/" md "/" size); eh = avg("edge-hash/" md "/" size)
		h = avg("httprate/" md "/" size); x = avg("xrate/" md "/" size)
		printf "  %5s keys, %-8s  edge %6.2fM/s = %5.2fx httprate, %5.2fx xrate   (hashing included: %6.2fM/s = %5.2fx httprate, %5.2fx xrate)\n", size, md, e/1e6, e/h, e/x, eh/1e6, eh/h, eh/x
	}
	e = mem["edge"]/m["edge"]; h = mem["httprate"]/m["httprate"]; x = mem["xrate"]/m["xrate"]
	printf "  memory at 1M keys: edge %.1f B/key = %.2fx httprate (%.1f), %.2fx xrate (%.1f)\n", e, e/h, h, e/x, x
}' "$out"
