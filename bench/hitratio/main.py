#!/usr/bin/env python3
"""`make bench-hitratio`: the filter's hit ratio on synthetic traces, replayed in order through a
real Envoy (1 and 2 workers, today's defaults and the shared table alone), beside LRU, W-TinyLFU
and Belady's optimal simulated at the same memory. Writes bench/results/hitratio.md and .png.

Hits are counted where a cache saves work: hit ratio = 1 - origin fetches / requests, the fetches
read from the origin's own counter (`/_origin/count`) before and after each replay. The x-cache
header of every answer is tallied as a cross-check (HIT and STALE served from the cache, MISS
fetched; COALESCED cannot happen one request at a time; any BYPASS is an error).

HITRATIO_REQUESTS (default 20000) sets every trace's length; HITRATIO_ONLY=a,b runs some traces.
"""
import json
import os
import pathlib
import sys
import time

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parent))
import replay  # noqa: E402
import sim  # noqa: E402
import traces  # noqa: E402

RESULTS = replay.ROOT / "bench/results"
N = int(os.environ.get("HITRATIO_REQUESTS", "20000"))
# The cache's size in entries of the traces' answers: `cache_bytes` is this many entries' bytes.
SLOTS = 2048
BASE = {"ttl_seconds": 3600, "paths": ["/graphql"]}


