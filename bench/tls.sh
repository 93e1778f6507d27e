#!/usr/bin/env bash
# bench/tls.sh: edge terminating TLS beside nginx, with the same ECDSA P-256
# certificate, TLS 1.3 and X25519 on both, in one command: CPU per full
# handshake, per refused and per forwarded request over HTTPS.
#
#   bash bench/tls.sh              # full run: 5 rounds of 8 s per variant, about 5 minutes
#   QUICK=1 bash bench/tls.sh      # 3 rounds of 2 s, about 1 minute
#
# Variants, each on nginx and on edge:
#   *-hs      a new connection per request, a full handshake each (the load
#             generator offers X25519 only and never resumes a session), a
#             static answer (nginx's return 200, edge's respond)
#   *-refuse  kept-alive HTTPS connections, a rule that refuses all but the
#             first request with 429 (nginx limit_req at 1 r/m, edge 1 an hour)
#   *-fwd     kept-alive HTTPS connections, a rule that never refuses, every
#             request forwarded to the origin (nginx answering from memory,
#             bench/conf/nginx-origin.conf)
#
# The server under test runs pinned to one core (PROXY_CPU, default 0) with
# one worker (GOMAXPROCS=1 for edge); the load generator (bench/tlsload) and
# the origin share the other (LOAD_CPU, default 1). CPU is utime + stime of
# the server's processes from /proc/PID/stat, read by the load generator
# around its measured window (which, on kept-alive connections, starts once
# every connection has made its handshake), divided by the requests done.
# Variants are measured in rounds, each round in a rotated order, and each
# edge/nginx ratio is computed within a round, then reported as the median
# over rounds with the range, as bench/proxy.sh does.
#
# Knobs (environment): ROUNDS, DURATION and WARMUP (seconds), HS_CONNS
# (concurrent handshaking connections, 16), CONNS (kept-alive connections,
# 64), VARIANTS (a subset, e.g. "nginx-hs edge-hs"), KEEP_RESULTS (a file to
# copy the per-round rows to), EDGE_CANDIDATE (another edge binary, measured
# as cand-hs, cand-refuse and cand-fwd with edge's configurations in the
# same rounds and compared with edge pair by pair).
#
# It makes a self-signed ECDSA P-256 certificate with openssl in a temporary
# directory, copies bench/conf/nginx-tls.conf and bench/edge/tls-*.yaml
# beside it, builds edge and bench/tlsload from this checkout, listens only
# on 127.0.0.1:28080 and 28181-28195, 29184-29194, and stops every process
# it started by its PID when it exits, however it exits. Every load
# generator run is bounded by timeout(1).
set -euo pipefail

here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
repo=$(dirname "$here")

if [[ ${QUICK:-0} == 1 ]]; then
	ROUNDS=${ROUNDS:-3} DURATION=${DURATION:-2} WARMUP=${WARMUP:-1}
else
	ROUNDS=${ROUNDS:-5} DURATION=${DURATION:-8} WARMUP=${WARMUP:-2}
fi
HS_CONNS=${HS_CONNS:-16}
CONNS=${CONNS:-64}
PROXY_CPU=${PROXY_CPU:-0}
LOAD_CPU=${LOAD_CPU:-1}
REQ_PATH=/api/v1/items
HOST=bench.example

ALL_VARIANTS="nginx-hs edge-hs nginx-refuse edge-refuse nginx-fwd edge-fwd"
declare -A PORT=(
	[nginx-hs]=28181 [nginx-refuse]=28182 [nginx-fwd]=28183
	[edge-hs]=28184 [edge-refuse]=28186 [edge-fwd]=28188
	[cand-hs]=28190 [cand-refuse]=28192 [cand-fwd]=28194
)
declare -A KIND=(
	[nginx-hs]=hs [edge-hs]=hs [cand-hs]=hs
	[nginx-refuse]=refuse [edge-refuse]=refuse [cand-refuse]=refuse
	[nginx-fwd]=fwd [edge-fwd]=fwd [cand-fwd]=fwd
)
declare -A DESC=(
	[nginx-hs]="nginx, a full handshake per request, static answer"
	[edge-hs]="edge, a full handshake per request, static answer (respond)"
	[cand-hs]="EDGE_CANDIDATE build, as edge-hs"
	[nginx-refuse]="nginx limit_req refusing (429), kept-alive HTTPS"
	[edge-refuse]="edge, 1 rule refusing (429), kept-alive HTTPS"
	[cand-refuse]="EDGE_CANDIDATE build, as edge-refuse"
	[nginx-fwd]="nginx limit_req forwarding, kept-alive HTTPS"
	[edge-fwd]="edge, 1 rule forwarding, kept-alive HTTPS"
	[cand-fwd]="EDGE_CANDIDATE build, as edge-fwd"
)
declare -A EDGECONF=([hs]=tls-static [refuse]=tls-refuse [fwd]=tls-forward)

