#!/usr/bin/env python3
"""The ceilings the filter reports, checked against what the traffic really does (`make test`).

Each trace (bench/hitratio's shapes: zipf, a scan over a hot set, a loop, a working set that fits,
and one where a third of the keys answer with `errors`, never stored) is replayed in order, one
request at a time, through a real Envoy with the filter and a store of `cache_bytes = B`, then
again through a fresh Envoy at `2B`. From the first run the filter's own counters give:

- the hit ratio at 2x memory it predicts: (hits + would_hit_2x) / requests;
- the cacheable ceiling: (hits + misses{evicted, not-admitted, collision}) / requests, the hit
  ratio had every storable answer been kept (the dashboard's formula).

The second run measures the hit ratio at 2B from the origin's own request counter. Asserted, on
every trace: the prediction within 0.02 of the measurement, the ceiling never below the hit
ratio, and on the trace that fits the ceiling within 0.01 of it. CEILINGS_REQUESTS sets the
traces' length (default 12000).
"""
import json
import os
import pathlib
import re
import sys
import time

ROOT = pathlib.Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "bench/hitratio"))
import replay  # noqa: E402
import traces  # noqa: E402

N = int(os.environ.get("CEILINGS_REQUESTS", "12000"))
# The store holds this many of the traces' answers at B; the traces are sized against it.
SLOTS = 512
BASE = {"ttl_seconds": 3600, "paths": ["/graphql"], "local_cache_bytes": 0}
TOLERANCE_2X = 0.02
TOLERANCE_FITS = 0.01
# The dashboard's cacheable ceiling counts these misses as hits (see docs/observability.md).
AVOIDABLE = ("evicted", "not-admitted", "collision")


def errored(n, keys, s, seed):
    """A zipf trace where every third key (by rank) answers with errors: never stored."""
    return [f"err/{k}" if int(k.rsplit("/", 1)[1]) % 3 == 0 else k for k in traces.zipf(n, keys, s, seed, "e")]


def the_traces():
    base = SLOTS
    return {
        "zipf-0.8": traces.zipf(N, 10 * base, 0.8, 101, "z"),
        "scan": traces.scan(N, int(0.75 * base), 0.8, 2000, base, 300),
        "loop": traces.loop(N, int(1.5 * base)),
        "working-set": traces.zipf(N, int(0.75 * base), 0.7, 200, "ws"),
        "errors": errored(N, 4 * base, 0.9, 500),
    }


def op_counters(envoy):
    """Per-operation counters summed over operations: {(counter, reason): count}."""
    out = {}
    for name, value in envoy.stats(r"graphql_cache\.op\.").items():
        m = re.search(r"graphql_cache\.op\.([a-z_]+)\.", name)
        if not m:
            continue
        reason = re.search(r"graphql_cache_reason=\.=([a-z0-9-]+);", name)
        key = (m.group(1), reason.group(1) if reason else None)
        out[key] = out.get(key, 0) + value
    return out


def settled(envoy, requests):
    """The per-operation counters once they account for every request: the root's timer adds
    them to Envoy's stats a tick after the requests, so wait for that condition (20 s at most)."""
    deadline = time.time() + 20
    while True:
        ops = op_counters(envoy)
        counted = sum(v for (c, _), v in ops.items() if c in ("hits", "stale", "coalesced", "misses", "bypasses"))
        if counted >= requests:
            return ops
        if time.time() > deadline:
            raise AssertionError(f"per-operation counters account for {counted} of {requests} requests")
        time.sleep(0.1)


def run(trace, config, origin):
    """Replays `trace` through a fresh Envoy: (hit ratio from the origin's count, filter
    counters, per-operation counters)."""
    envoy = replay.Envoy(config, origin.port, 1)
    try:
        (conn,) = replay.connections(envoy, 1)
        before, counters_before = origin.count(), envoy.filter_counters()
        requests = {}
        for key in trace:
            req = requests.get(key) or requests.setdefault(key, replay.request_bytes(key))
            status, x = conn.exchange(req)
            if status != 200 or x not in ("HIT", "MISS"):
                raise AssertionError(f"{key}: HTTP {status}, x-cache {x}")
        fetched = origin.count() - before
        counters = {k: v - counters_before.get(k, 0) for k, v in envoy.filter_counters().items()}
        ops = settled(envoy, len(trace))
        conn.close()
        return 1 - fetched / len(trace), counters, ops
    finally:
        envoy.stop()


