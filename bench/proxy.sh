#!/usr/bin/env bash
# bench/proxy.sh: edge against nginx limit_req, HAProxy, Caddy and a bare Go
# reverse proxy, measured side by side on this machine, in one command.
#
#   bash bench/proxy.sh             # full run: 5 rounds of 8 s per variant, about 10 minutes
#   QUICK=1 bash bench/proxy.sh     # 3 rounds of 2 s, about 2 minutes
#   NEWCONN=1 QUICK=1 bash bench/proxy.sh  # refusals, a new connection per request
#
# Every proxy runs pinned to one core (PROXY_CPU, default 0) with one worker
# (GOMAXPROCS=1 for the Go proxies); wrk and the origin share the other
# (LOAD_CPU, default 1). Variants are measured in rounds, each round in a
# rotated order, and every ratio is computed pair by pair within a round,
# then reported as the median over rounds (and the range), so that a noisy
# neighbour slows both sides of a ratio rather than one.
#
# Knobs (environment): ROUNDS, DURATION and WARMUP (seconds per measurement
# and per unmeasured warm-up), CONNS (wrk connections, 64), VARIANTS (a
# space-separated subset, e.g. "bare edge-allow"), KEEP_RESULTS (a file to
# copy the raw per-round rows to), POST_BYTES (wrk sends a POST with a body
# of this many bytes instead of a GET), EDGE_CANDIDATE (the path of another edge
# binary, say a build with a hot-path change: it is measured as cand-allow
# and cand-block with edge's configurations, in the same rounds, and
# compared with edge pair by pair), NEWCONN=1 (every request on a
# connection of its own, opened, used once and closed by the client, as bots
# and floods send them: bench/newconn instead of wrk, which cannot do that;
# the variants default to the refusing ones). edge-block-nofast and edge-allow-nofast
# are edge-block and edge-allow with fastpath: false, so that both ways of
# refusing and of forwarding are measured in one run. edge-3origins is
# edge-allow forwarding to a group of three servers (the origin on three
# ports) with active health checks every second, beside edge-allow's one.
# edge-allow-log and edge-block-log are edge-allow and edge-block writing a
# JSON access log to a file, beside nginx-allow-log and nginx-block-log,
# nginx with its access_log on (combined): each is compared with its
# counterpart without a log.
# edge-block-jwt is edge-block keyed by jwt:sub: wrk sends one HS256 token (sub "bench",
# signed with the secret the script exports as EDGE_BENCH_JWT_SECRET), so
# every refusal verifies it from the cache.
#
# It installs what is missing with apt-get (nginx, haproxy, caddy, wrk;
# Caddy is skipped, with a note, where the distribution has no package),
# builds edge with `go build` from this checkout, listens only on
# 127.0.0.1:28080-28103 and 29088-29103, and stops every process it started
# by its PID when it exits, however it exits. It stops nothing else.
set -euo pipefail

here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
repo=$(dirname "$here")

if [[ ${QUICK:-0} == 1 ]]; then
	ROUNDS=${ROUNDS:-3} DURATION=${DURATION:-2} WARMUP=${WARMUP:-1}
else
	ROUNDS=${ROUNDS:-5} DURATION=${DURATION:-8} WARMUP=${WARMUP:-2}
fi
CONNS=${CONNS:-64}
PROXY_CPU=${PROXY_CPU:-0}
LOAD_CPU=${LOAD_CPU:-1}
REQ_PATH=/api/v1/items

