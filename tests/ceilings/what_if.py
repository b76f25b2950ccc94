#!/usr/bin/env python3
"""The what-if route's prediction for a TTL change on one operation, checked against a replay
with that TTL (`make test`, through `make ceilings-check`).

A timed trace (keys repeated at fixed gaps of 0.9, 3.3, 4.6 and 8.1 s, over 16 s) is replayed in
real time through a real Envoy with 2 workers (requests alternating between them), the
operation's TTL 2 s. The what-if route is then asked for the operation's TTL at 6 s (a rule), and
the same trace is replayed through a fresh Envoy configured with that rule; the hit ratio
measured there (origin fetches counted by the origin) must be within 0.02 of the prediction. The
TTLs are the issue's 10 s -> 60 s over 30 s gaps, scaled to seconds so the test takes half a
minute; the gaps stay clear of the TTLs' multiples, so a few ms of timing noise cannot turn a hit
into a miss. The time between requests is the trace's (paced to the schedule), not a wait on
anything.

A second trace checks a candidate that drops a vary header: each key is asked in two locales
(`x-locale`, varied on) taking turns, at gaps of 0.7 and 1.3 s, TTL 2 s. Today a locale repeats
every 1.4 or 2.6 s; without `x-locale` in the key the locales share one entry. The prediction for
`vary_headers` without `x-locale` must be within 0.02 of a replay configured so.
"""
import json
import pathlib
import random
import sys
import time
import urllib.request

ROOT = pathlib.Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "bench/hitratio"))
import replay  # noqa: E402

sys.path.insert(0, str(ROOT / "tests/ceilings"))
from ceilings import verdict  # noqa: E402

TOKEN = "what-if-test-token-0123456789"
BASE = {"paths": ["/graphql"], "ttl_seconds": 2, "purge_path": "/graphql-cache/purge", "purge_token": TOKEN}
CANDIDATE = {"rules": [{"operation": "HitRatio", "ttl_seconds": 6}]}
GAPS = (0.9, 3.3, 4.6, 8.1)
KEYS_PER_GAP = 25
SECONDS = 16.0
TOLERANCE = 0.02
VARY = dict(BASE, vary_headers=["authorization", "cookie", "x-locale"])
VARY_CANDIDATE = {"vary_headers": ["authorization", "cookie"]}
VARY_GAPS = (0.7, 1.3)
VARY_SECONDS = 12.0


def schedule():
    """(seconds from the start, key), in time order."""
    rng = random.Random(7)
    out = []
    for gap in GAPS:
        for k in range(KEYS_PER_GAP):
            t = rng.uniform(0, 3)
            while t < SECONDS:
                out.append((t, f"gap{gap}/{k}"))
                t += gap
    return sorted(out)


def vary_schedule():
    """(seconds from the start, (key, locale)), in time order: each key's locales take turns."""
    rng = random.Random(11)
    out = []
    for gap in VARY_GAPS:
        for k in range(20):
            t, turn = rng.uniform(0, 2), 0
            while t < VARY_SECONDS:
                out.append((t, (f"vary{gap}/{k}", ("en", "fr")[turn % 2])))
                t, turn = t + gap, turn + 1
    return sorted(out)


def request_bytes(key):
    """A trace key's request: a name, or (name, locale) sent with `x-locale`."""
    if isinstance(key, str):
        return replay.request_bytes(key)
    name, locale = key
    plain = replay.request_bytes(name)
    return plain.replace(b"\r\nhost:", f"\r\nx-locale: {locale}\r\nhost:".encode(), 1)


def run(config, origin, trace):
    """Replays `trace` on schedule through a fresh Envoy (2 workers): (hit ratio, the Envoy,
    still running: the caller stops it)."""
    envoy = replay.Envoy(config, origin.port, 2)
    conns = replay.connections(envoy, 2)
    requests = {}
    before = origin.count()
    start = time.monotonic()
    for i, (at, key) in enumerate(trace):
        # The trace's own clock: request i goes at its scheduled instant.
        time.sleep(max(0.0, start + at - time.monotonic()))
        req = requests.get(key) or requests.setdefault(key, request_bytes(key))
        status, x = conns[i % 2].exchange(req)
        if status != 200 or x not in ("HIT", "MISS"):
            raise AssertionError(f"{key}: HTTP {status}, x-cache {x}")
    for c in conns:
        c.close()
    return 1 - (origin.count() - before) / len(trace), envoy


def ask(envoy, candidate):
    req = urllib.request.Request(
        f"http://127.0.0.1:{envoy.port}/graphql-cache/what-if", data=json.dumps(candidate).encode(),
        headers={"authorization": f"Bearer {TOKEN}", "content-type": "application/json"}, method="POST")
    with urllib.request.urlopen(req, timeout=30) as r:
        return json.loads(r.read())