def main():
    started = time.time()
    origin = replay.Origin()
    rows, failures = [], []
    try:
        body_len, stored, tags = replay.probe_entry(BASE, origin)
        entry = replay.entry_bytes(body_len, stored, tags)
        budget = SLOTS * entry
        for name, trace in the_traces().items():
            n = len(trace)
            actual, counters, ops = run(trace, dict(BASE, cache_bytes=budget), origin)
            measured_2x, _, _ = run(trace, dict(BASE, cache_bytes=2 * budget), origin)
            hits = ops.get(("hits", None), 0)
            predicted_2x = (hits + ops.get(("would_hit", "2x"), 0)) / n
            ceiling = (hits + sum(ops.get(("misses", r), 0) for r in AVOIDABLE)) / n
            misses = {r: v for (c, r), v in ops.items() if c == "misses"}
            rows.append((name, actual, ceiling, predicted_2x, measured_2x, misses, counters))
            if abs(predicted_2x - measured_2x) > TOLERANCE_2X:
                failures.append(f"{name}: 2x predicted {predicted_2x:.3f}, measured {measured_2x:.3f}")
            if ceiling < actual - 1e-9:
                failures.append(f"{name}: ceiling {ceiling:.3f} below the hit ratio {actual:.3f}")
            if name == "working-set" and abs(ceiling - actual) > TOLERANCE_FITS:
                failures.append(f"{name}: ceiling {ceiling:.3f} not within {TOLERANCE_FITS} of {actual:.3f}")
            if hits != counters.get("hits"):
                failures.append(f"{name}: per-operation hits {hits} != hits {counters.get('hits')}")
    finally:
        origin.stop()
    print(f"{N} requests a trace, cache_bytes B = {SLOTS} x {entry} bytes, 1 worker, local copies off")
    print("| trace | hit ratio at B | cacheable ceiling | 2x predicted | 2x measured | difference | misses by reason |")
    print("|---|---|---|---|---|---|---|")
    for name, actual, ceiling, p2, m2, misses, _ in rows:
        reasons = ", ".join(f"{r} {v}" for r, v in sorted(misses.items()))
        print(f"| {name} | {actual:.3f} | {ceiling:.3f} | {p2:.3f} | {m2:.3f} | {p2 - m2:+.3f} | {reasons} |")
    out = os.environ.get("CEILINGS_JSON")
    if out:
        pathlib.Path(out).write_text(json.dumps([
            {"trace": r[0], "hit_ratio": r[1], "ceiling": r[2], "predicted_2x": r[3], "measured_2x": r[4],
             "misses": r[5], "counters": r[6]} for r in rows], indent=1) + "\n")
    picture = os.environ.get("CEILINGS_PICTURE")
    if picture:
        plot(rows, SLOTS * entry, pathlib.Path(picture))
    print(f"took {time.time() - started:.0f} s")
    verdict("ceilings", failures)


def plot(rows, budget, path):
    """The table as bars, per trace: hit ratio at B, 2x predicted at B, 2x measured at 2B, and the
    cacheable ceiling (`make ceilings-picture`; matplotlib)."""
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    series = [("hit ratio at B", 1, "#d62728"), ("2x predicted at B", 3, "#ff9896"),
              ("2x measured at 2B", 4, "#1f77b4"), ("cacheable ceiling", 2, "#2ca02c")]
    fig, ax = plt.subplots(figsize=(11, 4.5))
    width = 0.8 / len(series)
    for j, (label, col, color) in enumerate(series):
        xs = [i + (j - (len(series) - 1) / 2) * width for i in range(len(rows))]
        ax.bar(xs, [r[col] for r in rows], width, label=label, color=color)
    ax.set_xticks(range(len(rows)))
    ax.set_xticklabels([r[0] for r in rows])
    ax.set_ylim(0, 1.05)
    ax.set_ylabel("hit ratio")
    ax.grid(axis="y", alpha=0.3)
    ax.legend(loc="upper left", fontsize=8, ncol=4)
    ax.set_title(f"What the filter reports at B = {budget} bytes vs a replay at 2B "
                 f"({N} requests a trace, tests/ceilings/ceilings.py)")
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=100)
    print(f"wrote {path}")


def verdict(name, failures):
    """Exits 1 listing `failures`, if any; else says `name` passed."""
    if failures:
        print("FAILED:\n  " + "\n  ".join(failures))
        sys.exit(1)
    print(f"{name}: all passed")


if __name__ == "__main__":
    main()
