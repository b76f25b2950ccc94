#!/usr/bin/env bash
# The no-Docker entity-caching demo (docs/entities.md): three Node subgraphs, Apollo Gateway, and
# Envoy in front of both (envoy/federation.yaml), on this machine, the topology of
# envoy/docker-compose.federation.yml. Walks through it with curl, then keeps serving until Ctrl-C
# (or for DEMO_SECONDS seconds; DEMO_SECONDS=0 exits after the walkthrough).
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
root="$(dirname "$here")"
ENVOY="${ENVOY:-$root/.tools/bin/envoy}"
WASM="${WASM:-target/wasm32-wasip1/release/graphql_cache.wasm}"
fed="$root/tests/federation"
URL=http://127.0.0.1:8080/
logs="$root/.tools/demo-federation"
mkdir -p "$logs"
[ -d "$fed/node_modules" ] || { echo "run: make tests/federation/node_modules"; exit 1; }

pids=()
cleanup() { for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done; wait 2>/dev/null || true; }
trap cleanup EXIT INT TERM

ln -sf "$root/$WASM" "$here/graphql_cache.wasm"
SUBGRAPHS_CACHE_CONTROL="max-age=60" node "$fed/subgraphs.mjs" --port-products 4001 --port-reviews 4002 --port-users 4003 >"$logs/subgraphs.log" 2>&1 &
pids+=($!)
(cd "$here" && exec "$ENVOY" -c federation.yaml --concurrency 2 --use-dynamic-base-id -l warning) >"$logs/envoy.log" 2>&1 &
pids+=($!)
APOLLO_TELEMETRY_DISABLED=1 PORT=4000 \
  PRODUCTS_URL=http://127.0.0.1:8090/products/graphql \
  REVIEWS_URL=http://127.0.0.1:8090/reviews/graphql \
  USERS_URL=http://127.0.0.1:8090/users/graphql \
  node "$fed/apollo-gateway.mjs" >"$logs/gateway.log" 2>&1 &
pids+=($!)

for _ in $(seq 1 150); do
  if curl -fs http://127.0.0.1:9901/ready >/dev/null 2>&1 && grep -q ready "$logs/gateway.log" 2>/dev/null \
     && grep -q ready "$logs/subgraphs.log" 2>/dev/null; then break; fi
  sleep 0.2
done
grep -q ready "$logs/gateway.log" || { echo "the gateway did not start; see $logs/gateway.log"; cat "$logs/gateway.log"; exit 1; }
curl -fs http://127.0.0.1:9901/ready >/dev/null || { echo "Envoy did not start; see $logs/envoy.log"; exit 1; }

fail() { echo "DEMO FAILED: $*"; exit 1; }
reps() { # representations the subgraphs resolved so far
  local n=0
  for p in 4001 4002 4003; do n=$((n + $(curl -s "http://127.0.0.1:$p/counts" | sed 's/.*"representations":\([0-9]*\).*/\1/'))); done
  echo "$n"
}
page() { # offset -> the client query's body
  echo "{\"query\":\"{ products(first: 6, offset: $1) { id name reviews { rating author { id name } } } }\"}"
}
# As user 7: the gateway forwards the token, and users' entities (private) are keyed by it.
ask() { curl -si "$URL" -H 'content-type: application/json' -H 'authorization: Bearer 7' -d "$1"; }

echo "Client -> Envoy :8080 (whole answers) -> Apollo Gateway :4000 -> Envoy :8090 (entities) -> subgraphs :4001-4003"
echo; echo "== 1. Products 1-6 with their reviews and authors: every entity fetched from the subgraphs"
before=$(reps)
first=$(ask "$(page 0)"); echo "$first" | grep -i '^x-cache'
one=$(( $(reps) - before )); echo "representations resolved by the subgraphs: $one"
echo; echo "== 2. Products 4-9: another query (a MISS for the whole-answer cache), but 4-6, their reviews"
echo "   and most authors are entity entries now: the subgraphs are asked only for the rest"
before=$(reps)
second=$(ask "$(page 3)"); echo "$second" | grep -i '^x-cache'
two=$(( $(reps) - before )); echo "representations resolved by the subgraphs: $two"
echo; echo "== 3. Products 1-6 again: a HIT in front of the gateway, nothing reaches it"
before=$(reps)
third=$(ask "$(page 0)"); echo "$third" | grep -i '^x-cache'
three=$(( $(reps) - before )); echo "representations resolved by the subgraphs: $three"
grep -qi '^x-cache: MISS' <<<"$second" || fail "the second page was not a MISS at the client hop"
[ "$two" -lt "$one" ] || fail "the overlapping page resolved $two representations, the first $one"
grep -qi '^x-cache: HIT' <<<"$third" || fail "the repeated page was not a HIT"
[ "$three" -eq 0 ] || fail "a HIT reached the subgraphs"
echo; echo "The subgraph hop's log (x-cache per subgraph request: MISS, PARTIAL, HIT) is Envoy's"
echo "stdout, in $logs/envoy.log (written every 10 s)."

if [ "${DEMO_SECONDS:-}" = "0" ]; then exit 0; fi
echo; echo "Serving on $URL until Ctrl-C${DEMO_SECONDS:+ (or ${DEMO_SECONDS}s)}."
if [ -n "${DEMO_SECONDS:-}" ]; then sleep "$DEMO_SECONDS"; else wait; fi
