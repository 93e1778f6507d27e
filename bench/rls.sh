#!/usr/bin/env bash
# bench/rls.sh: edge as Envoy's rate limit service against Lyft's
# ratelimit (github.com/envoyproxy/ratelimit, built with `go install` from
# the Go module proxy at a pinned version), with the same configuration file
# (bench/conf/rls/bench.yaml) and the same descriptors (bench/rlsload).
#
#   bash bench/rls.sh              # 5 rounds of 8 s per variant, about 6 minutes
#   QUICK=1 bash bench/rls.sh      # 3 rounds of 3 s
#
# Variants:
#   lyft        Lyft's ratelimit with its Redis (fixed windows in Redis,
#               one pipelined round trip per call), local cache off (its
#               default)
#   edge-local  edge counting on its own node (sliding window, the default)
#   edge-exact  edge counting in the same Redis, cluster.sync exact,
#               rls.algorithm fixed_window (Lyft's counting)
#
# The server under test and its Redis run pinned to one core (SERVER_CPU,
# default 0), the Go servers with GOMAXPROCS=1; the load generator runs on
# the other (LOAD_CPU, default 1). CPU per decision is the user+system time
# of the server and, for the variants that use it, of redis-server, read
# from /proc before and after each measurement. Variants are measured in
# rounds, each round in a rotated order; ratios are computed within a round
# and reported as the median over rounds, so a noisy neighbour slows both
# sides of a ratio.
#
# SUMMARIZE=FILE prints the summary of rows saved from an earlier run and
# exits. Knobs: ROUNDS, DURATION, WARMUP (seconds), WORKERS (calls in flight, 64),
# KEYS (client addresses, 10000), LYFT_VERSION (the module version built).
# It listens only on 127.0.0.1:28379 (Redis), 28180-28182 (Lyft) and
# 28190-28192 (edge), and stops every process it started by its PID when it
# exits, however it exits. It stops nothing else.
set -euo pipefail

here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
repo=$(dirname "$here")

if [[ ${QUICK:-0} == 1 ]]; then
	ROUNDS=${ROUNDS:-3} DURATION=${DURATION:-3} WARMUP=${WARMUP:-1}
else
	ROUNDS=${ROUNDS:-5} DURATION=${DURATION:-8} WARMUP=${WARMUP:-2}
fi
WORKERS=${WORKERS:-64}
KEYS=${KEYS:-10000}
SERVER_CPU=${SERVER_CPU:-0}
LOAD_CPU=${LOAD_CPU:-1}
# Lyft's ratelimit publishes no release tags as Go module versions; this is
# the pseudo-version the module proxy serves as its latest.
LYFT_VERSION=${LYFT_VERSION:-v1.4.1-0.20260122083618-3fb702589d36}
REDIS_PORT=28379
VARIANTS=${VARIANTS:-"lyft edge-local edge-exact"}

# summarize FILE prints the medians of the rows in FILE ("round=N VARIANT
# key=value ...", as the run prints them): per variant, and each variant's
# ratios to lyft computed within each round.
summarize() {
	echo "Medians over the rounds (ratios computed within each round):"
	awk '
function val(line, key,   i, f, n) { n = split(line, f, " "); for (i = 1; i <= n; i++) if (index(f[i], key "=") == 1) return substr(f[i], length(key) + 2); return "" }
function median(a, n,   i, j, t) { for (i = 1; i <= n; i++) for (j = i + 1; j <= n; j++) if (a[j] < a[i]) { t = a[i]; a[i] = a[j]; a[j] = t }
	return n % 2 ? a[(n + 1) / 2] : (a[n / 2] + a[n / 2 + 1]) / 2 }
/^round=/ { r = val($0, "round"); v = $2; dps[v, r] = val($0, "decisions/s") + 0; eff[v, r] = val($0, "decisions/cpu_s") + 0
  p99[v, r] = val($0, "p99_ms") + 0; cpu[v, r] = val($0, "cpu_us/decision") + 0; rounds[r] = 1; seen[v] = 1 }
END {
	for (v in seen) {
		k = 0; for (r in rounds) { k++; a[k] = dps[v, r] } m1 = median(a, k)
		k = 0; for (r in rounds) { k++; a[k] = eff[v, r] } m2 = median(a, k)
		k = 0; for (r in rounds) { k++; a[k] = cpu[v, r] } m3 = median(a, k)
		k = 0; for (r in rounds) { k++; a[k] = p99[v, r] } m4 = median(a, k)
		printf "  %-11s %8.0f decisions/s  %6.1f µs CPU/decision  %8.0f decisions/CPU-s  p99 %7.2f ms\n", v, m1, m3, m2, m4
	}
	for (v in seen) if (v != "lyft" && seen["lyft"]) {
		k = 0; for (r in rounds) { k++; a[k] = eff[v, r] / eff["lyft", r] } e = median(a, k)
		k = 0; for (r in rounds) { k++; a[k] = dps[v, r] / dps["lyft", r] } d = median(a, k)
		printf "  %-11s ÷ lyft: %.2fx decisions per CPU-second, %.2fx decisions/s\n", v, e, d
	}
}' "$1"
}

log() { printf '%s\n' "$*" >&2; }
if [[ -n ${SUMMARIZE:-} ]]; then
	summarize "$SUMMARIZE"
	exit 0
fi
die() { log "rls.sh: $*"; exit 1; }