# Variants: name, port, kind. kind is "origin" (wrk straight to the origin),
# "fwd" (forwards every request) or "block" (refuses almost every request).
ALL_VARIANTS="origin nginx-allow nginx-allow-log bare edge-allow edge-allow-log edge-3origins edge-allow-nofast caddy haproxy-allow edge-50x5 nginx-block nginx-block-log fixed429 raw429 edge-block edge-block-jwt edge-block-log edge-block-nofast haproxy-block"
declare -A PORT=(
	[origin]=28080 [bare]=28081 [nginx-allow]=28082 [nginx-block]=28083
	[haproxy-allow]=28084 [haproxy-block]=28085 [caddy]=28086 [fixed429]=28087
	[edge-allow]=28088 [edge-block]=28089 [edge-50x5]=28090
	[cand-allow]=28091 [cand-block]=28092 [edge-block-nofast]=28093
	[edge-allow-nofast]=28094 [raw429]=28096 [edge-3origins]=28095
	[edge-allow-log]=28099 [edge-block-log]=28100 [nginx-allow-log]=28101 [nginx-block-log]=28102 [edge-block-jwt]=28103
)
declare -A KIND=(
	[origin]=origin [bare]=fwd [nginx-allow]=fwd [haproxy-allow]=fwd [caddy]=fwd
	[edge-allow]=fwd [edge-50x5]=fwd [cand-allow]=fwd [cand-block]=block
	[nginx-block]=block [haproxy-block]=block [fixed429]=block [raw429]=block [edge-block]=block
	[edge-block-nofast]=block [edge-allow-nofast]=fwd [edge-3origins]=fwd
	[edge-allow-log]=fwd [edge-block-log]=block [nginx-allow-log]=fwd [nginx-block-log]=block [edge-block-jwt]=block
)
declare -A DESC=(
	[origin]="origin direct (nginx return 200; upper bound, on the load core)"
	[bare]="bare Go httputil.ReverseProxy, tuned transport"
	[nginx-allow]="nginx limit_req, never blocking"
	[nginx-block]="nginx limit_req, blocking (429)"
	[haproxy-allow]="HAProxy http_req_rate stick table, never blocking"
	[haproxy-block]="HAProxy http_req_rate stick table, blocking (429)"
	[caddy]="Caddy reverse_proxy (no limiting)"
	[fixed429]="minimal Go net/http server, fixed 429"
	[raw429]="Go floor: raw net server writing fixed 429 bytes, no net/http"
	[edge-allow]="edge, 1 rule, never blocking"
	[edge-block]="edge, 1 rule, blocking (429)"
	[edge-block-nofast]="edge, 1 rule, blocking (429), fastpath: false"
	[edge-block-jwt]="edge, 1 rule keyed by jwt:sub (a cached HS256 token), blocking (429)"
	[edge-allow-nofast]="edge, 1 rule, never blocking, fastpath: false"
	[edge-3origins]="edge, 1 rule, never blocking, 3 origin servers with health checks every 1s"
	[edge-50x5]="edge, 50 domains x 5 rules, never blocking"
	[edge-allow-log]="edge, 1 rule, never blocking, JSON access log to a file"
	[edge-block-log]="edge, 1 rule, blocking (429), JSON access log to a file"
	[nginx-allow-log]="nginx limit_req, never blocking, access_log on (combined)"
	[nginx-block-log]="nginx limit_req, blocking (429), access_log on (combined)"
	[cand-allow]="EDGE_CANDIDATE build, 1 rule, never blocking"
	[cand-block]="EDGE_CANDIDATE build, 1 rule, blocking (429)"
)
# Requests to edge-50x5 carry the Host of its last domain: host lookup among
# 50 domains, then 5 rules, 4 of which match a GET.
declare -A HOSTHDR=([edge-50x5]=site49.example.com)
# AUTHHDR: an Authorization field wrk and the checks send.
export EDGE_BENCH_JWT_SECRET=edge-bench-jwt-secret-0123456789abcdef
declare -A AUTHHDR=([edge-block-jwt]="Bearer eyJhbGciOiJIUzI1NiIsInR5cCI6IkpXVCJ9.eyJleHAiOjQxMDI0NDQ4MDAsInN1YiI6ImJlbmNoIn0.ktaTBMM7PMqv3pUAT9DFZ7BN4WkKarTWRS_3TBkiTMA")

log() { printf '%s\n' "$*" >&2; }
die() { log "proxy.sh: $*"; exit 1; }

# --- processes: everything started is recorded and stopped by PID ----------

tmp=$(mktemp -d /tmp/edge-proxy-bench.XXXXXX)
STARTED=()  # PIDs this script started
CHILDREN=() # their children (nginx workers), in case a parent dies first
declare -A PIDOF=()