def local_default(cache_bytes):
    """local_cache_bytes' default (README, src/config/memory.rs): a 1024th, at most 4 MiB."""
    return min(cache_bytes // 1024, 4 << 20)
# (label, configuration beyond BASE, workers)
CONFIGS = [
    ("shared, 1 worker", {"local_cache_bytes": 0}, 1),
    ("shared, 2 workers", {"local_cache_bytes": 0}, 2),
    ("defaults, 1 worker", {}, 1),
    ("defaults, 2 workers", {}, 2),
]
POLICIES = [("LRU", sim.lru), ("W-TinyLFU", sim.wtinylfu), ("Belady", sim.belady)]


def capacity(config, workers, entry):
    """Entries the filter's memory holds: `cache_bytes` plus each worker's copies."""
    local = config.get("local_cache_bytes", local_default(config["cache_bytes"]))
    return (config["cache_bytes"] + workers * local) // entry


def fmt(x):
    return "  -  " if x is None else f"{x:.3f}"


def tables(names, descs, distinct, length, measured, simulated, caps):
    """Markdown: one table for the shared table alone, one for the defaults."""
    out = []
    c_shared = caps["shared, 1 worker"]
    out.append(f"### Shared table only (`local_cache_bytes: 0`): {c_shared} entries, 1 and 2 workers\n")
    out.append("| trace | cold bound | filter 1w | filter 2w | model | LRU | W-TinyLFU | Belady |")
    out.append("|---|---|---|---|---|---|---|---|")
    for t in names:
        row = [t, fmt(1 - distinct[t] / length[t]), fmt(measured.get(("shared, 1 worker", t))),
               fmt(measured.get(("shared, 2 workers", t))), fmt(simulated[("shared, 1 worker", "model", t)])]
        row += [fmt(simulated[(c_shared, p, t)]) for p, _ in POLICIES]
        out.append("| " + " | ".join(row) + " |")
    c1, c2 = caps["defaults, 1 worker"], caps["defaults, 2 workers"]
    out.append(f"\n### Defaults (`local_cache_bytes` a 1024th of `cache_bytes` a worker): {c1} entries with 1 worker, {c2} with 2\n")
    out.append(f"| trace | filter 1w | model 1w | LRU@{c1} | W-TinyLFU@{c1} | Belady@{c1} "
               f"| filter 2w | model 2w | LRU@{c2} | W-TinyLFU@{c2} | Belady@{c2} |")
    out.append("|---|---|---|---|---|---|---|---|---|---|---|")
    for t in names:
        row = []
        for label, cap in (("defaults, 1 worker", c1), ("defaults, 2 workers", c2)):
            row += [fmt(measured.get((label, t))), fmt(simulated[(label, "model", t)])]
            row += [fmt(simulated[(cap, p, t)]) for p, _ in POLICIES]
        out.append("| " + " | ".join([t] + row) + " |")
    out.append("\n### Traces\n")
    out.append("| trace | requests | distinct keys | shape |")
    out.append("|---|---|---|---|")
    for t in names:
        out.append(f"| {t} | {length[t]} | {distinct[t]} | {descs[t]} |")
    return "\n".join(out)


def plot(names, measured, simulated, caps, cold, path):
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    panels = [
        (f"shared table only: {caps['shared, 1 worker']} entries",
         [("filter 1w", lambda t: measured.get(("shared, 1 worker", t))),
          ("filter 2w", lambda t: measured.get(("shared, 2 workers", t)))], caps["shared, 1 worker"]),
        (f"defaults, 1 worker: {caps['defaults, 1 worker']} entries",
         [("filter 1w", lambda t: measured.get(("defaults, 1 worker", t)))], caps["defaults, 1 worker"]),
        (f"defaults, 2 workers: {caps['defaults, 2 workers']} entries",
         [("filter 2w", lambda t: measured.get(("defaults, 2 workers", t)))], caps["defaults, 2 workers"]),
    ]
    colors = {"filter 1w": "#d62728", "filter 2w": "#ff9896", "LRU": "#7f7f7f", "W-TinyLFU": "#1f77b4",
              "Belady": "#2ca02c"}
    fig, axes = plt.subplots(3, 1, figsize=(12, 11), sharex=True)
    for ax, (title, filters, cap) in zip(axes, panels):
        series = filters + [(p, (lambda p: lambda t: simulated[(cap, p, t)])(p)) for p, _ in POLICIES]
        width = 0.8 / len(series)
        for j, (label, value) in enumerate(series):
            xs = [i + (j - (len(series) - 1) / 2) * width for i in range(len(names))]
            ax.bar(xs, [value(t) or 0 for t in names], width, label=label, color=colors[label])
        ax.hlines([cold[t] for t in names], [i - 0.45 for i in range(len(names))],
                  [i + 0.45 for i in range(len(names))], colors="black", linestyles="dashed", linewidth=1,
                  label="cold bound")
        ax.set_title(title)
        ax.set_ylim(0, 1.1)
        ax.set_ylabel("hit ratio")
        ax.grid(axis="y", alpha=0.3)
        ax.legend(loc="upper left", fontsize=8, ncol=len(series) + 1)
    axes[-1].set_xticks(range(len(names)))
    axes[-1].set_xticklabels(names)
    fig.suptitle(f"graphql-cache hit ratio vs LRU / W-TinyLFU / Belady at equal memory "
                 f"({N} requests a trace, ~1 KB answers, 1 h TTL)")
    fig.tight_layout()
    fig.savefig(path, dpi=100)


def main():
    started = time.time()
    only = [t for t in os.environ.get("HITRATIO_ONLY", "").split(",") if t]
    all_t = traces.all_traces(N, SLOTS)
    names = [t for t in all_t if not only or t in only]
    descs = {t: all_t[t][0] for t in names}
    trace = {t: all_t[t][1] for t in names}
    distinct = {t: len(set(trace[t])) for t in names}
    length = {t: len(trace[t]) for t in names}

    origin = replay.Origin()
    try:
        body_len, stored, tags = replay.probe_entry(BASE, origin)
        entry = replay.entry_bytes(body_len, stored, tags)
        BASE["cache_bytes"] = SLOTS * entry
        local = local_default(BASE["cache_bytes"])
        caps = {label: capacity(dict(BASE, **cfg), w, entry) for label, cfg, w in CONFIGS}
        formula = (f"entries = floor((cache_bytes + workers x local_cache_bytes) / entry bytes), "
                   f"cache_bytes = {SLOTS} x {entry} = {BASE['cache_bytes']}, "
                   f"entry bytes = {entry} (body {body_len} B + stored headers {', '.join(n for n, _ in stored)} + {len(tags)} tag "
                   f"hashes + 105 B of fixed fields, as cache/entry.rs encodes it): "
                   + ", ".join(f"{label}: ({BASE['cache_bytes']} + {w} x {cfg.get('local_cache_bytes', local)})/{entry}"
                               f" = {caps[label]}" for label, cfg, w in CONFIGS))
        print(formula, flush=True)

        simulated = {}
        t0 = time.time()
        for t in names:
            ids = {}
            keyed = [ids.setdefault(k, len(ids)) for k in trace[t]]
            for cap in sorted(set(caps.values())):
                for p, f in POLICIES:
                    simulated[(cap, p, t)] = f(keyed, cap)
            for label, cfg, workers in CONFIGS:
                copies = cfg.get("local_cache_bytes", local) // entry
                simulated[(label, "model", t)] = sim.filter_model(keyed, SLOTS, workers, copies, seed=7)
        print(f"simulated in {time.time() - t0:.0f} s", flush=True)

        measured, details = {}, []
        for label, cfg, workers in CONFIGS:
            results = replay.replay([(t, trace[t]) for t in names], dict(BASE, **cfg), workers, origin)
            for t in names:
                r = results[t]
                ratio = 1 - r["fetched"] / length[t]
                measured[(label, t)] = ratio
                x = r["x_cache"]
                if set(x) - {"HIT", "STALE", "MISS", "COALESCED"}:
                    raise RuntimeError(f"{label} {t}: unexpected x-cache values {x}")
                served = x.get("HIT", 0) + x.get("STALE", 0)
                note = "" if abs(served / length[t] - ratio) <= 0.001 else f"  (x-cache says {served / length[t]:.3f})"
                print(f"  {label:<20} {t:<12} {ratio:.3f}  origin fetches {r['fetched']:>6}  "
                      f"{r['seconds']:5.1f} s{note}", flush=True)
                details.append({"config": label, "workers": workers, "trace": t, "hit_ratio": ratio,
                                "origin_fetches": r["fetched"], "x_cache": x, "counters": r["counters"],
                                "seconds": round(r["seconds"], 1)})
    finally:
        origin.stop()

    elapsed = time.time() - started
    md = tables(names, descs, distinct, length, measured, simulated, caps)
    header = (
        "# Hit ratio: the filter beside LRU, W-TinyLFU and Belady at equal memory\n\n"
        f"`make bench-hitratio` (bench/hitratio/). Every trace has {N} requests (the working set {3 * N}, see traces.py), replayed in order, one at a "
        "time, through a real Envoy with the filter (`cache_bytes` 2048 entries' worth, `ttl_seconds` 3600, so only "
        "evictions cause misses); each key is a distinct GraphQL request (`variables` differ) whose answer "
        f"body is {body_len} bytes. A fresh Envoy for each trace and configuration, as the simulators start empty for each trace (see bench/hitratio/replay.py).\n\n"
        "**Hits** = 1 - origin fetches / requests, fetches counted by the origin (`/_origin/count`); the "
        "`x-cache` header of each answer agrees (HIT/STALE served, MISS fetched). With 2 workers, "
        "one keep-alive connection is accepted by each worker and requests alternate between them "
        "(request i on worker i mod 2), still one at a time in trace order.\n\n"
        f"**Memory**: {formula}. The simulators get that many entries of one cache (LRU; W-TinyLFU as "
        "Caffeine: window LRU 1%, segmented main 20% probation / 80% protected, 4-bit count-min sketch "
        "halved every 10 x capacity increments, no doorkeeper, no hill climbing; Belady's MIN with bypass). "
        "*cold bound* = 1 - distinct keys / requests, what an unbounded cache gets. *model* = "
        "sim.filter_model, the previous store (before the set-associative table) simulated at the same entries (direct-mapped slots under a keyed hash, each "
        "worker's insertion-ordered copies of entries it found in the table), to check the "
        "measurement against; its slot hash is not the filter's secret one (nor is one Envoy's like "
        "the next's), so expect differences of up to about 0.03, "
        "most on the loop, where which keys share a slot decides everything.\n\n"
        f"Run took {elapsed:.0f} s on this machine ({os.cpu_count()} cores).\n\n")
    text = header + md + "\n"
    RESULTS.mkdir(parents=True, exist_ok=True)
    if not only:
        (RESULTS / "hitratio.md").write_text(text)
        (RESULTS / "hitratio.json").write_text(json.dumps(
            {"requests": N, "entry_bytes": entry, "capacities": caps, "runs": details,
             "simulated": [{"capacity": c, "policy": p, "trace": t, "hit_ratio": v}
                           for (c, p, t), v in simulated.items()]}, indent=1) + "\n")
        plot(names, measured, simulated, caps, {t: 1 - distinct[t] / length[t] for t in names}, RESULTS / "hitratio.png")
    print()
    print(md)
    print(f"\nbench-hitratio took {elapsed:.0f} s" + ("" if only else "; wrote bench/results/hitratio.{md,json,png}"))


if __name__ == "__main__":
    main()