log() { printf '%s\n' "$*" >&2; }
die() { log "tls.sh: $*"; exit 1; }

# --- processes: everything started is recorded and stopped by PID ----------

tmp=$(mktemp -d /tmp/edge-tls-bench.XXXXXX)
STARTED=()  # PIDs this script started
CHILDREN=() # their children (nginx workers), in case a parent dies first
declare -A PIDOF=()

LOADPID= # the load generator's timeout(1) while one runs: TERM reaches tlsload through it

cleanup() {
	local rc=$? pid i
	trap - EXIT INT TERM
	[[ -n $LOADPID ]] && kill -TERM "$LOADPID" 2>/dev/null
	for pid in "${STARTED[@]}"; do
		kill -TERM "$pid" 2>/dev/null || true
	done
	for ((i = 0; i < 50; i++)); do
		local alive=0
		for pid in "${STARTED[@]}" "${CHILDREN[@]}"; do
			kill -0 "$pid" 2>/dev/null && alive=1
		done
		((alive)) || break
		sleep 0.1
	done
	for pid in "${STARTED[@]}" "${CHILDREN[@]}"; do
		kill -KILL "$pid" 2>/dev/null || true
	done
	wait 2>/dev/null || true
	rm -rf "$tmp"
	exit "$rc"
}
trap cleanup EXIT
trap 'exit 130' INT
trap 'exit 143' TERM

# start NAME CPU CMD...: run CMD pinned to CPU in the background, logging
# to $tmp/NAME.log.
start() {
	local name=$1 cpu=$2
	shift 2
	taskset -c "$cpu" "$@" >"$tmp/$name.log" 2>&1 &
	STARTED+=("$!")
	PIDOF[$name]=$!
}

port_in_use() { (exec 3<>"/dev/tcp/127.0.0.1/$1") 2>/dev/null; }

# wait_up NAME URL: wait up to 10 s for an answer at URL (https without
# verification: the certificate is self-signed).
wait_up() {
	local name=$1 url=$2 i
	for ((i = 0; i < 100; i++)); do
		curl -sk -o /dev/null "$url" && return 0
		kill -0 "${PIDOF[$name]}" 2>/dev/null || break
		sleep 0.1
	done
	log "--- $tmp/$name.log:"
	cat "$tmp/$name.log" >&2 || true
	die "$name did not answer at $url"
}

# --- tools, certificate, build -----------------------------------------------

for bin in nginx openssl taskset curl timeout go; do
	command -v "$bin" >/dev/null || die "$bin is required (nginx and openssl: apt-get install nginx openssl)"
done
((PROXY_CPU != LOAD_CPU)) || die "PROXY_CPU and LOAD_CPU must differ"
(($(nproc) >= 2)) || die "needs 2 cores (one for the server, one for the load generator and the origin)"

if [[ -n ${EDGE_CANDIDATE:-} ]]; then
	[[ -x $EDGE_CANDIDATE ]] || die "EDGE_CANDIDATE=$EDGE_CANDIDATE is not an executable"
	EDGE_CANDIDATE=$(cd "$(dirname "$EDGE_CANDIDATE")" && pwd)/$(basename "$EDGE_CANDIDATE")
	ALL_VARIANTS="nginx-hs edge-hs cand-hs nginx-refuse edge-refuse cand-refuse nginx-fwd edge-fwd cand-fwd"