cleanup() {
	local rc=$? pid i
	trap - EXIT INT TERM
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

# wait_http NAME PORT [HOST]: wait up to 10 s for an HTTP answer on PORT.
wait_http() {
	local name=$1 port=$2 host=${3:-}
	local i args=()
	[[ -n $host ]] && args=(-H "Host: $host")
	for ((i = 0; i < 100; i++)); do
		if curl -s -o /dev/null "${args[@]}" "http://127.0.0.1:$port$REQ_PATH"; then
			return 0
		fi
		kill -0 "${PIDOF[$name]}" 2>/dev/null || break
		sleep 0.1
	done
	log "--- $tmp/$name.log:"
	cat "$tmp/$name.log" >&2 || true
	die "$name did not start on 127.0.0.1:$port"
}

# --- tools -------------------------------------------------------------------

install_missing() {
	local want=() missing=() unavailable=() pkg bin cand updated=0
	declare -A binof=([nginx]=nginx [haproxy]=haproxy [caddy]=caddy [wrk]=wrk)
	for pkg in nginx haproxy caddy wrk; do
		command -v "${binof[$pkg]}" >/dev/null || want+=("$pkg")
	done
	((${#want[@]})) || return 0
	command -v apt-get >/dev/null || die "missing ${want[*]} and no apt-get to install them"
	for pkg in "${want[@]}"; do
		cand=$(apt-cache policy "$pkg" 2>/dev/null | awk '/Candidate:/ {print $2}')
		if [[ -z $cand || $cand == "(none)" ]] && ((!updated)); then
			log "apt-get update ..."
			apt-get update -qq >/dev/null || die "apt-get update failed"
			updated=1
			cand=$(apt-cache policy "$pkg" 2>/dev/null | awk '/Candidate:/ {print $2}')
		fi
		if [[ -z $cand || $cand == "(none)" ]]; then
			unavailable+=("$pkg")
		else
			missing+=("$pkg")
		fi
	done
	if ((${#missing[@]})); then
		log "installing ${missing[*]} with apt-get (on a systemd host the packages' own services may start; this script does not stop them) ..."
		DEBIAN_FRONTEND=noninteractive apt-get install -y -qq -o DPkg::Lock::Timeout=300 "${missing[@]}" >"$tmp/apt.log" 2>&1 ||
			{ cat "$tmp/apt.log" >&2; die "apt-get install ${missing[*]} failed"; }
	fi
	for pkg in "${unavailable[@]}"; do
		log "NOTE: no Debian package '$pkg' is available here; its variants are skipped."
	done
}

install_missing
for bin in nginx wrk taskset curl go; do
	command -v "$bin" >/dev/null || die "$bin is required"
done
((PROXY_CPU != LOAD_CPU)) || die "PROXY_CPU and LOAD_CPU must differ"
(($(nproc) >= 2)) || die "needs 2 cores (one for the proxy, one for wrk and the origin)"

declare -A SKIP=()
if ! command -v caddy >/dev/null; then
	SKIP[caddy]="caddy is not installed (no Debian package here)"
fi
if ! command -v haproxy >/dev/null; then
	SKIP[haproxy-allow]="haproxy is not installed"
	SKIP[haproxy-block]="haproxy is not installed"
fi

if [[ -n ${EDGE_CANDIDATE:-} ]]; then
	[[ -x $EDGE_CANDIDATE ]] || die "EDGE_CANDIDATE=$EDGE_CANDIDATE is not an executable"
	EDGE_CANDIDATE=$(cd "$(dirname "$EDGE_CANDIDATE")" && pwd)/$(basename "$EDGE_CANDIDATE")
	# Each candidate variant right after its edge counterpart.
	ALL_VARIANTS=${ALL_VARIANTS/edge-allow/edge-allow cand-allow}
	ALL_VARIANTS=${ALL_VARIANTS/edge-block/edge-block cand-block}
fi
if [[ ${NEWCONN:-0} == 1 ]]; then
	[[ -z ${POST_BYTES:-} ]] || die "NEWCONN=1 sends GETs only; unset POST_BYTES"
	NEWCONN_VARIANTS="nginx-block fixed429 raw429 edge-block edge-block-nofast"
	[[ -n ${EDGE_CANDIDATE:-} ]] && NEWCONN_VARIANTS+=" cand-block"
	VARIANTS=${VARIANTS:-$NEWCONN_VARIANTS}
fi
variants=()
for v in ${VARIANTS:-$ALL_VARIANTS}; do
	[[ -n ${KIND[$v]:-} ]] || die "unknown variant $v (known: $ALL_VARIANTS)"
	if [[ -n ${SKIP[$v]:-} ]]; then
		log "NOTE: skipping $v: ${SKIP[$v]}"
		continue
	fi
	variants+=("$v")
done
want() { [[ " ${variants[*]} " == *" $1 "* ]]; }
want_any() { local v; for v; do want "$v" && return 0; done; return 1; }

# --- edge's configurations ---------------------------------------------------

# gen_edge_configs writes bench/edge/*.yaml; they are checked in, and
# regenerated identically on every run so they cannot drift from this script.
gen_edge_configs() {
	local dir=$here/edge
	mkdir -p "$dir"
	local head='# Generated by bench/proxy.sh; edits are overwritten.'
	cat >"$dir/allow.yaml" <<-EOF
		$head
		# One rule keyed by client address with a limit wrk never reaches.
		listen: "127.0.0.1:28088"
		admin_listen: "127.0.0.1:29088"
		origin: "http://127.0.0.1:28080"
		max_keys: 100000
		log: {level: warn}
		domains:
		  - name: bench
		    hosts: ["*"]
		    rules:
		      - name: per-ip
		        limit: 1000000000
		        period: 10s
		        key: [ip]
	EOF
	cat >"$dir/block.yaml" <<-EOF
		$head
		# One rule keyed by client address, 10 requests per 10 s: wrk's
		# requests are almost all refused with 429.
		listen: "127.0.0.1:28089"
		admin_listen: "127.0.0.1:29089"
		origin: "http://127.0.0.1:28080"
		max_keys: 100000
		log: {level: warn}
		domains:
		  - name: bench
		    hosts: ["*"]
		    rules:
		      - name: per-ip
		        limit: 10
		        period: 10s
		        key: [ip]
	EOF
	# edge-block keyed by the token's sub.
	sed -e 's/28089/28103/; s/29089/29103/' -e 's/^        key: \[ip\]$/        key: ["jwt:sub"]/' \
		-e 's/^    hosts: \["\*"\]$/&\n    jwt: {hmac_secret_env: EDGE_BENCH_JWT_SECRET, algorithms: [HS256]}/' \
		-e 's/^# requests are almost all refused with 429.$/# requests are almost all refused with 429, keyed by the sub of the token\n# wrk sends (HS256, verified once, then from the cache)./' \
		-e 's/name: per-ip/name: per-user/' -e 's/^# One rule keyed by client address,/# One rule keyed by jwt:sub,/' \
		"$dir/block.yaml" >"$dir/block-jwt.yaml"
	# edge-allow with the fast path off: every forward through net/http
	# and httputil.ReverseProxy.
	sed -e 's/28088/28094/; s/29088/29094/' -e 's/^log: {level: warn}$/log: {level: warn}\nfastpath: false/' \
		-e 's/^# One rule keyed by client address with a limit wrk never reaches.$/&\n# All through net\/http and httputil.ReverseProxy (fastpath: false)./' \
		"$dir/allow.yaml" >"$dir/allow-nofast.yaml"
	# edge-allow with three servers (the origin on three ports), balanced
	# round robin, each checked every second.
	sed -e 's/28088/28095/; s/29088/29095/' \
		-e 's|^origin: "http://127.0.0.1:28080"$|origins: [{url: "http://127.0.0.1:28080"}, {url: "http://127.0.0.1:28097"}, {url: "http://127.0.0.1:28098"}]\nhealth: {path: /, interval: 1s}|' \
		-e 's/^# One rule keyed by client address with a limit wrk never reaches.$/&\n# Three origin servers, each checked every second./' \
		"$dir/allow.yaml" >"$dir/origins.yaml"
	# The same, with the fast path off: every refusal through net/http.
	sed -e 's/28089/28093/; s/29089/29093/' -e 's/^log: {level: warn}$/log: {level: warn}\nfastpath: false/' \
		-e 's/^# requests are almost all refused with 429.$/# requests are almost all refused with 429, all through net\/http./' \
		"$dir/block.yaml" >"$dir/block-nofast.yaml"
	{
		echo "$head"
		echo "# 50 domains with 5 rules each; wrk sends GET $REQ_PATH to the last one,"
		echo "# site49.example.com, where 4 of its 5 rules match (the 5th is for writes)."
		echo "# No limit is ever reached."
		echo 'listen: "127.0.0.1:28090"'
		echo 'admin_listen: "127.0.0.1:29090"'
		echo 'origin: "http://127.0.0.1:28080"'
		echo 'max_keys: 1000000'
		echo 'log: {level: warn}'
		echo 'domains:'
		local i
		for ((i = 0; i < 50; i++)); do
			printf '  - name: site%02d\n' "$i"
			printf '    hosts: ["site%02d.example.com", "*.site%02d.example.com"]\n' "$i" "$i"
			cat <<-EOF
				    rules:
				      - name: per-ip
				        limit: 1000000000
				        period: 10s
				        key: [ip]
				      - name: api
				        match: {path_prefix: /api/}
				        limit: 1000000000
				        period: 1m
				        key: [ip]
				      - name: per-path
				        limit: 1000000000
				        period: 1m
				        key: [host, path]
				      - name: per-token
				        limit: 1000000000
				        period: 1m
				        key: ["header:X-Api-Key"]
				      - name: writes
				        match: {methods: [POST, PUT, PATCH, DELETE]}
				        limit: 1000
				        period: 1m
				        key: [ip]
			EOF
		done
	} >"$dir/multi.yaml"
}

# --- build and start ---------------------------------------------------------

log "building edge (go build ./cmd/edge) and the bench programs into $tmp ..."
(cd "$repo" && go build -o "$tmp/edge" ./cmd/edge) || die "building edge failed"
(cd "$here" && go build -o "$tmp/bareproxy" ./bareproxy && go build -o "$tmp/fixed429" ./fixed429 && go build -o "$tmp/raw429" ./raw429 &&
	go build -o "$tmp/newconn" ./newconn) ||
	die "building bench/bareproxy, bench/fixed429, bench/raw429 or bench/newconn failed"
gen_edge_configs
for c in allow allow-nofast origins block block-nofast block-jwt multi; do
	"$tmp/edge" -check -config "$here/edge/$c.yaml" >/dev/null || die "bench/edge/$c.yaml is not a valid edge configuration"
done

for v in "${variants[@]}" origin; do
	port_in_use "${PORT[$v]}" && die "127.0.0.1:${PORT[$v]} is already in use; $v needs it"
done
for p in 29088 29089 29090 29091 29092 29093 29094 29095 29099 29100 29103; do
	port_in_use "$p" && die "127.0.0.1:$p is already in use (edge's admin listener)"
done

mkdir -p "$tmp/nginx-origin/logs" "$tmp/nginx-proxy/logs" "$tmp/caddy"
start nginx-origin "$LOAD_CPU" nginx -p "$tmp/nginx-origin/" -e "$tmp/nginx-origin/logs/error.log" \
	-c "$here/conf/nginx-origin.conf" -g "daemon off; pid $tmp/nginx-origin/nginx.pid;"
wait_http nginx-origin 28080
PIDOF[origin]=${PIDOF[nginx-origin]}

if want_any nginx-allow nginx-block nginx-allow-log nginx-block-log; then
	start nginx-proxy "$PROXY_CPU" nginx -p "$tmp/nginx-proxy/" -e "$tmp/nginx-proxy/logs/error.log" \
		-c "$here/conf/nginx-proxy.conf" -g "daemon off; pid $tmp/nginx-proxy/nginx.pid;"
	wait_http nginx-proxy 28082
	PIDOF[nginx-allow]=${PIDOF[nginx-proxy]} PIDOF[nginx-block]=${PIDOF[nginx-proxy]}
	PIDOF[nginx-allow-log]=${PIDOF[nginx-proxy]} PIDOF[nginx-block-log]=${PIDOF[nginx-proxy]}
fi
if want_any haproxy-allow haproxy-block; then
	start haproxy "$PROXY_CPU" haproxy -db -f "$here/conf/haproxy.cfg"
	wait_http haproxy 28084
	PIDOF[haproxy-allow]=${PIDOF[haproxy]} PIDOF[haproxy-block]=${PIDOF[haproxy]}
fi
if want caddy; then
	HOME=$tmp/caddy XDG_DATA_HOME=$tmp/caddy XDG_CONFIG_HOME=$tmp/caddy GOMAXPROCS=1 \
		start caddy "$PROXY_CPU" caddy run --config "$here/conf/Caddyfile" --adapter caddyfile
	wait_http caddy 28086
fi
if want bare; then
	GOMAXPROCS=1 start bare "$PROXY_CPU" "$tmp/bareproxy" -listen 127.0.0.1:28081 -origin http://127.0.0.1:28080
	wait_http bare 28081
fi
if want fixed429; then
	GOMAXPROCS=1 start fixed429 "$PROXY_CPU" "$tmp/fixed429" -listen 127.0.0.1:28087
	wait_http fixed429 28087
fi
if want raw429; then
	GOMAXPROCS=1 start raw429 "$PROXY_CPU" "$tmp/raw429" -listen 127.0.0.1:28096
	wait_http raw429 28096
fi
declare -A EDGECONF=([edge-allow]=allow [edge-allow-nofast]=allow-nofast [edge-3origins]=origins [edge-block]=block [edge-block-nofast]=block-nofast [edge-block-jwt]=block-jwt [edge-50x5]=multi)
for v in edge-allow edge-allow-nofast edge-3origins edge-block edge-block-nofast edge-block-jwt edge-50x5; do
	want "$v" || continue
	GOMAXPROCS=1 start "$v" "$PROXY_CPU" "$tmp/edge" -config "$here/edge/${EDGECONF[$v]}.yaml"
	wait_http "$v" "${PORT[$v]}" "${HOSTHDR[$v]:-}"
done
for v in edge-allow-log edge-block-log; do
	want "$v" || continue
	conf=${v#edge-}
	conf=${conf%-log}
	# edge's configuration on this variant's ports, with a JSON access log
	# in the run's directory.
	ep=${PORT[edge-$conf]} vp=${PORT[$v]}
	sed -e "s/127.0.0.1:$ep\"/127.0.0.1:$vp\"/" -e "s/127.0.0.1:$((ep + 1000))\"/127.0.0.1:$((vp + 1000))\"/" \
		"$here/edge/$conf.yaml" >"$tmp/$v.yaml"
	printf 'access_log: {path: "%s", format: json}\n' "$tmp/$v.access.log" >>"$tmp/$v.yaml"
	GOMAXPROCS=1 start "$v" "$PROXY_CPU" "$tmp/edge" -config "$tmp/$v.yaml"
	wait_http "$v" "${PORT[$v]}"
done
for v in cand-allow cand-block; do
	want "$v" || continue
	conf=${v#cand-}
	# edge's configuration on the candidate's ports.
	ep=${PORT[edge-$conf]} cp=${PORT[$v]}
	sed -e "s/127.0.0.1:$ep\"/127.0.0.1:$cp\"/" -e "s/127.0.0.1:$((ep + 1000))\"/127.0.0.1:$((cp + 1000))\"/" \
		"$here/edge/$conf.yaml" >"$tmp/$v.yaml"
	GOMAXPROCS=1 start "$v" "$PROXY_CPU" "$EDGE_CANDIDATE" -config "$tmp/$v.yaml"
	wait_http "$v" "${PORT[$v]}"
done
sleep 0.5
for name in nginx-origin nginx-proxy; do
	[[ -n ${PIDOF[$name]:-} ]] || continue
	for c in $(pgrep -P "${PIDOF[$name]}" || true); do CHILDREN+=("$c"); done
done

# Every variant answers as it should before anything is measured.
for v in "${variants[@]}"; do
	args=()
	[[ -n ${HOSTHDR[$v]:-} ]] && args=(-H "Host: ${HOSTHDR[$v]}")
	[[ -n ${AUTHHDR[$v]:-} ]] && args+=(-H "Authorization: ${AUTHHDR[$v]}")
	for _ in 1 2 3 4 5 6 7 8 9 10 11 12; do
		code=$(curl -s -o /dev/null -w '%{http_code}' "${args[@]}" "http://127.0.0.1:${PORT[$v]}$REQ_PATH")
	done
	wantcode=200
	[[ ${KIND[$v]} == block ]] && wantcode=429
	[[ $code == "$wantcode" ]] || die "$v answered $code after 12 requests, want $wantcode"
done

# --- measurement -------------------------------------------------------------

CLK_TCK=$(getconf CLK_TCK)

# proc_ticks PID...: utime+stime of the processes and their children, in
# clock ticks (all threads included).
proc_ticks() {
	local pids=() p c t=0
	for p; do
		pids+=("$p")
		for c in $(pgrep -P "$p" || true); do pids+=("$c"); done
	done
	for p in "${pids[@]}"; do
		[[ -r /proc/$p/stat ]] || continue
		# Fields after the ")" that ends the command name: utime is the 12th, stime the 13th.
		t=$((t + $(sed 's/^.*) //' "/proc/$p/stat" | awk '{print $12 + $13}')))
	done
	echo "$t"
}

# cpu_ticks CPU: "busy total" ticks of one core from /proc/stat (busy
# includes steal: time the hypervisor gave to someone else).
cpu_ticks() {
	awk -v c="cpu$1" '$1 == c {t = 0; for (i = 2; i <= NF; i++) t += $i; print t - $5 - $6, t}' /proc/stat
}

# to_ms VALUE: wrk's "471.00us", "9.62ms", "1.02s" in milliseconds.
to_ms() {
	awk -v v="$1" 'BEGIN {
		if (v ~ /us$/) { sub(/us$/, "", v); printf "%.3f", v / 1000 }
		else if (v ~ /ms$/) { sub(/ms$/, "", v); printf "%.3f", v }
		else if (v ~ /s$/) { sub(/s$/, "", v); printf "%.3f", v * 1000 }
		else printf "nan" }'
}

results=$tmp/results.tsv
METHOD=GET
if [[ -n ${POST_BYTES:-} ]]; then
	[[ $POST_BYTES =~ ^[0-9]+$ ]] || die "POST_BYTES must be a number of bytes, got $POST_BYTES"
	METHOD="POST of $POST_BYTES bytes to"
	printf 'wrk.method = "POST"\nwrk.body = string.rep("x", %d)\n' "$POST_BYTES" >"$tmp/post.lua"
fi
printf 'round\tvariant\trps\tp50_ms\tp99_ms\tcpu_us\tproxy_cpu_pct\tother_pct\tnon2xx_pct\terrors\n' >"$results"

# measure ROUND VARIANT: warm up, then one measured wrk run.
measure() {
	local round=$1 v=$2 pid=${PIDOF[$2]} url="http://127.0.0.1:${PORT[$2]}$REQ_PATH"
	local args=(-t1 "-c$CONNS")
	[[ -n ${HOSTHDR[$v]:-} ]] && args+=(-H "Host: ${HOSTHDR[$v]}")
	[[ -n ${AUTHHDR[$v]:-} ]] && args+=(-H "Authorization: ${AUTHHDR[$v]}")
	[[ -n ${POST_BYTES:-} ]] && args+=(-s "$tmp/post.lua")
	local warm=(wrk "${args[@]}" "-d${WARMUP}s" "$url") run=(wrk "${args[@]}" "-d${DURATION}s" --latency "$url")
	if [[ ${NEWCONN:-0} == 1 ]]; then
		local gen=("$tmp/newconn" -c "$CONNS" -addr "127.0.0.1:${PORT[$v]}" -path "$REQ_PATH"
			-host "${HOSTHDR[$v]:-127.0.0.1:${PORT[$v]}}")
		warm=("${gen[@]}" -d "${WARMUP}s") run=("${gen[@]}" -d "${DURATION}s")
	fi
	GOMAXPROCS=1 taskset -c "$LOAD_CPU" "${warm[@]}" >/dev/null &
	wait $!
	local cpu=$PROXY_CPU
	[[ $v == origin ]] && cpu=$LOAD_CPU
	local t0 t1 c0 c1
	t0=$(proc_ticks "$pid")
	c0=$(cpu_ticks "$cpu")
	GOMAXPROCS=1 taskset -c "$LOAD_CPU" "${run[@]}" >"$tmp/wrk.out" 2>&1 &
	wait $!
	t1=$(proc_ticks "$pid")
	c1=$(cpu_ticks "$cpu")
	local reqs rps p50 p99 non2xx errs
	reqs=$(awk '/requests in/ {print $1}' "$tmp/wrk.out")
	rps=$(awk '/^Requests\/sec:/ {print $2}' "$tmp/wrk.out")
	p50=$(to_ms "$(awk '$1 == "50%" {print $2}' "$tmp/wrk.out")")
	p99=$(to_ms "$(awk '$1 == "99%" {print $2}' "$tmp/wrk.out")")
	non2xx=$(awk '/Non-2xx or 3xx responses:/ {print $NF}' "$tmp/wrk.out")
	errs=$(awk '/Socket errors:/ {gsub(/,/, ""); print $4 + $6 + $8 + $10}' "$tmp/wrk.out")
	if [[ -z $reqs || -z $rps || $reqs == 0 ]]; then
		cat "$tmp/wrk.out" >&2
		die "wrk against $v produced no result"
	fi
	awk -v r="$round" -v v="$v" -v n="$reqs" -v rps="$rps" -v p50="$p50" -v p99="$p99" \
		-v dt=$((t1 - t0)) -v hz="$CLK_TCK" -v c0="$c0" -v c1="$c1" -v bad="${non2xx:-0}" -v errs="${errs:-0}" \
		-v self="$([[ $v == origin ]] && echo 1 || echo 0)" 'BEGIN {
		split(c0, a, " "); split(c1, b, " ")
		busy = b[1] - a[1]; total = b[2] - a[2]
		other = total > 0 ? 100 * (busy - dt) / total : 0
		if (other < 0) other = 0
		pct = total > 0 ? 100 * dt / total : 0
		printf "%d\t%s\t%.0f\t%s\t%s\t%.2f\t%.0f\t%s\t%.1f\t%d\n", r, v, rps, p50, p99,
			dt * 1e6 / hz / n, pct, self ? "-" : sprintf("%.0f", other), 100 * bad / n, errs
	}' >>"$results"
	tail -n 1 "$results" | awk -F'\t' '{printf "  round %s  %-14s %8s req/s  p50 %7s ms  p99 %7s ms  %6s us/req  proxy core %s%% (others %s%%)  non-2xx %s%%\n", $1, $2, $3, $4, $5, $6, $7, $8, $9}' >&2
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
		# Round r starts r-1 places further along the list, so no variant is
		# always measured first (or always right after the same neighbour).
		measure "$r" "${variants[(i + r - 1) % n]}"
	done
done
[[ -n ${KEEP_RESULTS:-} ]] && cp "$results" "$KEEP_RESULTS"

# --- report ------------------------------------------------------------------

echo
echo "## edge proxy benchmark"
echo
echo "$(date -u '+%Y-%m-%d %H:%M UTC'); $(nproc) cores ($(lscpu | awk -F: '/Model name/ {gsub(/^ +/, "", $2); print $2; exit}')), kernel $(uname -r), $(go version | awk '{print $3}')."
LOADGEN="wrk -t1 -c$CONNS"
[[ ${NEWCONN:-0} == 1 ]] && LOADGEN="bench/newconn -c $CONNS (a new connection per request, closed by the client)"
echo "nginx $(nginx -v 2>&1 | sed 's|.*nginx/||'), HAProxy $(haproxy -v 2>/dev/null | awk 'NR == 1 {print $3}'), Caddy $(caddy version 2>/dev/null | awk '{print $1}'), $LOADGEN, $METHOD $REQ_PATH."
echo "Proxy on core $PROXY_CPU (1 worker; GOMAXPROCS=1), wrk and the origin on core $LOAD_CPU. $ROUNDS rounds x ${DURATION}s; medians over rounds."
echo
for v in "${!SKIP[@]}"; do echo "Skipped $v: ${SKIP[$v]}."; done

DESCS=$(for v in "${variants[@]}"; do printf '%s\t%s\n' "$v" "${DESC[$v]}"; done)
KINDS=$(for v in "${variants[@]}"; do printf '%s\t%s\n' "$v" "${KIND[$v]}"; done)
ORDER="${variants[*]}"

awk -F'\t' -v order="$ORDER" -v descs="$DESCS" -v kinds="$KINDS" '
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
function ratio(a, b, col,    r, x, list) {
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
	split(kinds, d, "\n"); for (i in d) { split(d[i], p, "\t"); K[p[1]] = p[2] }
}
NR > 1 {
	r = $1; v = $2
	if (r > R) R = r
	V[r, v] = $3 SUBSEP $6
	add(v ",rps", $3); add(v ",p50", $4); add(v ",p99", $5); add(v ",cpu", $6)
	add(v ",pct", $7); if ($8 != "-") add(v ",oth", $8); add(v ",bad", $9); add(v ",err", $10)
}
END {
	print "| variant | req/s | p50 ms | p99 ms | CPU us/req | proxy core busy | other load on proxy core | non-2xx | socket errors |"
	print "|---|---:|---:|---:|---:|---:|---:|---:|---:|"
	for (i = 1; i <= n; i++) {
		v = O[i]
		oth = (v ",oth") in L ? sprintf("%.0f%%", median(L[v ",oth"])) : "-"
		printf "| %s: %s | %.0f | %.2f | %.2f | %.1f | %.0f%% | %s | %.1f%% | %d |\n", v, D[v],
			median(L[v ",rps"]), median(L[v ",p50"]), median(L[v ",p99"]), median(L[v ",cpu"]),
			median(L[v ",pct"]), oth, median(L[v ",bad"]), median(L[v ",err"])
	}
	print ""
	print "Ratios, computed pair by pair within each round: median over rounds (min-max)."
	print "The nginx reference is nginx on the same path (never-blocking or blocking);"
	print "the Go reference is the bare Go proxy for forwarding variants and the fixed-429"
	print "Go server for blocking ones. req/s: higher is better; CPU per request: lower is better."
	print ""
	print "| variant | req/s / nginx | req/s / bare Go proxy | req/s / Go reference | CPU/req / nginx | CPU/req / Go reference |"
	print "|---|---:|---:|---:|---:|---:|"
	for (i = 1; i <= n; i++) {
		v = O[i]
		if (K[v] == "origin") continue
		ng = K[v] == "block" ? "nginx-block" : "nginx-allow"
		go = K[v] == "block" ? "fixed429" : "bare"
		printf "| %s | %s | %s | %s | %s | %s |\n", v, ratio(v, ng, 1), ratio(v, "bare", 1),
			ratio(v, go, 1), ratio(v, ng, 2), ratio(v, go, 2)
	}
	print ""
	print "Targets, req/s ratios within each round, median (min-max):"
	print ""
	print "| target | ratio | want | met |"
	print "|---|---:|---:|---|"
	t[1] = "edge-allow bare 0.95 edge never-blocking vs bare Go proxy"
	t[2] = "edge-allow caddy 1.0 edge never-blocking vs Caddy"
	t[3] = "edge-block fixed429 0.9 edge blocking vs fixed-429 Go server"
	t[4] = "edge-allow nginx-allow 1.0 moonshot: edge never-blocking vs nginx"
	t[5] = "edge-block nginx-block 1.0 moonshot: edge blocking vs nginx"
	t[6] = "edge-50x5 bare 0.95 (extra) edge 50x5 rules vs bare Go proxy"
	t[7] = "cand-allow bare 0.95 candidate never-blocking vs bare Go proxy"
	t[8] = "cand-allow caddy 1.0 candidate never-blocking vs Caddy"
	t[9] = "cand-block fixed429 0.9 candidate blocking vs fixed-429 Go server"
	t[10] = "cand-allow edge-allow 1.0 (extra) candidate never-blocking vs edge"
	t[11] = "cand-block edge-block 1.0 (extra) candidate blocking vs edge"
	for (i = 1; i <= 11; i++) {
		split(t[i], f, " "); label = t[i]; sub(/^[^ ]+ [^ ]+ [^ ]+ /, "", label)
		s = ratio(f[1], f[2], 1)
		if (s == "-" && f[1] ~ /^cand-/) continue
		if (s == "-") { printf "| %s | - | >= %s | not measured |\n", label, f[3]; continue }
		m = median(RL) + 0
		printf "| %s | %s | >= %s | %s |\n", label, s, f[3], (m >= f[3] ? "yes" : "no")
	}
	print ""
	print "CPU per request, ratios within each round, median (min-max); lower is better:"
	print ""
	print "| target | ratio | want | met |"
	print "|---|---:|---:|---|"
	c[1] = "edge-block nginx-block 1.3 edge blocking vs nginx limit_req"
	c[2] = "edge-block-nofast nginx-block 1.3 (extra) edge blocking with fastpath: false vs nginx"
	c[3] = "edge-block edge-block-nofast 1.0 (extra) edge blocking vs the same with fastpath: false"
	c[4] = "edge-allow nginx-allow 2.0 edge forwarding vs nginx"
	c[5] = "edge-allow-nofast nginx-allow 2.0 (extra) edge forwarding with fastpath: false vs nginx"
	c[6] = "edge-allow edge-allow-nofast 1.0 (extra) edge forwarding vs the same with fastpath: false"
	c[7] = "raw429 nginx-block 1.3 (extra) Go floor (raw net server, fixed 429 bytes) vs nginx limit_req"
	c[8] = "edge-block raw429 1.0 (extra) edge blocking vs the Go floor"
	c[9] = "edge-3origins edge-allow 1.10 edge forwarding to 3 servers with active checks vs 1 server"
	c[10] = "edge-block-log edge-block 1.15 edge blocking with a JSON access log vs without"
	c[11] = "edge-allow-log edge-allow 1.15 edge forwarding with a JSON access log vs without"
	c[12] = "nginx-block-log nginx-block - (record) nginx blocking with access_log on vs off"
	c[13] = "nginx-allow-log nginx-allow - (record) nginx forwarding with access_log on vs off"
	c[14] = "edge-block-jwt edge-block 1.2 edge blocking keyed by jwt:sub (cached token) vs keyed by ip"
	for (i = 1; i <= 14; i++) {
		split(c[i], f, " "); label = c[i]; sub(/^[^ ]+ [^ ]+ [^ ]+ /, "", label)
		s = ratio(f[1], f[2], 2)
		if (s == "-") { printf "| %s | - | <= %s | not measured |\n", label, f[3]; continue }
		if (f[3] == "-") { printf "| %s | %s | - | recorded |\n", label, s; continue }
		m = median(RL) + 0
		printf "| %s | %s | <= %s | %s |\n", label, s, f[3], (m <= f[3] ? "yes" : "no")
	}
}' "$results"
echo
echo "Per-round rows (round, variant, req/s, p50 ms, p99 ms, CPU us/req, proxy core %, others %, non-2xx %, errors):"
echo
echo '```'
tail -n +2 "$results" | sort -t$'\t' -k2,2 -k1,1n | column -t -s$'\t'
echo '```'
