#!/usr/bin/env bash
# A three-node PoP on one machine: one redis-server and three edge processes
# sharing its counters, all on loopback ports, stopped by PID on exit.
#
#   docs/cluster.sh            run until Ctrl-C
#   docs/cluster.sh demo       send 30 requests from one client, spread over
#                              the three nodes, print the statuses, stop
#
# SYNC=batched selects batched mode (default exact); BASE_PORT moves the
# ports (default 18080: edges on 18081-18083, admin on 19081-19083, redis
# on 16379).
set -euo pipefail
cd "$(dirname "$0")/.."
command -v redis-server >/dev/null || { echo "cluster.sh: redis-server is not installed (apt-get install redis-server)" >&2; exit 1; }
sync=${SYNC:-exact}
base=${BASE_PORT:-18080}
redis_port=$((base - 1701))
tmp=$(mktemp -d)
pids=()
stop() {
	for pid in "${pids[@]}"; do kill "$pid" 2>/dev/null || true; done
	for pid in "${pids[@]}"; do wait "$pid" 2>/dev/null || true; done
	rm -rf "$tmp"
}
trap stop EXIT
trap 'exit 130' INT TERM

go build -o "$tmp/edge" ./cmd/edge
redis-server --port "$redis_port" --bind 127.0.0.1 --save '' --appendonly no --loglevel warning >"$tmp/redis.log" 2>&1 &
pids+=($!)
for i in 1 2 3; do
	cat >"$tmp/edge$i.yaml" <<YAML
listen: "127.0.0.1:$((base + i))"
admin_listen: "127.0.0.1:$((base + 1000 + i))"
pop: demo
cluster:
  store: redis
  redis:
    addresses: ["127.0.0.1:$redis_port"]
  sync: $sync
domains:
  - name: demo
    hosts: ["*"]
    respond: {body: "hello from edge $i\n"}
    rules:
      - {name: per-ip, limit: 10, period: 1m}
YAML
	"$tmp/edge" -config "$tmp/edge$i.yaml" 2>"$tmp/edge$i.log" &
	pids+=($!)
done
for i in 1 2 3; do
	for _ in $(seq 50); do
		curl -fs "http://127.0.0.1:$((base + 1000 + i))/readyz" >/dev/null && break
		sleep 0.1
	done
done
sleep 2.2 # two heartbeats: every node knows of three
echo "redis on 127.0.0.1:$redis_port; edge nodes on 127.0.0.1:$((base + 1))-$((base + 3)) (admin $((base + 1001))-$((base + 1003))), sync $sync"
curl -s "http://127.0.0.1:$((base + 1001))/metrics" | grep -E '^edge_cluster_nodes|^edge_store_circuit_state'

if [ "${1:-}" = demo ]; then
	for n in $(seq 30); do
		i=$(( (n - 1) % 3 + 1 ))
		echo "node $i: $(curl -s -o /dev/null -w '%{http_code}' "http://127.0.0.1:$((base + i))/")"
	done | sort | uniq -c
	exit 0
fi
echo "Ctrl-C stops redis and the three nodes."
wait