def settled(envoy, candidate, lookups):
    """The what-if answer once it holds every lookup: the other worker's records reach shared data
    at its next timer tick, so ask until the condition holds (10 s at most)."""
    deadline = time.time() + 10
    while True:
        answer = ask(envoy, candidate)
        seen = sum(o["lookups"] for o in answer["operations"])
        if seen >= lookups or time.time() > deadline:
            return answer
        time.sleep(0.05)


def refused(envoy, body, token=TOKEN):
    req = urllib.request.Request(
        f"http://127.0.0.1:{envoy.port}/graphql-cache/what-if", data=body,
        headers={"authorization": f"Bearer {token}"}, method="POST")
    try:
        urllib.request.urlopen(req, timeout=30)
    except urllib.error.HTTPError as e:
        return e.code, json.loads(e.read()).get("error", "")
    return 200, ""


def predicted_and_measured(origin, config, candidate, trace):
    """(measured now, the what-if answer, measured under the candidate)."""
    now, envoy = run(config, origin, trace)
    try:
        answer = settled(envoy, candidate, len(trace))
    finally:
        envoy.stop()
    measured, envoy = run(dict(config, **candidate), origin, trace)
    envoy.stop()
    return now, answer, measured


def vary_case(origin):
    """Failures of the vary-header case (its table printed)."""
    trace = vary_schedule()
    now, answer, measured = predicted_and_measured(origin, VARY, VARY_CANDIDATE, trace)
    op = next(o for o in answer["operations"] if o["operation"] == "HitRatio")
    print(f"{len(trace)} requests over {VARY_SECONDS:.0f} s, 2 workers, two locales a key")
    print("| | vary on x-locale (now) | x-locale dropped |")
    print("|---|---|---|")
    print(f"| measured by replay | {now:.3f} | {measured:.3f} |")
    print(f"| what-if | {op['hit_ratio']['now']:.3f} | {op['hit_ratio']['candidate']:.3f} |")
    failures = []
    if abs(op["hit_ratio"]["now"] - now) > 0.001:
        failures.append(f"vary now: the route says {op['hit_ratio']['now']}, the origin's count {now:.3f}")
    if abs(op["hit_ratio"]["candidate"] - measured) > TOLERANCE:
        failures.append(f"vary dropped: predicted {op['hit_ratio']['candidate']}, measured {measured:.3f}")
    if not any("vary header" in n for n in answer["notes"]):
        failures.append("no note on what dropping a vary header shares")
    # Every key was asked in both locales, and the origin answers alike whatever the locale.
    keys = len({key for _, (key, _) in trace})
    if op.get("merged_keys") != {"keys": keys, "answering_differently": 0}:
        failures.append(f"merged keys: {op.get('merged_keys')}, expected {keys} answering alike")
    return failures


def main():
    trace = schedule()
    origin = replay.Origin()
    try:
        now, envoy = run(BASE, origin, trace)
        try:
            answer = settled(envoy, CANDIDATE, len(trace))
            bad = [refused(envoy, b'{"vary_headers": ["x-new"]}'), refused(envoy, b'{"ttl_seconds": -1}'),
                   refused(envoy, b"not json"), refused(envoy, b'{"ttl_seconds": 6}', token="wrong-token-000000")]
            again = ask(envoy, CANDIDATE)
        finally:
            envoy.stop()
        measured, envoy = run(dict(BASE, **CANDIDATE), origin, trace)
        envoy.stop()
        vary_failures = vary_case(origin)
    finally:
        origin.stop()
    op = next(o for o in answer["operations"] if o["operation"] == "HitRatio")
    print(json.dumps(answer, indent=1))
    print(f"{len(trace)} requests over {SECONDS:.0f} s, 2 workers")
    print("| | TTL 2 s (now) | TTL 6 s |")
    print("|---|---|---|")
    print(f"| measured by replay | {now:.3f} | {measured:.3f} |")
    print(f"| what-if | {op['hit_ratio']['now']:.3f} | {op['hit_ratio']['candidate']:.3f} |")
    failures = []
    if op["lookups"] != len(trace):
        failures.append(f"the route replayed {op['lookups']} lookups of {len(trace)}")
    if abs(op["hit_ratio"]["now"] - now) > 0.001:
        failures.append(f"now: the route says {op['hit_ratio']['now']}, the origin's count {now:.3f}")
    if abs(op["hit_ratio"]["candidate"] - measured) > TOLERANCE:
        failures.append(f"candidate: predicted {op['hit_ratio']['candidate']}, measured {measured:.3f}")
    if again != answer:
        failures.append("a second what-if answered differently: it changed something")
    codes = [c for c, _ in bad]
    if codes != [400, 400, 400, 401] or not bad[0][1].startswith("vary_headers"):
        failures.append(f"bad requests answered {bad}")
    verdict("what-if", failures + vary_failures)


if __name__ == "__main__":
    main()
