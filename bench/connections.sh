#!/usr/bin/env bash
# bench/connections.sh: the CPU a refused connection costs, edge's
# connections.rate_per_client beside HAProxy's `tcp-request connection
# reject` on the same flood, and edge's refused TLS connection beside its
# refused plain one, measured side by side on this machine, in one command.
#
#   bash bench/connections.sh              # 5 rounds of 5 s per variant, about 2 minutes
#   ROUNDS=3 DURATION=3 bash bench/connections.sh
#
# The flood: bench/connflood, CONNS (32) workers opening connections in a
# loop from one source address, 127.0.0.1, each connection closed by the
# client with a reset once the server has closed it (or answered it). The
# source is over its limit (10 connections per 10 s on both servers) from
# the warm-up on, so nearly every connection is refused at accept:
#
#   haproxy   HAProxy, one thread: a stick table of conn_rate(10s) by source,
#             tcp-request connection reject if { sc_conn_rate(0) gt 10 }
#   edge      edge, GOMAXPROCS=1: connections.rate_per_client {limit: 10,
#             period: 10s}, the flood sending an HTTP request
#   edge-tls  the same edge's TLS listener, the flood starting a TLS handshake
#             (a refused one gets no ServerHello)
#   go-floor  bench/acceptclose, GOMAXPROCS=1: a Go server that accepts each
#             connection and closes it with a reset, nothing else: the floor
#             of what a Go server pays per refused connection
#
# The servers run pinned to one core (PROXY_CPU, default 0), the flood on
# the other (LOAD_CPU, default 1). A variant's CPU is its server process's
# user and system time (/proc/PID/stat) over the measurement, divided by
# the connections the flood made; the variants are measured in rounds, each
# round in a rotated order, and each ratio is computed pair by pair within
# a round, then reported as the median over rounds (and the range).
#
# It installs haproxy and openssl with apt-get when missing, builds edge and
# bench/connflood with `go build` from this checkout, listens only on
# 127.0.0.1:28190-28199, and stops every process it started by its PID when
# it exits. It stops nothing else.
set -euo pipefail

here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
repo=$(dirname "$here")
ROUNDS=${ROUNDS:-5} DURATION=${DURATION:-5} WARMUP=${WARMUP:-1}
CONNS=${CONNS:-32} PROXY_CPU=${PROXY_CPU:-0} LOAD_CPU=${LOAD_CPU:-1}

for pkg in haproxy openssl; do
	if ! command -v "$pkg" >/dev/null 2>&1 && [ ! -x "/usr/sbin/$pkg" ]; then
		echo "== installing $pkg"
		export DEBIAN_FRONTEND=noninteractive
		apt-get update -qq && apt-get install -y -qq --no-install-recommends "$pkg" >/dev/null
	fi
done
HAPROXY=$(command -v haproxy || echo /usr/sbin/haproxy)

