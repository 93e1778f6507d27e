#!/usr/bin/env bash
# bench/instructions.sh: what one refused request costs nginx limit_req and
# edge (fastpath true and false), in instructions (callgrind, user space)
# and in syscalls (strace -c), on bounded runs that do not depend on how
# busy the machine is.
#
#   bash bench/instructions.sh            # N1=2000 N2=12000 requests, 4 connections
#   FORWARD=1 bash bench/instructions.sh  # the same for forwarded requests
#   NEWCONN=1 bash bench/instructions.sh  # refusals, a new connection per request
#
# With FORWARD=1 the rule never refuses (nginx's limit_req at 1,000,000 r/s
# with a burst as large, as bench/proxy.sh's nginx-allow; edge's
# bench/edge/allow.yaml), and every request is forwarded to the
# nginx origin: the counts are what one forward costs each server. With
# NEWCONN=1 every request has a connection of its own (opened, used once,
# closed by the client): the counts include accepting and closing it.
#
# Each server runs under callgrind; after 40 warm-up requests (past the
# requests its limit allows) its counts are zeroed, N requests are sent,
# and its counts are dumped: (Ir(N2) - Ir(N1)) / (N2 - N1) is what one
# more refusal costs. Go's asynchronous preemption is off under callgrind
# (its signals crash callgrind 3.19). Then each server runs without
# valgrind under strace -c -f for N2 requests. It listens on
# 127.0.0.1:38080, 38083, 38089, 38093 and 38095 (admin 39089, 39093), needs
# nginx, valgrind and strace, and stops every process it started by PID.
set -euo pipefail
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
repo=$(dirname "$here")
N1=${N1:-2000} N2=${N2:-12000}
tmp=$(mktemp -d /tmp/edge-instructions.XXXXXX)
PIDS=()
cleanup() {
	# TERM first: nginx's master then stops its worker, which KILL would orphan.
	for p in "${PIDS[@]}"; do kill -TERM "$p" 2>/dev/null || true; done
	sleep 1
	for p in "${PIDS[@]}"; do kill -KILL "$p" 2>/dev/null || true; done
	wait 2>/dev/null || true
	rm -rf "$tmp"
}
trap cleanup EXIT
for bin in nginx valgrind callgrind_control strace go; do
	command -v "$bin" >/dev/null || { echo "instructions.sh: $bin is required" >&2; exit 1; }
done
(cd "$repo" && go build -o "$tmp/edge" ./cmd/edge)
(cd "$here" && go build -o "$tmp/client" ./refuseclient && go build -o "$tmp/raw429" ./raw429)
sed 's/28080/38080/g' "$here/conf/nginx-origin.conf" >"$tmp/origin.conf"
cat >"$tmp/nginx-block.conf" <<'CONF'
worker_processes 1;
master_process off;
events { worker_connections 4096; }
http {
    access_log off;
    server_tokens off;
    keepalive_requests 10000000;
    keepalive_timeout 120s;
    limit_req_zone $binary_remote_addr zone=block:10m rate=RATE;
    limit_req_status 429;
    limit_req_log_level info;
    upstream origin { server 127.0.0.1:38080; keepalive 256; }
    server {
        listen 127.0.0.1:38083 backlog=4096;
        location / {
            limit_req zone=block BURST;
            proxy_pass http://origin;
            proxy_http_version 1.1;
            proxy_set_header Connection "";
            proxy_set_header Host $host;
            proxy_set_header X-Forwarded-For $proxy_add_x_forwarded_for;
        }
    }
}
CONF
rate=1r/s burst= edgeconf=block.yaml what=refused from=28089 fromadmin=29089
if [[ ${FORWARD:-0} == 1 ]]; then
	# bench/proxy.sh's nginx-allow: without a burst nginx refuses a second
	# request in the same millisecond even at this rate.
	rate=1000000r/s burst="burst=1000000 nodelay" edgeconf=allow.yaml what=forwarded from=28088 fromadmin=29088
fi
sed -i "s#RATE#$rate#; s# BURST#${burst:+ $burst}#" "$tmp/nginx-block.conf"
fresh=()
if [[ ${NEWCONN:-0} == 1 ]]; then
	fresh=(-new) what="$what (a new connection each)"
