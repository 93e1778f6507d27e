#!/usr/bin/env bash
# bench/h2.sh: edge serving HTTP/2 over TLS beside nginx (listen ... ssl
# http2), with the same ECDSA P-256 certificate, TLS 1.3 and X25519 on both,
# h2load (Debian package nghttp2-client) as the load generator: CPU per
# refused and per forwarded request with 100 streams per connection.
#
#   bash bench/h2.sh              # 5 rounds of 8 s per variant, about 4 minutes
#   QUICK=1 bash bench/h2.sh      # 3 rounds of 3 s, about 1 minute
#
# Variants, each on nginx and on edge:
#   *-refuse  a rule that refuses all but the first request with 429 (nginx
#             limit_req at 1 r/m, edge 1 an hour: bench/edge/h2-refuse.yaml)
#   *-fwd     a rule that never refuses, every request forwarded over
#             HTTP/1.1 to the origin (nginx answering from memory,
#             bench/conf/nginx-origin.conf; bench/edge/h2-forward.yaml)
# and go-refuse: bench/fixed429 over TLS, Go's own HTTP/2 server answering
# every request with edge's 429 and deciding nothing: the floor of any
# server on Go's HTTP/2 (edge-refuse ÷ go-refuse is edge's own share); and
# go-fwd: bench/bareproxy over TLS, Go's HTTP/2 server in front of
# httputil.ReverseProxy, limiting nothing: the floor of a Go forward.
#
# The server under test runs pinned to one core (PROXY_CPU, default 0) with
# one worker (GOMAXPROCS=1 for edge); h2load (one thread, CONNS connections
# of STREAMS streams each) and the origin share the other (LOAD_CPU, default
# 1). CPU is utime + stime of the server's processes (all threads) from
# /proc/PID/stat, read around h2load's measured run (after a warm-up run on
# the same server), divided by the requests h2load completed. Variants run
# in rounds, each in a rotated order; each edge/nginx ratio is computed
# within a round and reported as the median over rounds with the range.
#
# It makes the certificate with openssl in a temporary directory, copies
# bench/conf/nginx-h2.conf, nginx-origin.conf and bench/edge/h2-*.yaml
# beside it, builds edge from this checkout, listens only on 127.0.0.1:
# 28080, 28186-28189, 28282-28285 (28284: go-refuse, 28285: go-fwd), 29186, 29188, and stops every process it
# started by its PID when it exits. Every h2load run is bounded by timeout(1).
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

VARIANTS="nginx-refuse edge-refuse go-refuse nginx-fwd edge-fwd go-fwd"
declare -A PORT=([nginx-refuse]=28282 [nginx-fwd]=28283 [edge-refuse]=28186 [edge-fwd]=28188 [go-refuse]=28284 [go-fwd]=28285)
declare -A EDGECONF=([edge-refuse]=h2-refuse [edge-fwd]=h2-forward)
declare -A DESC=(
	[nginx-refuse]="nginx limit_req refusing (429), HTTP/2 over TLS"
	[edge-refuse]="edge, 1 rule refusing (429), HTTP/2 over TLS"
	[nginx-fwd]="nginx limit_req forwarding, HTTP/2 over TLS"
	[edge-fwd]="edge, 1 rule forwarding, HTTP/2 over TLS"
	[go-refuse]="Go's net/http HTTP/2 server, fixed 429, no decision (bench/fixed429 -cert)"
	[go-fwd]="Go's net/http HTTP/2 server and httputil.ReverseProxy, no limit (bench/bareproxy -cert)"
)

log() { printf '%s\n' "$*" >&2; }
die() { log "h2.sh: $*"; exit 1; }

