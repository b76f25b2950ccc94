#!/usr/bin/env python3
"""`make bench-hostcalls`: what one proxy-wasm host call costs a request, in a real Envoy.

The floor (bench/floor) makes one host call ten extra times per request, chosen by its VM
configuration; each variant runs beside the plain floor in the same rounds (alternating order),
exactly as `make bench` runs `wasm-floor` (one worker on CPU 0, wrk and the origin on CPU 1).
A call's cost is the difference in CPU time per request (1 / req/s: Envoy's CPU is saturated)
divided by ten, shown in microseconds and as a share of the floor's own request.
"""
import os
import statistics
import sys
import tempfile

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import bench  # noqa: E402

CALLS = [
    ("property", "get_property(xds.cluster_name)"),
    ("header", "get_map_value(:path)"),
    ("headers", "get_map_pairs (all headers)"),
    ("shared_data", "get_shared_data (8 bytes)"),
    ("clock", "get_current_time"),
    ("metric_read", "get_metric"),
    ("metric_increment", "increment_metric"),
]
REPEAT = 10


def main():
    bench.ports_free()
    answer = bench.fetch_answer()
    work = tempfile.mkdtemp(prefix="graphql-cache-hostcalls-")
    body_file = os.path.join(work, "body.json")
    with open(body_file, "w") as f:
        f.write(bench.json.dumps({"query": bench.QUERY}))
    only = [c for c in os.environ.get("HOSTCALLS_ONLY", "").split(",") if c]
    chosen = [("", "the floor")] + [c for c in CALLS if not only or c[0] in only]
    rps = {name: [] for name, _ in chosen}
    for round_no in range(1, bench.ROUNDS + 1):
        print(f"round {round_no}/{bench.ROUNDS}", flush=True)
        order = chosen if round_no % 2 else list(reversed(chosen))
        for name, label in order:
            yaml_text = bench.bootstrap(bench.floor_filter(answer, name), bench.ORIGIN_ROUTE)
            r = bench.measure([], yaml_text, {}, work, body_file)
            rps[name].append(r["rps"])
            print(f"  {label:32s} {r['rps']:8.0f} req/s", flush=True)
    floor = statistics.median(rps[""])
    floor_us = 1e6 / floor
    print()
    print(f"the floor: {floor:.0f} req/s, {floor_us:.2f} us of Envoy CPU per request")
    print(f"{'host call':32s} {'req/s':>8s} {'us/call':>8s} {'share':>7s}")
    for name, label in chosen[1:]:
        m = statistics.median(rps[name])
        per_call = (1e6 / m - floor_us) / REPEAT
        print(f"{label:32s} {m:8.0f} {per_call:8.2f} {per_call / floor_us:7.1%}")


if __name__ == "__main__":
    main()
