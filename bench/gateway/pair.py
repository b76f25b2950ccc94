#!/usr/bin/env python3
"""Two Envoys measured at once on CPU 0, as bench.py's measure_pair measures a -gw hit with its
floor: the table of bench/gateway/README.md ("Where the cost is") came from runs like these.

    .tools/venv/bin/python bench/gateway/pair.py A B [runs]

A and B are each one of
    floor                  bench/floor answering the gateway's body
    floor:<vm config>      the same making a host call ten more times (bench/hostcalls.py's names),
                           or floor:cache_minimum (plus a cluster read, a clock read, an age header)
    floor@<file.wasm>      another build of the floor
    filter                 the filter, {"ttl_seconds": 10}
    filter:<json>          the filter with this configuration
    filter@<file.wasm>     another build of the filter (e.g. with a bench/ab/ patch)
in front of the Mercurius gateway, with the gateway's query; BENCH_TOOL=autocannon loads them with
autocannon instead of wrk. Prints each run and the median ratios of A to B (req/s; B's CPU time per
request over A's).
"""
import json
import os
import statistics
import sys
import tempfile

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
import bench  # noqa: E402


def filters(spec, answer):
    kind, _, rest = spec.partition("@") if "@" in spec else (spec, "", "")
    kind, _, arg = kind.partition(":")
    if kind == "floor":
        text = bench.floor_filter(answer, arg)
        return text.replace(str(bench.FLOOR_WASM), rest) if rest else text
    if kind == "filter":
        text = bench.wasm_filter(json.loads(arg) if arg else {"ttl_seconds": 10})
        return text.replace(str(bench.WASM), rest) if rest else text
    sys.exit(f"unknown: {spec}")


def main():
    a, b = sys.argv[1], sys.argv[2]
    runs = int(sys.argv[3]) if len(sys.argv) > 3 else 5
    bench.ports_free()
    work = tempfile.mkdtemp(prefix="graphql-cache-pair-")
    body = os.path.join(work, "gateway.json")
    with open(body, "w") as f:
        f.write(json.dumps({"query": bench.GATEWAY_QUERY}))
    answer = bench.fetch_answer(bench.GATEWAY, bench.GATEWAY_QUERY)
    env = {"BENCH_BODY_FILE": body, "BENCH_CONNECTION": "keep-alive",
           "BENCH_TOOL": os.environ.get("BENCH_TOOL", "wrk")}
    scenario = lambda spec: (spec, bench.GATEWAY, bench.bootstrap(filters(spec, answer), bench.ORIGIN_ROUTE), env)
    ratios = []
    for _ in range(runs):
        ra, rb = bench.measure_pair(scenario(a), scenario(b), work, body)
        ratios.append((ra["paired_ratio"], ra["paired_cpu_ratio"]))
        print(f"{a}: {ra['rps']:7.0f} req/s {ra['envoy_us_per_request']:5.1f} us   {b}: {rb['rps']:7.0f} req/s "
              f"{rb['envoy_us_per_request']:5.1f} us   ratio {ratios[-1][0]:.3f} (CPU {ratios[-1][1]:.3f})", flush=True)
    print(f"{a} / {b}: median {statistics.median(r for r, _ in ratios):.3f} of the req/s, "
          f"{statistics.median(c for _, c in ratios):.3f} of the CPU per request, over {runs} runs")


if __name__ == "__main__":
    main()