tmp=$(mktemp -d /tmp/edge-h2-bench.XXXXXX)
STARTED=()
declare -A PIDOF=()
cleanup() {
	local rc=$? pid i alive
	trap - EXIT INT TERM
	for pid in "${STARTED[@]}"; do kill -TERM "$pid" 2>/dev/null || true; done
	for ((i = 0; i < 50; i++)); do
		alive=0
		for pid in "${STARTED[@]}"; do kill -0 "$pid" 2>/dev/null && alive=1; done
		((alive)) || break
		sleep 0.1
	done
	for pid in "${STARTED[@]}"; do kill -KILL "$pid" 2>/dev/null || true; done
	wait 2>/dev/null || true
	rm -rf "$tmp"
	exit "$rc"
}
trap cleanup EXIT
trap 'exit 130' INT
trap 'exit 143' TERM

start() {
	local name=$1 cpu=$2
	shift 2
	taskset -c "$cpu" "$@" >"$tmp/$name.log" 2>&1 &
	STARTED+=("$!")
	PIDOF[$name]=$!
}

wait_up() {
	local name=$1 url=$2 i
	for ((i = 0; i < 100; i++)); do
		curl -sk -o /dev/null "$url" && return 0
		kill -0 "${PIDOF[$name]}" 2>/dev/null || break
		sleep 0.1
	done
	cat "$tmp/$name.log" >&2 || true
	die "$name did not answer at $url"
}

for bin in nginx openssl taskset curl timeout go h2load; do
	command -v "$bin" >/dev/null || die "$bin is required (apt-get install nginx openssl nghttp2-client)"
done
((PROXY_CPU != LOAD_CPU)) || die "PROXY_CPU and LOAD_CPU must differ"

openssl req -x509 -newkey ec -pkeyopt ec_paramgen_curve:P-256 -nodes -days 2 -subj "/CN=$HOST" \
	-addext "subjectAltName=DNS:$HOST,IP:127.0.0.1" -keyout "$tmp/bench.key" -out "$tmp/bench.pem" 2>"$tmp/openssl.log" ||
	die "openssl could not make the certificate"
(cd "$repo" && go build -o "$tmp/edge" ./cmd/edge) || die "building edge failed"
(cd "$here" && go build -o "$tmp/fixed429" ./fixed429 && go build -o "$tmp/bareproxy" ./bareproxy) ||
	die "building bench/fixed429 or bench/bareproxy failed"
cp "$here/conf/nginx-h2.conf" "$here/conf/nginx-origin.conf" "$here/edge/h2-refuse.yaml" "$here/edge/h2-forward.yaml" "$tmp/"

mkdir -p "$tmp/nginx-origin/logs" "$tmp/nginx-h2/logs"
start nginx-origin "$LOAD_CPU" nginx -p "$tmp/nginx-origin/" -e "$tmp/nginx-origin/logs/error.log" \
	-c "$tmp/nginx-origin.conf" -g "daemon off; pid $tmp/nginx-origin/nginx.pid;"
wait_up nginx-origin "http://127.0.0.1:28080$REQ_PATH"
start nginx "$PROXY_CPU" nginx -p "$tmp/nginx-h2/" -e "$tmp/nginx-h2/logs/error.log" \
	-c "$tmp/nginx-h2.conf" -g "daemon off; pid $tmp/nginx-h2/nginx.pid;"
PIDOF[nginx-refuse]=${PIDOF[nginx]} PIDOF[nginx-fwd]=${PIDOF[nginx]}
wait_up nginx "https://127.0.0.1:28283$REQ_PATH"
for v in edge-refuse edge-fwd; do
	start "$v" "$PROXY_CPU" env -C "$tmp" GOMAXPROCS=1 "$tmp/edge" -config "$tmp/${EDGECONF[$v]}.yaml"
	wait_up "$v" "https://127.0.0.1:${PORT[$v]}$REQ_PATH"
done
start go-refuse "$PROXY_CPU" env GOMAXPROCS=1 "$tmp/fixed429" -listen "127.0.0.1:${PORT[go-refuse]}" \
	-cert "$tmp/bench.pem" -key "$tmp/bench.key"