tmp=$(mktemp -d)
pids=()
cleanup() {
	for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done
	for p in "${pids[@]}"; do wait "$p" 2>/dev/null || true; done
	if [ -n "${KEEP_LOGS:-}" ]; then cp "$tmp"/*.log "$KEEP_LOGS"/ 2>/dev/null || true; fi
	rm -rf "$tmp"
}
trap cleanup EXIT

echo "== building edge and bench/connflood"
(cd "$repo" && go build -o "$tmp/edge" ./cmd/edge)
(cd "$here" && go build -o "$tmp/connflood" ./connflood && go build -o "$tmp/acceptclose" ./acceptclose)
openssl req -x509 -newkey ec -pkeyopt ec_paramgen_curve:P-256 -nodes -days 1 -subj /CN=bench.example \
	-addext subjectAltName=DNS:bench.example -keyout "$tmp/key.pem" -out "$tmp/cert.pem" 2>/dev/null

cat >"$tmp/edge.yaml" <<YAML
listen: "127.0.0.1:28191"
admin_listen: "127.0.0.1:28199"
log: {level: error}
tls:
  listen: "127.0.0.1:28192"
  certificates: [{cert_file: cert.pem, key_file: key.pem}]
connections:
  rate_per_client: {limit: 10, period: 10s}
domains:
  - {name: bench, hosts: ["*"], respond: {body: "ok"}}
YAML
cat >"$tmp/haproxy.cfg" <<CFG
global
    nbthread 1
    maxconn 8000
defaults
    mode tcp
    timeout connect 5s
    timeout client 10s
    timeout server 10s
frontend flood
    bind 127.0.0.1:28190
    stick-table type ip size 100k expire 60s store conn_rate(10s)
    tcp-request connection track-sc0 src
    tcp-request connection reject if { sc_conn_rate(0) gt 10 }
    default_backend none
backend none
    server origin 127.0.0.1:28198
CFG

GOMAXPROCS=1 taskset -c "$PROXY_CPU" "$tmp/edge" -config "$tmp/edge.yaml" >"$tmp/edge.log" 2>&1 &
pids+=($!)
edge_pid=$!
taskset -c "$PROXY_CPU" "$HAPROXY" -db -f "$tmp/haproxy.cfg" >"$tmp/haproxy.log" 2>&1 &
pids+=($!)
haproxy_pid=$!
GOMAXPROCS=1 taskset -c "$PROXY_CPU" "$tmp/acceptclose" -addr 127.0.0.1:28193 >"$tmp/acceptclose.log" 2>&1 &
pids+=($!)
floor_pid=$!
for port in 28190 28191 28192 28193; do
	for _ in $(seq 100); do
		(exec 3<>"/dev/tcp/127.0.0.1/$port") 2>/dev/null && break
		sleep 0.1
	done
done

declare -A ADDR=([haproxy]=127.0.0.1:28190 [edge]=127.0.0.1:28191 [edge-tls]=127.0.0.1:28192 [go-floor]=127.0.0.1:28193)
declare -A PID=([haproxy]=$haproxy_pid [edge]=$edge_pid [edge-tls]=$edge_pid [go-floor]=$floor_pid)
declare -A FLAGS=([haproxy]="" [edge]="" [edge-tls]="-tls" [go-floor]="")
variants=(haproxy edge edge-tls go-floor)
tck=$(getconf CLK_TCK)

ticks() { awk '{print $14 + $15}' "/proc/$1/stat"; }

# run VARIANT SECONDS prints "connections cpu_us_per_connection answered".
run() {
	local v=$1 d=$2 t0 t1 out
	t0=$(ticks "${PID[$v]}")
	# shellcheck disable=SC2086
	out=$(taskset -c "$LOAD_CPU" "$tmp/connflood" -addr "${ADDR[$v]}" -c "$CONNS" -d "${d}s" ${FLAGS[$v]})
	t1=$(ticks "${PID[$v]}")
	awk -v out="$out" -v dt=$((t1 - t0)) -v tck="$tck" 'BEGIN {
		split(out, f, " "); n = f[2]
		printf "%d %.2f %d\n", n, dt / tck * 1e6 / n, f[6]
	}'
}

echo "== warm-up (${WARMUP} s each): the source goes over its limit"
for v in "${variants[@]}"; do run "$v" "$WARMUP" >/dev/null; done

echo "== $ROUNDS rounds of $DURATION s per variant, $CONNS workers"
printf '%-6s %-9s %12s %10s %14s %9s\n' round variant connections conns/s "CPU µs/conn" answered
results=$tmp/results
: >"$results"
for r in $(seq "$ROUNDS"); do
	order=("${variants[@]:$(((r - 1) % 4))}" "${variants[@]:0:$(((r - 1) % 4))}")
	for v in "${order[@]}"; do
		read -r n cpu answered < <(run "$v" "$DURATION")
		printf '%-6s %-9s %12d %10.0f %14s %9d\n' "$r" "$v" "$n" "$(awk -v n="$n" -v d="$DURATION" 'BEGIN {print n / d}')" "$cpu" "$answered"
		echo "$r $v $cpu" >>"$results"
	done
done

echo
echo "Ratios of CPU per refused connection, median over rounds (range):"
awk '
{ cpu[$1 "/" $2] = $3; rounds[$1] = 1 }
function median(a, n,   i, j, t) {
	for (i = 1; i <= n; i++) for (j = i + 1; j <= n; j++) if (a[j] < a[i]) { t = a[i]; a[i] = a[j]; a[j] = t }
	return n % 2 ? a[(n + 1) / 2] : (a[n / 2] + a[n / 2 + 1]) / 2
}
END {
	n = 0
	for (r in rounds) { n++; x[n] = cpu[r "/edge"] / cpu[r "/haproxy"]; y[n] = cpu[r "/edge-tls"] / cpu[r "/edge"]
		z[n] = cpu[r "/edge"] / cpu[r "/go-floor"]; w[n] = cpu[r "/go-floor"] / cpu[r "/haproxy"]
		e[n] = cpu[r "/edge"]; h[n] = cpu[r "/haproxy"]; s[n] = cpu[r "/edge-tls"]; g[n] = cpu[r "/go-floor"] }
	line("edge ÷ haproxy:   ", x, n); printf "   [edge %.2f µs, haproxy %.2f µs per refused connection, medians]\n", median(e, n), median(h, n)
	line("edge-tls ÷ edge:  ", y, n); printf "   [edge-tls %.2f µs per refused TLS connection]\n", median(s, n)
	line("edge ÷ go-floor:  ", z, n); printf "   [go-floor %.2f µs: what Go itself pays to accept and close]\n", median(g, n)
	line("go-floor ÷ haproxy:", w, n); printf "\n"
}
function line(name, a, n,   i, lo, hi, c) {
	lo = hi = a[1]
	for (i = 1; i <= n; i++) { c[i] = a[i]; if (a[i] < lo) lo = a[i]; if (a[i] > hi) hi = a[i] }
	printf "  %s %.2fx (%.2f to %.2f)", name, median(c, n), lo, hi
}' "$results"
