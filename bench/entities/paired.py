#!/usr/bin/env python3
"""`make bench-entities-paired`: client latency below saturation, (c) entity caching on the
subgraph hop against (a) no cache, measured side by side in time. Writes
bench/results/entities-paired.{json,md}.

`make bench-entities` runs each configuration on its own, minutes apart, and this VM's speed
drifts between them by more than the difference it looks for (its p99 ratio moved from 0.80 to
1.24 between rounds of one run). Here both stacks run at once (each its own subgraphs and
gateway; (c) with bench-entities' subgraph-hop Envoy), each warmed as bench-entities warms it
(the same 600 requests, then 15 s at saturation on 8 connections), then loaded in turn, never
together: ENTITIES_PAIRED_SLICES slices of ENTITIES_PAIRED_SLICE_S seconds each on 2 connections,
(a) then (c), then (c) then (a), and so on, each stack continuing its own copy of the same
request stream. Every answered request's latency is kept; the percentiles are over all of a
configuration's slices, and the ratio's 95 % interval comes from resampling the slices in pairs
(slice i of (a) with slice i of (c): what drifts, drifts for both).
"""
import json
import os
import pathlib
import random
import statistics
import sys
import tempfile

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parent))
import main as bench_entities  # noqa: E402

RESULTS = bench_entities.RESULTS
SLICES = int(os.environ.get("ENTITIES_PAIRED_SLICES", "24"))
SLICE_S = int(os.environ.get("ENTITIES_PAIRED_SLICE_S", "10"))
RESAMPLES = 2000
SEED = 20261203


def stack(name):
    """(a) or (c), up and warmed: its URL and the index of its stream's next body."""
    subgraphs = bench_entities.Subgraphs()
    urls = dict(subgraphs.urls)
    if name == "c":
        config = dict(bench_entities.ENTITY_CONFIG, cache_bytes=bench_entities.CACHE_BYTES)
        envoy = bench_entities.subgraph_envoy(subgraphs.ports, config)
        urls = {n: f"http://127.0.0.1:{envoy.port}/{n}/graphql" for n in urls}
    _, url = bench_entities.gateway(urls)
    return url


def warm(url, bodies_file):
    load = bench_entities.load
    warmed = load(url, bodies_file, 0, amount=bench_entities.WARMUP)
    return load(url, bodies_file, warmed["next_index"], seconds=bench_entities.SECONDS)["next_index"]


def pct(sorted_values, p):
    return sorted_values[min(len(sorted_values) - 1, int(p * len(sorted_values)))]


def percentiles(slices):
    values = sorted(v for s in slices for v in s)
    return {"requests": len(values), "p50": pct(values, 0.5), "p90": pct(values, 0.9),
            "p99": pct(values, 0.99), "mean": statistics.fmean(values)}


def interval(a_slices, c_slices, field):
    """The 95 % interval of (c)'s percentile over (a)'s, resampling the slice pairs."""
    rng = random.Random(SEED)
    n = len(a_slices)
    ratios = []
    for _ in range(RESAMPLES):
        picks = [rng.randrange(n) for _ in range(n)]
        a = percentiles([a_slices[i] for i in picks])[field]
        c = percentiles([c_slices[i] for i in picks])[field]
        ratios.append(c / a)
    ratios.sort()
    return pct(ratios, 0.025), pct(ratios, 0.975)


def markdown(result):
    a, c = result["a"], result["c"]
    out = ["# make bench-entities-paired", "",
           f"Client latency on {bench_entities.LIGHT} connections (below saturation), (a) no cache and (c) entity "
           f"caching, loaded in turn: {SLICES} slices of {SLICE_S} s each, alternating, both stacks warmed as in "
           f"`make bench-entities`; data source {bench_entities.SOURCE_MS} ms. Percentiles over every request of "
           "a configuration; the ratio's 95 % interval from resampling the slices in pairs.", "",
           "| configuration | requests | p50 ms | p90 ms | p99 ms | mean ms |", "|---|---|---|---|---|---|"]
    for name, label in (("a", "(a) no cache"), ("c", "(c) entity cache")):
        r = result[name]
        out.append(f"| {label} | {r['requests']} | {r['p50']:.2f} | {r['p90']:.2f} | {r['p99']:.2f} | {r['mean']:.2f} |")
    out.append("")
    for field in ("p50", "p99"):
        lo, hi = result["interval"][field]
        out.append(f"- (c) over (a), {field}: **{c[field] / a[field]:.3f}** (95 % interval {lo:.3f} to {hi:.3f})")
    per = result["slice_p99_ratio"]
    out.append(f"- (c) over (a), p99 of each slice pair: median {statistics.median(per):.3f}, "
               f"{sum(r <= 1 for r in per)} of {len(per)} at or below 1")
    return "\n".join(out)


def main():
    _, bodies = bench_entities.workload()
    work = pathlib.Path(tempfile.mkdtemp(prefix="graphql-cache-paired-"))
    bodies_file = work / "bodies.jsonl"
    bodies_file.write_text("\n".join(bodies) + "\n")
    try:
        urls = {name: stack(name) for name in ("a", "c")}
        at = {name: warm(urls[name], str(bodies_file)) for name in ("a", "c")}
        slices = {"a": [], "c": []}
        for i in range(SLICES):
            for name in (("a", "c") if i % 2 == 0 else ("c", "a")):
                raw = work / f"{name}-{i}.json"
                r = bench_entities.load(urls[name], str(bodies_file), at[name], seconds=SLICE_S,
                                        connections=bench_entities.LIGHT, raw=str(raw))
                at[name] = r["next_index"]
                slices[name].append(json.loads(raw.read_text()))
            print(f"slice {i + 1}/{SLICES}: (a) p99 {percentiles([slices['a'][-1]])['p99']:.2f}  "
                  f"(c) p99 {percentiles([slices['c'][-1]])['p99']:.2f}", flush=True)
    finally:
        bench_entities.cleanup()
    result = {name: percentiles(s) for name, s in slices.items()}
    result["interval"] = {f: interval(slices["a"], slices["c"], f) for f in ("p50", "p99")}
    result["slice_p99_ratio"] = [percentiles([c])["p99"] / percentiles([a])["p99"]
                                 for a, c in zip(slices["a"], slices["c"])]
    result["settings"] = {"slices": SLICES, "slice_seconds": SLICE_S, "connections": bench_entities.LIGHT,
                          "source_ms": bench_entities.SOURCE_MS, "entity_config": bench_entities.ENTITY_CONFIG,
                          "cache_bytes": bench_entities.CACHE_BYTES}
    RESULTS.mkdir(exist_ok=True)
    (RESULTS / "entities-paired.json").write_text(json.dumps(result, indent=1) + "\n")
    text = markdown(result)
    (RESULTS / "entities-paired.md").write_text(text + "\n")
    print(text)


if __name__ == "__main__":
    main()