wait_up go-refuse "https://127.0.0.1:${PORT[go-refuse]}$REQ_PATH"
start go-fwd "$PROXY_CPU" env GOMAXPROCS=1 "$tmp/bareproxy" -listen "127.0.0.1:${PORT[go-fwd]}" \
	-origin http://127.0.0.1:28080 -cert "$tmp/bench.pem" -key "$tmp/bench.key"
wait_up go-fwd "https://127.0.0.1:${PORT[go-fwd]}$REQ_PATH"

# pids V: the server's processes (nginx: master and its workers).
pids() {
	local p=${PIDOF[$1]}
	echo "$p" $(cat /proc/"$p"/task/*/children 2>/dev/null)
}
# ticks PIDS...: utime + stime of PIDS, in clock ticks.
ticks() {
	local t=0 p
	for p in "$@"; do
		t=$((t + $(awk '{print $14 + $15}' /proc/"$p"/stat)))
	done
	echo "$t"
}
HZ=$(getconf CLK_TCK)

# run V SECONDS: h2load against V for SECONDS; prints "requests cpu_us status".
run() {
	local v=$1 secs=$2 out before after done
	local ps
	ps=$(pids "$v")
	before=$(ticks $ps)
	out=$(timeout $((secs + 30)) taskset -c "$LOAD_CPU" h2load -t 1 -c "$CONNS" -m "$STREAMS" -D "$secs" \
		"https://127.0.0.1:${PORT[$v]}$REQ_PATH" 2>&1) || die "h2load against $v failed: $out"
	after=$(ticks $ps)
	done=$(awk '/^requests:/ {print $6}' <<<"$out")
	codes=$(awk '/^status codes:/ {print $3, $5, $7, $9}' <<<"$out")
	grep -q "^Application protocol: h2" <<<"$out" || die "$v: h2load did not negotiate h2: $out"
	echo "$done $(((after - before) * 1000000 / HZ)) $codes"
}

log "rounds: $ROUNDS x ${DURATION}s per variant, $CONNS connections x $STREAMS streams, server on CPU $PROXY_CPU"
declare -A PER=()
printf '%-14s %5s %10s %10s %12s  %s\n' variant round requests req/s cpu_us/req "status codes (2xx 3xx 4xx 5xx)"
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
		printf '%-14s %5d %10d %10d %12s  %s\n' "$v" "$r" "$reqs" $((reqs / DURATION)) "$per" "$codes"
	done
done

echo
for v in $VARIANTS; do echo "$v: ${DESC[$v]}"; done
echo
# ratio A B LABEL: A's CPU per request over B's, within each round.
ratio() {
	local a=$1 b=$2 label=$3 r ratios=() sorted
	for ((r = 0; r < ROUNDS; r++)); do
		ratios+=("$(awk -v e="${PER[$a,$r]}" -v g="${PER[$b,$r]}" 'BEGIN {printf "%.2f", e / g}')")
	done
	sorted=($(printf '%s\n' "${ratios[@]}" | sort -n))
	printf '%-41s median %s (range %s..%s; rounds: %s)\n' "$label" \
		"${sorted[$((ROUNDS / 2))]}" "${sorted[0]}" "${sorted[$((ROUNDS - 1))]}" "${ratios[*]}"
}
ratio edge-refuse nginx-refuse "edge/nginx CPU per request, refuse:"
ratio edge-fwd nginx-fwd "edge/nginx CPU per request, fwd:"
ratio go-refuse nginx-refuse "Go's HTTP/2 server/nginx, refuse:"
ratio edge-refuse go-refuse "edge/Go's HTTP/2 server, refuse:"
ratio go-fwd nginx-fwd "Go's HTTP/2 server+ReverseProxy/nginx, fwd:"
ratio edge-fwd go-fwd "edge/Go's HTTP/2 server+ReverseProxy, fwd:"
