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
CONFIG="${DEMO_CONFIG:-envoy.yaml}"
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

ALICE="$(cat "$here/tokens/alice.jwt")"
BOB="$(cat "$here/tokens/bob.jwt")"
PUBLIC='{"query":"{ users { id name } requestCount }"}'
PRIVATE='{"query":"{ me { id name } }"}'
show() { echo; echo "\$ $1"; }
origin_count() { curl -s http://127.0.0.1:8081/_origin/count; }
fail() { echo "DEMO FAILED: $*"; exit 1; }
ask() { # token body -> full response
  if [ -n "$1" ]; then
    curl -si "$URL" -H 'content-type: application/json' -H "authorization: Bearer $1" -d "$2"
  else
    curl -si "$URL" -H 'content-type: application/json' -d "$2"
  fi
}

echo "Envoy (jwt_authn -> local_ratelimit -> GraphQL cache -> router) listens on $URL"
echo "origin: 127.0.0.1:8081, admin: 127.0.0.1:9901, demo tokens: envoy/tokens/{alice,bob}.jwt"

echo; echo "== 1. A public query: MISS, then HIT from Envoy (the origin is not asked again)"
show "curl -si $URL -H 'content-type: application/json' -H \"authorization: Bearer \$(cat envoy/tokens/alice.jwt)\" -d '$PUBLIC'"
first=$(ask "$ALICE" "$PUBLIC"); echo "$first"
echo; echo "origin count: $(origin_count)"
sleep 1
show "(the same again, as Bob)"
second=$(ask "$BOB" "$PUBLIC"); echo "$second"
echo; echo "origin count: $(origin_count)   <- unchanged: the answer came from Envoy's cache, shared by all users"
grep -qi '^x-cache: MISS' <<<"$first" || fail "first request was not a MISS"
grep -qi '^x-cache: HIT' <<<"$second" || fail "second request was not a HIT"
grep -qi '^age: ' <<<"$second" || fail "the hit has no age header"
[ "$(origin_count)" = '{"requests":1}' ] || fail "origin saw $(origin_count)"

echo; echo "== 2. A private query: each user gets their own answer (scoped by the JWT's sub)"
show "curl -s $URL -H 'content-type: application/json' -H \"authorization: Bearer \$(cat envoy/tokens/alice.jwt)\" -d '$PRIVATE'"
a=$(ask "$ALICE" "$PRIVATE"); echo "$a" | grep -i '^x-cache:'; echo "$a" | tail -1; echo
show "(the same as Bob)"
b=$(ask "$BOB" "$PRIVATE"); echo "$b" | grep -i '^x-cache:'; echo "$b" | tail -1; echo
a2=$(ask "$ALICE" "$PRIVATE")
grep -q '"Alice"' <<<"$a" || fail "Alice did not get her data"
grep -q '"Bob"' <<<"$b" || fail "Bob did not get his data"
grep -q '"Alice"' <<<"$a2" && grep -qi '^x-cache: HIT' <<<"$a2" || fail "Alice's second request was not her cached entry"

echo; echo "== 3. No token: 401 from jwt_authn, even though the query is cached"
show "curl -si $URL -H 'content-type: application/json' -d '$PUBLIC'"
before=$(origin_count)
n=$(ask "" "$PUBLIC"); echo "$n" | head -1; echo "$n" | tail -1; echo
grep -q '^HTTP/1.1 401' <<<"$n" || fail "a request without a token was not rejected"
[ "$(origin_count)" = "$before" ] || fail "the rejected request reached the origin"

echo; echo "== 4. Purge by tag on the internal listener (127.0.0.1:8082): the next read is a MISS"
PURGE='[{"kind":"type","type":"User"}]'
show "curl -s -X POST http://127.0.0.1:8082/graphql-cache/purge -H 'authorization: Bearer demo-purge-token-change-me' -d '$PURGE'"
p=$(curl -s -X POST http://127.0.0.1:8082/graphql-cache/purge -H 'authorization: Bearer demo-purge-token-change-me' -H 'content-type: application/json' -d "$PURGE"); echo "$p"
USERS='{"query":"{ users { __typename id name } requestCount }"}'
ask "$ALICE" "$USERS" >/dev/null
u=$(ask "$BOB" "$USERS"); echo "$u" | grep -i '^x-cache'
curl -s -X POST http://127.0.0.1:8082/graphql-cache/purge -H 'authorization: Bearer demo-purge-token-change-me' -H 'content-type: application/json' -d "$PURGE" >/dev/null
u2=$(ask "$BOB" "$USERS"); echo "(after the purge)"; echo "$u2" | grep -i '^x-cache:'
[ "$p" = '{"purged":1}' ] || fail "the purge API answered $p"
grep -qi '^x-cache: HIT' <<<"$u" || fail "the tagged query was not cached"
grep -qi '^x-cache: MISS' <<<"$u2" || fail "the purged entry was served"
pub=$(curl -s -o /dev/null -w '%{http_code}' -X POST "http://127.0.0.1:8080/graphql-cache/purge" -H 'authorization: Bearer demo-purge-token-change-me' -d "$PURGE")
echo "the public listener answers $pub for the purge path (jwt_authn; with a valid user token: 404)"
[ "$pub" = 401 ] || [ "$pub" = 404 ] || fail "the purge API is reachable on the public listener"

echo; echo "== 5. The rate limit (20 requests a minute) applies to cache hits too"
codes=""
for i in $(seq 1 25); do
  code=$(curl -s -o /dev/null -w '%{http_code}' "$URL" -H 'content-type: application/json' -H "authorization: Bearer $ALICE" -d "$PUBLIC")
  codes="$codes $code"
  [ "$code" = 429 ] && break
done
echo "status codes:$codes"
grep -q 429 <<<"$codes" || fail "the rate limit never answered 429"
echo "(the bucket refills within a minute)"

echo; echo "== 6. What-if: the same traffic with a 10-minute TTL, before changing anything"
show "make what-if CANDIDATE='{\"ttl_seconds\": 600}'"
w=$(python3 "$root/envoy/what-if.py" '{"ttl_seconds": 600}') || fail "the what-if route failed: $w"
echo "$w"
grep -q '^| all |' <<<"$w" || fail "the what-if route gave no total"

show "curl -s http://127.0.0.1:9901/stats | grep -E 'graphql_cache|graphql_rate_limit|jwt_authn'"
curl -s http://127.0.0.1:9901/stats | grep -E 'wasmcustom.graphql_cache|graphql_rate_limit.http_local_rate_limit.rate_limited|jwt_authn.allowed|jwt_authn.denied'
echo
echo "Demo OK. Try it yourself:"
echo "  curl -si $URL -H 'content-type: application/json' -H \"authorization: Bearer \$(cat envoy/tokens/bob.jwt)\" -d '$PRIVATE'"
echo "  curl -s http://127.0.0.1:9901/stats | grep graphql_cache"
echo "  make what-if CANDIDATE='{\"cache_bytes\": 268435456}'"
secs="${DEMO_SECONDS:-}"
if [ "$secs" = "0" ]; then exit 0; fi
if [ -n "$secs" ]; then sleep "$secs"; else echo "Serving until Ctrl-C."; wait; fi