fi
variants=()
for v in ${VARIANTS:-$ALL_VARIANTS}; do
	[[ -n ${KIND[$v]:-} ]] || die "unknown variant $v (known: $ALL_VARIANTS)"
	[[ $v == cand-* && -z ${EDGE_CANDIDATE:-} ]] && die "$v needs EDGE_CANDIDATE"
	variants+=("$v")
done
want() { [[ " ${variants[*]} " == *" $1 "* ]]; }

log "making an ECDSA P-256 certificate, building edge and bench/tlsload into $tmp ..."
openssl req -x509 -newkey ec -pkeyopt ec_paramgen_curve:P-256 -nodes -days 2 -subj "/CN=$HOST" \
	-addext "subjectAltName=DNS:$HOST,IP:127.0.0.1" -keyout "$tmp/bench.key" -out "$tmp/bench.pem" 2>"$tmp/openssl.log" ||
	{ cat "$tmp/openssl.log" >&2; die "openssl could not make the certificate"; }
(cd "$repo" && go build -o "$tmp/edge" ./cmd/edge) || die "building edge failed"
(cd "$here" && go build -o "$tmp/tlsload" ./tlsload) || die "building bench/tlsload failed"
cp "$here/conf/nginx-tls.conf" "$here/conf/nginx-origin.conf" "$tmp/"
for k in hs refuse fwd; do
	c=${EDGECONF[$k]}
	cp "$here/edge/$c.yaml" "$tmp/$c.yaml"
	"$tmp/edge" -check -config "$tmp/$c.yaml" >/dev/null || die "bench/edge/$c.yaml is not a valid edge configuration"
done
# cand_conf FILE: edge's configuration FILE on the candidate's ports, 6
# higher (28184 -> 28190, 29184 -> 29190 and so on).
cand_conf() {
	awk '{
		while (match($0, /127\.0\.0\.1:2[89]18[4-9]/)) {
			p = substr($0, RSTART + 10, 5) + 6
			$0 = substr($0, 1, RSTART + 9) p substr($0, RSTART + RLENGTH)
		}
		print
	}' "$1"
}

for p in 28080 28181 28182 28183 28184 28185 28186 28187 28188 28189 29184 29186 29188; do
	port_in_use "$p" && die "127.0.0.1:$p is already in use"
done

mkdir -p "$tmp/nginx-origin/logs" "$tmp/nginx-tls/logs"
start nginx-origin "$LOAD_CPU" nginx -p "$tmp/nginx-origin/" -e "$tmp/nginx-origin/logs/error.log" \
	-c "$tmp/nginx-origin.conf" -g "daemon off; pid $tmp/nginx-origin/nginx.pid;"
wait_up nginx-origin "http://127.0.0.1:28080$REQ_PATH"
if want nginx-hs || want nginx-refuse || want nginx-fwd; then
	start nginx-tls "$PROXY_CPU" nginx -p "$tmp/nginx-tls/" -e "$tmp/nginx-tls/logs/error.log" \
		-c "$tmp/nginx-tls.conf" -g "daemon off; pid $tmp/nginx-tls/nginx.pid;"
	wait_up nginx-tls "https://127.0.0.1:28181$REQ_PATH"
	PIDOF[nginx-hs]=${PIDOF[nginx-tls]} PIDOF[nginx-refuse]=${PIDOF[nginx-tls]} PIDOF[nginx-fwd]=${PIDOF[nginx-tls]}
fi
for v in edge-hs edge-refuse edge-fwd cand-hs cand-refuse cand-fwd; do
	want "$v" || continue
	conf=$tmp/${EDGECONF[${KIND[$v]}]}.yaml bin=$tmp/edge
	if [[ $v == cand-* ]]; then
		cand_conf "$conf" >"$tmp/$v.yaml"
		conf=$tmp/$v.yaml bin=$EDGE_CANDIDATE
	fi
	GOMAXPROCS=1 start "$v" "$PROXY_CPU" "$bin" -config "$conf"
	wait_up "$v" "https://127.0.0.1:${PORT[$v]}$REQ_PATH"
done
sleep 0.5
for name in nginx-origin nginx-tls; do
	[[ -n ${PIDOF[$name]:-} ]] || continue
	for c in $(pgrep -P "${PIDOF[$name]}" || true); do CHILDREN+=("$c"); done