work=$(mktemp -d)
PIDS=()
cleanup() {
	trap - EXIT INT TERM
	for pid in "${PIDS[@]}"; do
		kill -TERM "$pid" 2>/dev/null || true
	done
	for pid in "${PIDS[@]}"; do
		for _ in $(seq 50); do kill -0 "$pid" 2>/dev/null || break; sleep 0.1; done
		kill -KILL "$pid" 2>/dev/null || true
	done
	rm -rf "$work"
}
trap cleanup EXIT
trap 'exit 130' INT
trap 'exit 143' TERM

# stop_pid stops one process this script started.
stop_pid() {
	kill -TERM "$1" 2>/dev/null || true
	for _ in $(seq 100); do kill -0 "$1" 2>/dev/null || return 0; sleep 0.1; done
	kill -KILL "$1" 2>/dev/null || true
}

wait_port() {
	for _ in $(seq 100); do
		(exec 3<>"/dev/tcp/127.0.0.1/$1") 2>/dev/null && return 0
		sleep 0.1
	done
	die "nothing listens on port $1"
}

command -v redis-server >/dev/null || die "redis-server is needed (apt-get install redis-server)"

log "== building edge, rlsload and Lyft's ratelimit $LYFT_VERSION"
(cd "$repo" && CGO_ENABLED=0 go build -o "$work/edge" ./cmd/edge)
(cd "$here" && go build -o "$work/rlsload" ./rlsload)
GOBIN="$work" GOFLAGS= go install "github.com/envoyproxy/ratelimit/src/service_cmd@$LYFT_VERSION" ||
	die "could not build Lyft's ratelimit at $LYFT_VERSION"

# The same file for both: Lyft reads RUNTIME_ROOT/RUNTIME_SUBDIRECTORY/config.
mkdir -p "$work/runtime/ratelimit/config"
cp "$here/conf/rls/bench.yaml" "$work/runtime/ratelimit/config/bench.yaml"
cat > "$work/edge-local.yaml" <<CFG
listen: "127.0.0.1:28190"
admin_listen: "127.0.0.1:28191"
log: {level: warn}
rls: {listen: "127.0.0.1:28192", config: ["runtime/ratelimit/config/bench.yaml"]}
domains: [{hosts: ["*"], respond: {body: ok}}]
CFG
cat > "$work/edge-exact.yaml" <<CFG
listen: "127.0.0.1:28190"
admin_listen: "127.0.0.1:28191"
log: {level: warn}
cluster: {store: redis, sync: exact, redis: {addresses: ["127.0.0.1:$REDIS_PORT"]}}
rls: {listen: "127.0.0.1:28192", config: ["runtime/ratelimit/config/bench.yaml"], algorithm: fixed_window}
domains: [{hosts: ["*"], respond: {body: ok}}]
CFG
"$work/edge" -check -config "$work/edge-local.yaml" >&2
"$work/edge" -check -config "$work/edge-exact.yaml" >&2

taskset -c "$SERVER_CPU" redis-server --port "$REDIS_PORT" --bind 127.0.0.1 --save "" --appendonly no \
	--loglevel warning >"$work/redis.log" 2>&1 &
REDIS_PID=$!
PIDS+=("$REDIS_PID")
wait_port "$REDIS_PORT"

# run VARIANT ROUND: starts the variant's server, measures, stops it, and
# prints rlsload's line.
run() {
	local v=$1 pid port pids
	redis-cli -p "$REDIS_PORT" flushall >/dev/null
	case $v in
	lyft)
		env -i PATH="$PATH" HOME="$work" GOMAXPROCS=1 USE_STATSD=false LOG_LEVEL=warn \
			REDIS_SOCKET_TYPE=tcp REDIS_URL="127.0.0.1:$REDIS_PORT" \
			RUNTIME_ROOT="$work/runtime" RUNTIME_SUBDIRECTORY=ratelimit RUNTIME_WATCH_ROOT=false \
			HOST=127.0.0.1 PORT=28180 DEBUG_HOST=127.0.0.1 DEBUG_PORT=28181 GRPC_HOST=127.0.0.1 GRPC_PORT=28182 \
			taskset -c "$SERVER_CPU" "$work/service_cmd" >"$work/$v.log" 2>&1 &
		pid=$! port=28182 pids="$pid,$REDIS_PID"
		;;
	edge-local | edge-exact)
		GOMAXPROCS=1 taskset -c "$SERVER_CPU" "$work/edge" -config "$work/$v.yaml" >"$work/$v.log" 2>&1 &
		pid=$! port=28192 pids=$pid
		[[ $v == edge-exact ]] && pids="$pid,$REDIS_PID"
		;;
	esac
	PIDS+=("$pid")
	wait_port "$port"
	taskset -c "$LOAD_CPU" "$work/rlsload" -addr "127.0.0.1:$port" -label "$v" -pids "$pids" \
		-duration "${DURATION}s" -warmup "${WARMUP}s" -workers "$WORKERS" -keys "$KEYS" ||
		{ cat "$work/$v.log" >&2; die "$v failed"; }
	stop_pid "$pid"
}

results="$work/results"
read -r -a vs <<<"$VARIANTS"
for r in $(seq "$ROUNDS"); do
	log "== round $r"
	n=${#vs[@]}
	for i in $(seq 0 $((n - 1))); do
		v=${vs[$(((i + r) % n))]}
		line=$(run "$v")
		echo "round=$r $line" | tee -a "$results"
	done
done


echo
summarize "$results"