fi
sed -e "s/$from/38089/; s/$fromadmin/39089/; s/28080/38080/" "$here/edge/$edgeconf" >"$tmp/fast.yaml"
sed -e "s/$from/38093/; s/$fromadmin/39093/; s/28080/38080/" "$here/edge/$edgeconf" >"$tmp/nofast.yaml"
echo "fastpath: false" >>"$tmp/nofast.yaml"
mkdir -p "$tmp/origin/logs" "$tmp/nginx/logs"
nginx -p "$tmp/origin/" -e "$tmp/origin/logs/error.log" -c "$tmp/origin.conf" -g "daemon off; pid $tmp/origin/nginx.pid;" &
PIDS+=("$!")
waitport() { for _ in $(seq 600); do (exec 3<>"/dev/tcp/127.0.0.1/$1") 2>/dev/null && return 0; sleep 0.1; done; return 1; }
waitport 38080
# server NAME: the command line of a server, and its port in $port.
server() {
	case $1 in
	nginx) port=38083 cmd=(nginx -p "$tmp/nginx/" -e "$tmp/nginx/logs/error.log" -c "$tmp/nginx-block.conf" -g "daemon off; pid $tmp/nginx/nginx.pid;") ;;
	edge-fast) port=38089 cmd=("$tmp/edge" -config "$tmp/fast.yaml") ;;
	edge-nofast) port=38093 cmd=("$tmp/edge" -config "$tmp/nofast.yaml") ;;
	raw429) port=38095 cmd=("$tmp/raw429" -listen 127.0.0.1:38095) ;;
	esac
}
# raw429 (bench/raw429: Go's floor, a raw net server writing fixed bytes)
# only refuses: it has no place among forwards.
SERVERS="nginx edge-fast edge-nofast"
[[ ${FORWARD:-0} == 1 ]] || SERVERS+=" raw429"
echo "instructions per $what request (callgrind Ir, user space):"
for s in $SERVERS; do
	declare -A ir=()
	for n in $N1 $N2; do
		server "$s"
		GODEBUG=asyncpreemptoff=1 GOMAXPROCS=1 valgrind --tool=callgrind --callgrind-out-file="$tmp/cg.$s.$n" "${cmd[@]}" >"$tmp/cg.$s.$n.log" 2>&1 &
		pid=$!
		PIDS+=("$pid")
		waitport "$port"
		"$tmp/client" -addr "127.0.0.1:$port" -n 40 -c 4 >/dev/null
		callgrind_control -z "$pid" >/dev/null 2>&1
		statuses=$("$tmp/client" -addr "127.0.0.1:$port" -n "$n" -c 4 "${fresh[@]}")
		callgrind_control -d "$pid" >/dev/null 2>&1
		sleep 1
		kill -KILL "$pid"
		wait "$pid" 2>/dev/null || true
		ir[$n]=$(cat "$tmp/cg.$s.$n"* | awk '/^(summary|totals):/ {print $2}' | sort -n | tail -1)
		echo "  $s: $n requests ($statuses): $(printf "%'d" "${ir[$n]}") instructions"
	done
	echo "  $s: $(((ir[$N2] - ir[$N1]) / (N2 - N1))) instructions per request"
done
echo "syscalls per $what request (strace -c -f, $N2 requests):"
for s in $SERVERS; do
	server "$s"
	GOMAXPROCS=1 "${cmd[@]}" >/dev/null 2>&1 &
	pid=$!
	PIDS+=("$pid")
	waitport "$port"
	"$tmp/client" -addr "127.0.0.1:$port" -n 100 -c 4 >/dev/null
	strace -c -f -p "$pid" -o "$tmp/strace.$s" 2>/dev/null &
	spid=$!
	sleep 1
	"$tmp/client" -addr "127.0.0.1:$port" -n "$N2" -c 4 "${fresh[@]}" >/dev/null
	sleep 0.5
	kill -INT "$spid"
	wait "$spid" 2>/dev/null || true
	kill -KILL "$pid"
	wait "$pid" 2>/dev/null || true
	awk -v n="$N2" -v s="$s" '
		$NF == "total" { total = ($4 ~ /^[0-9]+$/ ? $4 : $3) / n; next }
		NR > 2 && $NF !~ /^-/ { c = ($4 ~ /^[0-9]+$/) ? $4 : $3; if (c / n >= 0.01) list = list sprintf(" %s %.2f", $NF, c / n) }
		END { printf "  %s: %.2f syscalls per request:%s\n", s, total, list }' "$tmp/strace.$s"
done