done

# Every variant answers as it should, over TLS 1.3 with X25519, before
# anything is measured.
for v in "${variants[@]}"; do
	for _ in 1 2 3; do
		code=$(curl -sk --tlsv1.3 --curves X25519 -o /dev/null -w '%{http_code}' "https://127.0.0.1:${PORT[$v]}$REQ_PATH")
	done
	wantcode=200
	[[ ${KIND[$v]} == refuse ]] && wantcode=429
	[[ $code == "$wantcode" ]] || die "$v answered $code after 3 requests, want $wantcode"
done

# --- measurement -------------------------------------------------------------

CLK_TCK=$(getconf CLK_TCK)

# with_children PID: PID and its children (nginx's worker), comma-separated,
# for bench/tlsload -pids, which reads their utime + stime (all threads)
# from /proc/PID/stat around the measured window.
with_children() {
	local list=$1 c
	for c in $(pgrep -P "$1" || true); do list+=,$c; done
	echo "$list"
}

# cpu_ticks CPU: "busy total" ticks of one core from /proc/stat (busy
# includes steal).
cpu_ticks() {
	awk -v c="cpu$1" '$1 == c {t = 0; for (i = 2; i <= NF; i++) t += $i; print t - $5 - $6, t}' /proc/stat
}

results=$tmp/results.tsv
printf 'round\tvariant\trps\tp50_ms\tp99_ms\tcpu_us\tproxy_cpu_pct\tother_pct\tnon2xx_pct\terrors\n' >"$results"
declare -A TLSLINE=()

# measure ROUND VARIANT: warm up, then one measured run of bench/tlsload.
measure() {
	local round=$1 v=$2 pid=${PIDOF[$2]}
	local gen=("$tmp/tlsload" -addr "127.0.0.1:${PORT[$v]}" -path "$REQ_PATH" -host "$HOST")
	if [[ ${KIND[$v]} == hs ]]; then
		gen+=(-new -c "$HS_CONNS")
	else
		gen+=(-c "$CONNS")
	fi
	GOMAXPROCS=1 taskset -c "$LOAD_CPU" timeout $((WARMUP + 30)) "${gen[@]}" -d "${WARMUP}s" >/dev/null &
	LOADPID=$!
	wait $LOADPID || die "the warm-up of $v failed"
	local c0 c1 dt
	c0=$(cpu_ticks "$PROXY_CPU")
	GOMAXPROCS=1 taskset -c "$LOAD_CPU" timeout $((DURATION + 30)) "${gen[@]}" -d "${DURATION}s" \
		-pids "$(with_children "$pid")" >"$tmp/load.out" 2>&1 &
	LOADPID=$!
	wait $LOADPID || { cat "$tmp/load.out" >&2; die "bench/tlsload against $v failed"; }
	LOADPID=
	c1=$(cpu_ticks "$PROXY_CPU")
	dt=$(awk '/^Server CPU ticks:/ {print $NF}' "$tmp/load.out")
	local reqs rps p50 p99 non2xx errs odd
	reqs=$(awk '/requests in/ {print $1}' "$tmp/load.out")
	rps=$(awk '/^Requests\/sec:/ {print $2}' "$tmp/load.out")
	p50=$(awk '$1 == "50%" {sub(/ms$/, "", $2); print $2}' "$tmp/load.out")
	p99=$(awk '$1 == "99%" {sub(/ms$/, "", $2); print $2}' "$tmp/load.out")
	non2xx=$(awk '/Non-2xx or 3xx responses:/ {print $NF}' "$tmp/load.out")
	errs=$(awk '/Socket errors:/ {gsub(/,/, ""); print $4 + $6 + $8 + $10}' "$tmp/load.out")
	odd=$(awk -F': ' '/other version, group or resumed/ {print $NF}' "$tmp/load.out")
	[[ ${odd:-x} == 0 ]] || { cat "$tmp/load.out" >&2; die "$v: a connection was not a full TLS 1.3 handshake with X25519"; }
	TLSLINE[$v]=$(grep '^TLS:' "$tmp/load.out")
	awk -v r="$round" -v v="$v" -v n="$reqs" -v rps="$rps" -v p50="$p50" -v p99="$p99" \
		-v dt="$dt" -v hz="$CLK_TCK" -v c0="$c0" -v c1="$c1" -v bad="${non2xx:-0}" -v errs="${errs:-0}" 'BEGIN {
		split(c0, a, " "); split(c1, b, " ")
		busy = b[1] - a[1]; total = b[2] - a[2]
		other = total > 0 ? 100 * (busy - dt) / total : 0
		if (other < 0) other = 0
		pct = total > 0 ? 100 * dt / total : 0
		printf "%d\t%s\t%.0f\t%s\t%s\t%.2f\t%.0f\t%.0f\t%.1f\t%d\n", r, v, rps, p50, p99,
			dt * 1e6 / hz / n, pct, other, 100 * bad / n, errs
	}' >>"$results"
	tail -n 1 "$results" | awk -F'\t' '{printf "  round %s  %-12s %8s req/s  p50 %7s ms  p99 %7s ms  %7s us/req  server core %s%% (others %s%%)  non-2xx %s%%\n", $1, $2, $3, $4, $5, $6, $7, $8, $9}' >&2
}

