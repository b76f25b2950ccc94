#!/usr/bin/env python3
"""The miss reasons of a GraphQL-over-HTTP conformance run (`make test`, through
`make ceilings-check`): graphql-http's server audits (tests/conformance/audit.mjs, pinned) sent
twice through a real Envoy with the filter in front of the test origin, with a 64 MiB store that
holds every answer it may store many times over. Each audit's second request for a key the first
run already asked is a miss for one reason only: its answer could not be stored (errors, a status
that is not stored, ...). Asserted from the per-operation counters: misses labelled `not-stored`,
none labelled `evicted` or `not-admitted` (which would read as "the cache is too small"): every
miss of the second run is `not-stored`.
"""
import json
import pathlib
import subprocess
import sys
import time

ROOT = pathlib.Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "bench/hitratio"))
sys.path.insert(0, str(ROOT / "tests/ceilings"))
import replay  # noqa: E402
from ceilings import op_counters, verdict  # noqa: E402

CONFIG = {"paths": ["/graphql"], "ttl_seconds": 600, "cache_bytes": 64 << 20}


def audit(url):
    out = subprocess.run(["node", str(ROOT / "tests/conformance/audit.mjs"), url], capture_output=True,
                         text=True, timeout=120, check=True)
    return json.loads(out.stdout.strip().splitlines()[-1])


def settled(envoy):
    """The per-operation counters once they account for every lookup the filter's own counters
    (added at once, not by the timer) say was made: the root's timer adds the per-operation ones
    a tick later (10 s at most)."""
    deadline = time.time() + 10
    while True:
        c = envoy.filter_counters()
        ops = op_counters(envoy)
        counted = sum(v for (k, _), v in ops.items() if k in ("hits", "stale", "coalesced", "misses"))
        if counted == c.get("hits", 0) + c.get("misses", 0):
            return ops
        if time.time() > deadline:
            raise AssertionError(f"per-operation counters: {counted} lookups, the filter's: {c}")
        time.sleep(0.1)


def misses(ops):
    return {r: v for (c, r), v in ops.items() if c == "misses"}


def main():
    origin = replay.Origin()
    try:
        envoy = replay.Envoy(CONFIG, origin.port, 1)
        try:
            url = f"http://127.0.0.1:{envoy.port}/graphql"
            first = audit(url)
            after_first = settled(envoy)
            second = audit(url)
            after_second = settled(envoy)
            not_stored = sum(v for (c, _), v in after_first.items() if c == "not_stored")
        finally:
            envoy.stop()
    finally:
        origin.stop()
    m1, m2 = misses(after_first), misses(after_second)
    delta = {r: m2.get(r, 0) - m1.get(r, 0) for r in m2}
    print(f"audits, first run: {first}; second run: {second}")
    print(f"misses by reason, first run: {m1}")
    print(f"misses by reason, second run: {delta}")
    print(f"answers not stored in the first run (as counted by then): {not_stored}")
    failures = []
    if any(delta.get(r, 0) for r in ("evicted", "not-admitted")):
        failures.append(f"second run's misses labelled evicted or not-admitted: {delta}")
    if delta.get("not-stored", 0) == 0:
        failures.append("no miss labelled not-stored on the second run")
    if sum(delta.values()) != delta.get("not-stored", 0):
        failures.append(f"second run's misses not all not-stored: {delta}")
    verdict("conformance misses", failures)


if __name__ == "__main__":
    main()
