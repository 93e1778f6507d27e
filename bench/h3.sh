#!/usr/bin/env bash
# bench/h3.sh: what a refused request costs edge over HTTP/3 beside one over
# HTTP/2 over TLS, in the same run, on the same edge: one process serving
# both (tls.http3) with a rule that refuses all but the first request (429),
# bench/edge/h3-refuse.yaml. The load generator is bench/h3load (Go:
# quic-go's HTTP/3 client, Go's HTTP/2 client), CONNS connections of
# STREAMS requests in flight each, the same for both protocols.
#
#   bash bench/h3.sh              # 5 rounds of 8 s per variant, about 2 minutes
#   QUICK=1 bash bench/h3.sh      # 3 rounds of 3 s, under a minute
#
# edge runs pinned to one core (PROXY_CPU, default 0) with GOMAXPROCS=1; the
# load generator to the other (LOAD_CPU, default 1). CPU is utime + stime of
# edge (all threads) from /proc/PID/stat, read around the measured run
# (after a warm-up run), divided by the requests completed. Variants run in
# rounds, in a rotated order; the h3/h2 ratio is computed within a round
# and reported as the median over rounds with the range.
#
# It makes an ECDSA P-256 certificate with openssl in a temporary
# directory, builds edge and h3load from this checkout, listens only on
# 127.0.0.1: 28196 (TCP and UDP), 28197, 29196, and stops every process it
# started by its PID when it exits. Every load run is bounded by timeout(1).
set -euo pipefail

here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
repo=$(dirname "$here")

if [[ ${QUICK:-0} == 1 ]]; then
	ROUNDS=${ROUNDS:-3} DURATION=${DURATION:-3} WARMUP=${WARMUP:-1}
else
	ROUNDS=${ROUNDS:-5} DURATION=${DURATION:-8} WARMUP=${WARMUP:-2}
fi
CONNS=${CONNS:-4}
STREAMS=${STREAMS:-100}
PROXY_CPU=${PROXY_CPU:-0}
LOAD_CPU=${LOAD_CPU:-1}
REQ_PATH=/api/v1/items
HOST=bench.example
PORT=28196
VARIANTS="h2-refuse h3-refuse"

log() { printf '%s\n' "$*" >&2; }
die() { log "h3.sh: $*"; exit 1; }

tmp=$(mktemp -d /tmp/edge-h3-bench.XXXXXX)
EDGE_PID=
cleanup() {
	local rc=$? i
	trap - EXIT INT TERM
	if [[ -n $EDGE_PID ]]; then
		kill -TERM "$EDGE_PID" 2>/dev/null || true
		for ((i = 0; i < 50; i++)); do
			kill -0 "$EDGE_PID" 2>/dev/null || break
			sleep 0.1
		done
		kill -KILL "$EDGE_PID" 2>/dev/null || true
	fi
	wait 2>/dev/null || true
	rm -rf "$tmp"
	exit "$rc"
}
trap cleanup EXIT
trap 'exit 130' INT
trap 'exit 143' TERM

for bin in openssl taskset curl timeout go; do
	command -v "$bin" >/dev/null || die "$bin is required"
done
((PROXY_CPU != LOAD_CPU)) || die "PROXY_CPU and LOAD_CPU must differ"

openssl req -x509 -newkey ec -pkeyopt ec_paramgen_curve:P-256 -nodes -days 2 -subj "/CN=$HOST" \
	-addext "subjectAltName=DNS:$HOST,IP:127.0.0.1" -keyout "$tmp/bench.key" -out "$tmp/bench.pem" 2>"$tmp/openssl.log" ||
	die "openssl could not make the certificate"
(cd "$repo" && go build -o "$tmp/edge" ./cmd/edge) || die "building edge failed"
(cd "$here" && go build -o "$tmp/h3load" ./h3load) || die "building h3load failed"
cp "$here/edge/h3-refuse.yaml" "$tmp/"

taskset -c "$PROXY_CPU" env -C "$tmp" GOMAXPROCS=1 "$tmp/edge" -config "$tmp/h3-refuse.yaml" >"$tmp/edge.log" 2>&1 &
EDGE_PID=$!
for ((i = 0; i < 100; i++)); do
	curl -sk -o /dev/null "https://127.0.0.1:$PORT$REQ_PATH" && break
	kill -0 "$EDGE_PID" 2>/dev/null || { cat "$tmp/edge.log" >&2; die "edge did not start"; }
	sleep 0.1
done

ticks() { awk '{print $14 + $15}' /proc/"$EDGE_PID"/stat; }
HZ=$(getconf CLK_TCK)

# run V SECONDS: h3load against edge for SECONDS; prints "requests cpu_us codes".
run() {
	local v=$1 secs=$2 out before after
	before=$(ticks)
	out=$(timeout $((secs + 30)) taskset -c "$LOAD_CPU" "$tmp/h3load" -proto "${v%%-*}" -addr "127.0.0.1:$PORT" \
		-host "$HOST" -c "$CONNS" -m "$STREAMS" -d "${secs}s" "$REQ_PATH" 2>&1) || die "h3load ($v) failed: $out"
	after=$(ticks)
	echo "$(awk '/^requests/ {print $2}' <<<"$out") $(((after - before) * 1000000 / HZ)) $(awk '/^status/ {print $2, $3, $4, $5}' <<<"$out")"
}

log "rounds: $ROUNDS x ${DURATION}s per variant, $CONNS connections x $STREAMS requests in flight, edge on CPU $PROXY_CPU"
declare -A PER=()
printf '%-10s %5s %10s %10s %12s  %s\n' variant round requests req/s cpu_us/req "status codes (2xx 3xx 4xx 5xx)"
for ((r = 0; r < ROUNDS; r++)); do
	order=($VARIANTS)
	n=${#order[@]}
	for ((i = 0; i < n; i++)); do
		v=${order[$(((i + r) % n))]}
		run "$v" "$WARMUP" >/dev/null
		read -r reqs cpu codes <<<"$(run "$v" "$DURATION")"
		((reqs > 0)) || die "$v: no request completed"
		per=$(awk -v c="$cpu" -v n="$reqs" 'BEGIN {printf "%.2f", c / n}')
		PER[$v,$r]=$per
		printf '%-10s %5d %10d %10d %12s  %s\n' "$v" "$r" "$reqs" $((reqs / DURATION)) "$per" "$codes"
	done
done

echo
echo "h2-refuse: edge, 1 rule refusing (429), HTTP/2 over TLS (Go's client)"
echo "h3-refuse: the same edge, the same rule, HTTP/3 over QUIC (quic-go's client)"
echo
ratios=()
for ((r = 0; r < ROUNDS; r++)); do
	ratios+=("$(awk -v a="${PER[h3-refuse,$r]}" -v b="${PER[h2-refuse,$r]}" 'BEGIN {printf "%.2f", a / b}')")
done
sorted=($(printf '%s\n' "${ratios[@]}" | sort -n))
printf 'HTTP/3 / HTTP/2 CPU per refused request: median %s (range %s..%s; rounds: %s)\n' \
	"${sorted[$((ROUNDS / 2))]}" "${sorted[0]}" "${sorted[$((ROUNDS - 1))]}" "${ratios[*]}"