read -r load1 _ </proc/loadavg
if awk -v l="$load1" 'BEGIN {exit !(l > 0.5)}'; then
	log "NOTE: load average $load1 before the run: other work on this machine will show in the 'other load' column and widen the ranges."
fi
n=${#variants[@]}
total_s=$((ROUNDS * n * (WARMUP + DURATION)))
log "measuring ${variants[*]}: $ROUNDS rounds x $n variants x (${WARMUP}s warm-up + ${DURATION}s), about $((total_s / 60))m$((total_s % 60))s"
for ((r = 1; r <= ROUNDS; r++)); do
	for ((i = 0; i < n; i++)); do
		measure "$r" "${variants[(i + r - 1) % n]}"
	done
done
[[ -n ${KEEP_RESULTS:-} ]] && cp "$results" "$KEEP_RESULTS"

# --- report ------------------------------------------------------------------

echo
echo "## edge TLS benchmark"
echo
echo "$(date -u '+%Y-%m-%d %H:%M UTC'); $(nproc) cores ($(lscpu | awk -F: '/Model name/ {gsub(/^ +/, "", $2); print $2; exit}')), kernel $(uname -r), $(go version | awk '{print $3}')."
echo "nginx $(nginx -v 2>&1 | sed 's|.*nginx/||') ($(nginx -V 2>&1 | awk '/running with/ {sub(/.*running with /, ""); sub(/\)$/, ""); print; exit}')), bench/tlsload: TLS 1.3, X25519 only, no session cache; ECDSA P-256 certificate; GET $REQ_PATH."
echo "Handshakes: -new -c $HS_CONNS (a new connection per request); refusals and forwards: -c $CONNS kept-alive connections."
echo "Server on core $PROXY_CPU (1 worker; GOMAXPROCS=1), load generator and origin on core $LOAD_CPU. $ROUNDS rounds x ${DURATION}s; medians over rounds."
echo
echo "What each variant's last measured run negotiated:"
echo
for v in "${variants[@]}"; do echo "- $v: ${TLSLINE[$v]:-}"; done
echo

DESCS=$(for v in "${variants[@]}"; do printf '%s\t%s\n' "$v" "${DESC[$v]}"; done)
ORDER="${variants[*]}"

awk -F'\t' -v order="$ORDER" -v descs="$DESCS" '
function median(list,    a, n, i, j, t) {
	n = split(list, a, " ")
	if (n == 0) return ""
	for (i = 2; i <= n; i++) { t = a[i] + 0; for (j = i - 1; j >= 1 && a[j] + 0 > t; j--) a[j + 1] = a[j]; a[j + 1] = t }
	return n % 2 ? a[(n + 1) / 2] + 0 : (a[n / 2] + a[n / 2 + 1]) / 2
}
function lo(list,    a, n, i, m) { n = split(list, a, " "); m = a[1] + 0; for (i = 2; i <= n; i++) if (a[i] + 0 < m) m = a[i] + 0; return m }
function hi(list,    a, n, i, m) { n = split(list, a, " "); m = a[1] + 0; for (i = 2; i <= n; i++) if (a[i] + 0 > m) m = a[i] + 0; return m }
function add(k, x) { L[k] = (k in L) ? L[k] " " x : x }
# ratio(A, B, col): A/B per round, as "median (min-max)"; "-" if either is missing.
function ratio(a, b, col,    r, x, list, num, den) {
	list = ""
	for (r = 1; r <= R; r++) {
		if (!((r, a) in V) || !((r, b) in V)) continue
		split(V[r, a], x, SUBSEP); num = x[col]
		split(V[r, b], x, SUBSEP); den = x[col]
		if (den + 0 == 0) continue
		list = list (list == "" ? "" : " ") sprintf("%.4f", num / den)
	}
	RL = list
	if (list == "") return "-"
	return sprintf("%.2f (%.2f-%.2f)", median(list), lo(list), hi(list))
}
BEGIN {
	n = split(order, O, " ")
	split(descs, d, "\n"); for (i in d) { split(d[i], p, "\t"); D[p[1]] = p[2] }
}
NR > 1 {
	r = $1; v = $2
	if (r > R) R = r
	V[r, v] = $3 SUBSEP $6
	add(v ",rps", $3); add(v ",p50", $4); add(v ",p99", $5); add(v ",cpu", $6)
	add(v ",pct", $7); add(v ",oth", $8); add(v ",bad", $9); add(v ",err", $10)
}
END {
	print "| variant | req/s | p50 ms | p99 ms | CPU us/req | server core busy | other load on server core | non-2xx | socket errors |"
	print "|---|---:|---:|---:|---:|---:|---:|---:|---:|"
	for (i = 1; i <= n; i++) {
		v = O[i]
		printf "| %s: %s | %.0f | %.2f | %.2f | %.1f | %.0f%% | %.0f%% | %.1f%% | %d |\n", v, D[v],
			median(L[v ",rps"]), median(L[v ",p50"]), median(L[v ",p99"]), median(L[v ",cpu"]),
			median(L[v ",pct"]), median(L[v ",oth"]), median(L[v ",bad"]), median(L[v ",err"])
	}
	print ""
	print "CPU per request, ratios within each round, median (min-max); lower is better:"
	print ""
	print "| target | ratio | want | met |"
	print "|---|---:|---:|---|"
	c[1] = "edge-hs nginx-hs 1.3 edge vs nginx, CPU per full handshake"
	c[2] = "edge-refuse nginx-refuse 1.5 edge vs nginx, CPU per refused HTTPS request"
	c[3] = "edge-fwd nginx-fwd 2.0 edge vs nginx, CPU per forwarded HTTPS request"
	c[4] = "cand-hs edge-hs 1.0 (extra) candidate vs edge, CPU per full handshake"
	c[5] = "cand-refuse edge-refuse 1.0 (extra) candidate vs edge, CPU per refused HTTPS request"
	c[6] = "cand-fwd edge-fwd 1.0 (extra) candidate vs edge, CPU per forwarded HTTPS request"
	c[7] = "cand-hs nginx-hs 1.3 (extra) candidate vs nginx, CPU per full handshake"
	c[8] = "cand-refuse nginx-refuse 1.5 (extra) candidate vs nginx, CPU per refused HTTPS request"
	c[9] = "cand-fwd nginx-fwd 2.0 (extra) candidate vs nginx, CPU per forwarded HTTPS request"
	for (i = 1; i <= 9; i++) {
		split(c[i], f, " "); label = c[i]; sub(/^[^ ]+ [^ ]+ [^ ]+ /, "", label)
		s = ratio(f[1], f[2], 2)
		if (s == "-" && f[1] ~ /^cand-/) continue
		if (s == "-") { printf "| %s | - | <= %s | not measured |\n", label, f[3]; continue }
		m = median(RL) + 0
		printf "| %s | %s | <= %s | %s |\n", label, s, f[3], (m <= f[3] ? "yes" : "no")
	}
}' "$results"
echo
echo "Per-round rows (round, variant, req/s, p50 ms, p99 ms, CPU us/req, server core %, others %, non-2xx %, errors):"
echo
echo '```'
tail -n +2 "$results" | sort -t$'\t' -k2,2 -k1,1n | column -t -s$'\t'
echo '```'
