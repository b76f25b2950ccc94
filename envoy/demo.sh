#!/usr/bin/env bash
# The no-Docker demo: the origin and Envoy with the cache, on this machine, same topology and the
# same Envoy config as envoy/docker-compose.yml. Walks through the cache with curl, then keeps
# serving until Ctrl-C (or for DEMO_SECONDS seconds; DEMO_SECONDS=0 exits after the walkthrough).
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
root="$(dirname "$here")"
ENVOY="${ENVOY:-$root/.tools/bin/envoy}"
WASM="${WASM:-target/wasm32-wasip1/release/graphql_cache.wasm}"
ORIGIN="${ORIGIN:-target/release/graphql-origin}"
CONFIG="${DEMO_CONFIG:-minimal.yaml}"
URL=http://127.0.0.1:8080/graphql
logs="$root/.tools/demo"
mkdir -p "$logs"

pids=()
cleanup() { for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done; wait 2>/dev/null || true; }
trap cleanup EXIT INT TERM

ln -sf "$root/$WASM" "$here/graphql_cache.wasm"
"$root/$ORIGIN" --listen 127.0.0.1:8081 --delay-ms 100 >"$logs/origin.log" 2>&1 &
pids+=($!)
(cd "$here" && exec "$ENVOY" -c "$CONFIG" --concurrency 2 --use-dynamic-base-id -l warning) >"$logs/envoy.log" 2>&1 &
pids+=($!)

for _ in $(seq 1 100); do
  if curl -fs http://127.0.0.1:9901/ready >/dev/null 2>&1 && curl -fs http://127.0.0.1:8081/_origin/health >/dev/null 2>&1; then break; fi
  sleep 0.1
done
curl -fs http://127.0.0.1:9901/ready >/dev/null || { echo "Envoy did not start; see $logs/envoy.log"; cat "$logs/envoy.log"; exit 1; }

Q='{"query":"{ users { id name } requestCount }"}'
show() { echo; echo "\$ $1"; }
origin_count() { curl -s http://127.0.0.1:8081/_origin/count; }
fail() { echo "DEMO FAILED: $*"; exit 1; }

echo "Envoy with the GraphQL cache listens on $URL (origin: 127.0.0.1:8081, admin: 127.0.0.1:9901)."
show "curl -si $URL -H 'content-type: application/json' -d '$Q'"
first=$(curl -si $URL -H 'content-type: application/json' -d "$Q"); echo "$first"
echo; echo "origin count: $(origin_count)"
sleep 1
show "curl -si $URL -H 'content-type: application/json' -d '$Q'"
second=$(curl -si $URL -H 'content-type: application/json' -d "$Q"); echo "$second"
echo; echo "origin count: $(origin_count)   <- unchanged: the second answer came from Envoy"

grep -qi '^x-cache: MISS' <<<"$first" || fail "first request was not a MISS"
grep -qi '^x-cache: HIT' <<<"$second" || fail "second request was not a HIT"
grep -qi '^age: ' <<<"$second" || fail "the hit has no age header"
[ "$(origin_count)" = '{"requests":1}' ] || fail "origin saw $(origin_count)"

show "curl -si '$URL?query=%7B%20posts%20%7B%20title%20%7D%20%7D'   # GET works too"
curl -si "$URL?query=%7B%20posts%20%7B%20title%20%7D%20%7D" | grep -i '^x-cache'
show "curl -s http://127.0.0.1:9901/stats | grep graphql_cache"
curl -s http://127.0.0.1:9901/stats | grep wasmcustom.graphql_cache

echo
echo "Demo OK. Try it yourself:"
echo "  curl -si $URL -H 'content-type: application/json' -d '$Q'"
echo "  curl -s http://127.0.0.1:9901/stats | grep graphql_cache"
secs="${DEMO_SECONDS:-}"
if [ "$secs" = "0" ]; then exit 0; fi
if [ -n "$secs" ]; then sleep "$secs"; else echo "Serving until Ctrl-C."; wait; fi
