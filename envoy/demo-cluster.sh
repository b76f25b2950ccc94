#!/usr/bin/env bash
# The fleet demo without Docker: Redis, the L2 service, the origin and two Envoys on the shipped
# envoy/fleet.yaml (Envoy B's listeners and admin moved to 8180, 8182 and 9902), the topology of
# envoy/docker-compose.fleet.yml. Walks through the shared cache with curl (MISS on A, HIT from the
# L2 on B, a purge sent to A honoured on B), then keeps serving until Ctrl-C (or for DEMO_SECONDS
# seconds; DEMO_SECONDS=0 exits after the walkthrough). Every process it starts stops with it.
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
root="$(dirname "$here")"
# Paths as given (absolute, or relative to the repository), since each process runs elsewhere.
abs() { case "$1" in /*) echo "$1" ;; *) echo "$root/$1" ;; esac; }
ENVOY="$(abs "${ENVOY:-.tools/bin/envoy}")"
WASM="$(abs "${WASM:-target/wasm32-wasip1/release/graphql_cache.wasm}")"
ORIGIN="$(abs "${ORIGIN:-target/release/graphql-origin}")"
L2="$(abs "${L2:-target/release/graphql-cache-l2}")"
# Not 6379, so that a Redis already running on this machine is left alone.
REDIS_PORT="${REDIS_PORT:-6390}"
PURGE_TOKEN=demo-purge-token-change-me
# The secret the L2 service requires of its callers (the Envoys send it from the same variable).
# A fixed development value: change it anywhere that is not your machine.
export GRAPHQL_CACHE_L2_SECRET="${GRAPHQL_CACHE_L2_SECRET:-dev-l2-secret-change-me-0123456789}"
logs="$root/.tools/demo-cluster"
mkdir -p "$logs"
# A redis-server on PATH, else the one `make redis` puts under .tools/redis (`make demo-cluster` does).
PATH="$PATH:$root/.tools/redis/bin"
command -v redis-server >/dev/null || { echo "redis-server not found: run \`make redis\` (or make demo-cluster)"; exit 1; }

pids=()
stop_all() { [ ${#pids[@]} -eq 0 ] || kill "${pids[@]}" 2>/dev/null || true; wait 2>/dev/null || true; }
trap stop_all EXIT INT TERM
# run NAME DIR COMMAND...: in the background from DIR, output in $logs/NAME.log.
run() { local name="$1" dir="$2"; shift 2; (cd "$dir" && exec "$@") >"$logs/$name.log" 2>&1 & pids+=($!); }

ln -sf "$WASM" "$here/graphql_cache.wasm"
sed -e 's/port_value: 8080/port_value: 8180/' -e 's/port_value: 8082/port_value: 8182/' \
    -e 's/port_value: 9901/port_value: 9902/' "$here/fleet.yaml" >"$logs/fleet-b.yaml"

run redis "$logs" redis-server --port "$REDIS_PORT" --bind 127.0.0.1 --save "" --appendonly no
run l2 "$root" "$L2" --listen 127.0.0.1:8090 --redis "redis://127.0.0.1:$REDIS_PORT"
run origin "$root" "$ORIGIN" --listen 127.0.0.1:8081 --delay-ms 100
# The Envoys come last: an L2 that is not up yet would fail their first health check, and they
# would go without it for a second.
for _ in $(seq 1 100); do
  curl -fs http://127.0.0.1:8090/health >/dev/null 2>&1 && curl -fs http://127.0.0.1:8081/_origin/health >/dev/null 2>&1 && break
  sleep 0.1
done
# The Envoys' secrets, read by the filter through vm_config.environment_variables (fleet.yaml):
# demo values, the same on every Envoy. Change them for anything but a demo.
export GRAPHQL_CACHE_FLEET_KEY="${GRAPHQL_CACHE_FLEET_KEY:-dev-fleet-key-change-me-0123456789abcdef}"
export GRAPHQL_CACHE_L2_SECRET="${GRAPHQL_CACHE_L2_SECRET:-dev-l2-secret-change-me-0123456789}"
export GRAPHQL_CACHE_PURGE_TOKEN="${GRAPHQL_CACHE_PURGE_TOKEN:-demo-purge-token-change-me}"
# The wasm path in fleet.yaml is relative to Envoy's working directory: envoy/ for both.
run envoy-a "$here" "$ENVOY" -c fleet.yaml --concurrency 2 --use-dynamic-base-id -l warning
run envoy-b "$here" "$ENVOY" -c "$logs/fleet-b.yaml" --concurrency 2 --use-dynamic-base-id -l warning

A=http://127.0.0.1:8080/graphql
B=http://127.0.0.1:8180/graphql
fail() { echo "DEMO FAILED: $*"; exit 1; }
envoy_stat() { curl -s "http://127.0.0.1:$1/stats?filter=^$2\$" | sed 's/.*: //'; }
# An Envoy uses its L2 once both L2 clusters have a healthy host and its purge-log follower (one
# per Envoy) has read the log to its end and waits on it.
l2_ready() {
  curl -fs "http://127.0.0.1:$1/ready" >/dev/null 2>&1 &&
    [ "$(curl -s "http://127.0.0.1:$1/clusters" | grep -c '^graphql_cache_l2.*::health_flags::healthy$')" = 2 ] &&
    [ "$(envoy_stat "$1" 'cluster.graphql_cache_l2_wait.upstream_rq_active')" -ge 1 ]
}
for _ in $(seq 1 150); do
  if l2_ready 9901 && l2_ready 9902; then break; fi
  sleep 0.1
done
l2_ready 9901 && l2_ready 9902 || { tail -n 20 "$logs"/*.log; fail "the fleet did not start; logs in $logs"; }

QUERY='{"query":"{ users { __typename id name } requestCount }"}'
PURGE='[{"kind":"type","type":"User"}]'
# The key holds the host: behind a load balancer every Envoy sees the fleet's one name, which
# curl must send here too (it would send each Envoy's own host:port).
HOST=graphql.example.com
ask() { curl -si "$1" -H "host: $HOST" -H 'content-type: application/json' -d "$QUERY" | tr -d '\r'; }
cache_of() { grep -i '^x-cache:' <<<"$1" | sed 's/^[^:]*: //'; }
reason_of() { grep -i '^x-cache-reason:' <<<"$1" | sed 's/^[^:]*: //'; }
origin_count() { curl -s http://127.0.0.1:8081/_origin/count; }
l2_metric() { curl -s -H "authorization: Bearer $GRAPHQL_CACHE_L2_SECRET" http://127.0.0.1:8090/metrics | grep -F "$1 " | sed 's/.* //'; }
say() { echo; echo "== $*"; }

echo "Envoy A: $A (internal 127.0.0.1:8082, admin 127.0.0.1:9901)"
echo "Envoy B: $B (internal 127.0.0.1:8182, admin 127.0.0.1:9902)"
echo "both on envoy/fleet.yaml; L2 service 127.0.0.1:8090 -> Redis 127.0.0.1:$REDIS_PORT; origin 127.0.0.1:8081"

say "1. A query through Envoy A: MISS, fetched from the origin, stored in A and in the L2"
echo "\$ curl -si $A -H 'host: $HOST' -H 'content-type: application/json' -d '$QUERY'"
first=$(ask "$A"); echo "$first"; echo
echo "origin count: $(origin_count)"
[ "$(cache_of "$first")" = MISS ] || fail "the first request was not a MISS"
stored='l2_requests_total{verb="store",outcome="stored"}'
# A writes to the L2 after it has answered.
for _ in $(seq 1 50); do [ "$(l2_metric "$stored")" -ge 1 ] && break; sleep 0.04; done
[ "$(l2_metric "$stored")" -ge 1 ] || fail "Envoy A did not store the answer in the L2"

say "2. The same query through Envoy B, which never saw it: HIT from the L2, origin not asked"
echo "\$ curl -si $B -H 'host: $HOST' -H 'content-type: application/json' -d '$QUERY'"
second=$(ask "$B"); echo "$second"; echo
echo "origin count: $(origin_count)   <- unchanged: B answered from the fleet's L2"
[ "$(cache_of "$second")" = HIT ] && [ "$(reason_of "$second")" = l2 ] || fail "B did not answer from the L2"
[ "$(origin_count)" = '{"requests":1}' ] || fail "origin saw $(origin_count)"
[ "$(tail -n 1 <<<"$second")" = "$(tail -n 1 <<<"$first")" ] || fail "B's answer differs from A's"
[ "$(cache_of "$(ask "$B")")" = HIT ] || fail "B did not keep the answer"

say "3. Purge type User on Envoy A's internal listener: B stops serving it within a second"
echo "\$ curl -s -X POST 'http://127.0.0.1:8082/graphql-cache/purge?wait_ms=2000' -H 'authorization: Bearer $PURGE_TOKEN' -d '$PURGE'"
p=$(curl -s -X POST 'http://127.0.0.1:8082/graphql-cache/purge?wait_ms=2000' -H "authorization: Bearer $PURGE_TOKEN" \
  -H 'content-type: application/json' -d "$PURGE"); echo "$p"
# Applied on A at once; with ?wait_ms= the answer waits until the fleet's purge log holds it
# (a few ms later): 200 "committed" (202 "owed" if the wait ran out first).
[ "$p" = '{"purged":1,"fleet":"committed"}' ] || fail "the purge API answered $p"
purged_at=$(date +%s%N)
after=""
while [ $(( ($(date +%s%N) - purged_at) / 1000000 )) -lt 1000 ]; do
  after=$(ask "$B")
  [ "$(cache_of "$after")" = MISS ] && break
  sleep 0.02
done
echo "B, $(( ($(date +%s%N) - purged_at) / 1000000 )) ms after the purge was answered on A: x-cache: $(cache_of "$after")"
echo "origin count: $(origin_count)   <- B fetched it again"
[ "$(cache_of "$after")" = MISS ] || fail "B still served the purged entry after a second"
[ "$(origin_count)" = '{"requests":2}' ] || fail "origin saw $(origin_count)"

say "The filter's L2 counters on A (9901) and B (9902), and the L2 service's requests"
for admin in 9901 9902; do
  echo "-- $admin"; curl -sg "http://127.0.0.1:$admin/stats?filter=^wasmcustom[.]graphql_cache[.]l2_"
done
echo "-- L2 service"; curl -s -H "authorization: Bearer $GRAPHQL_CACHE_L2_SECRET" http://127.0.0.1:8090/metrics | grep '^l2_requests_total' | grep -v ' 0$'
echo
echo "Demo OK. Try it yourself:"
echo "  curl -si $B -H 'host: $HOST' -H 'content-type: application/json' -d '$QUERY'"
echo "  curl -s http://127.0.0.1:9902/stats | grep graphql_cache.l2_"
case "${DEMO_SECONDS:-}" in
  0) ;;
  "") echo "Serving until Ctrl-C."; wait ;;
  *) sleep "$DEMO_SECONDS" ;;
esac
