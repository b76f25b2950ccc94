#!/usr/bin/env python3
"""`make bench-entities-hops`: where the client's time goes at the subgraph hop of
`make bench-entities`, request by request, for (c) entity caching and (e) the same Envoy hop
without the filter. Writes bench/results/entities-hops.{json,md}.

Each configuration runs as in bench-entities (fresh subgraphs, gateway and Envoy; the same
warm-up, then ENTITIES_SECONDS at saturation), with an access log on the subgraph hop's Envoy
(the log costs both configurations alike, so this is a separate run, not part of the bench's
figures). The log of the phase on ENTITIES_LIGHT_CONNECTIONS connections (below saturation) gives,
per subgraph and `x-cache`, the share of the hop's requests and their time in Envoy (from the
first byte received from the gateway to the last byte sent back, in microseconds).
"""
import json
import os
import pathlib
import re
import statistics
import sys
import tempfile
import time
from collections import defaultdict

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parent))
import main as bench_entities  # noqa: E402

RESULTS = bench_entities.RESULTS
FORMAT = "%COMMON_DURATION(DS_RX_BEG:DS_TX_END:us)% %RESP(X-CACHE)% %REQ(:PATH)%\\n"


def with_access_log(yaml_text, path):
    """The subgraph listener's connection manager with a file access log."""
    found = re.search(r"\n( *)stat_prefix: subgraphs\n", yaml_text)
    if not found:
        raise RuntimeError("no subgraphs listener in the rendered bootstrap")
    ind = found.group(1)
    log = (f"{ind}access_log:\n{ind}- name: envoy.access_loggers.file\n{ind}  typed_config:\n"
           f'{ind}    "@type": type.googleapis.com/envoy.extensions.access_loggers.file.v3.FileAccessLog\n'
           f"{ind}    path: {path}\n"
           f'{ind}    log_format: {{ text_format_source: {{ inline_string: "{FORMAT}" }} }}\n')
    return yaml_text.replace(found.group(0), found.group(0) + log)


def run(name, bodies_file, work):
    log_path = work / f"access-{name}.log"
    plain_init = bench_entities.Envoy.__init__

    def logged_init(self, envoy_name, yaml_text):
        plain_init(self, envoy_name, with_access_log(yaml_text, log_path))

    bench_entities.Envoy.__init__ = logged_init
    subgraphs = bench_entities.Subgraphs()
    try:
        config = None
        if name == "c":
            config = dict(bench_entities.ENTITY_CONFIG, cache_bytes=bench_entities.CACHE_BYTES)
        envoy = bench_entities.subgraph_envoy(subgraphs.ports, config)
        urls = {n: f"http://127.0.0.1:{envoy.port}/{n}/graphql" for n in subgraphs.urls}
        _, url = bench_entities.gateway(urls)
        load = bench_entities.load
        warm = load(url, bodies_file, 0, amount=bench_entities.WARMUP)
        saturated = load(url, bodies_file, warm["next_index"], seconds=bench_entities.SECONDS)
        mark = log_path.stat().st_size if log_path.exists() else 0
        light = load(url, bodies_file, saturated["next_index"], seconds=bench_entities.LIGHT_SECONDS,
                     connections=bench_entities.LIGHT)
        time.sleep(1)  # the file logger flushes about every second
        deadline = time.time() + 15
        lines = []
        while time.time() < deadline:
            lines = log_path.read_bytes()[mark:].decode().splitlines()
            if len(lines) >= light["requests"] * 2:
                break
            time.sleep(1)
    finally:
        bench_entities.cleanup()
        bench_entities.Envoy.__init__ = plain_init
    return light, hops(lines)


def hops(lines):
    by = defaultdict(list)
    for line in lines:
        parts = line.split()
        if len(parts) != 3:
            continue
        micros, status, path = parts
        by[(path.strip("/").split("/")[0], status)].append(int(micros) / 1000)
    totals = defaultdict(int)
    for (subgraph, _), times in by.items():
        totals[subgraph] += len(times)
    out = []
    for (subgraph, status), times in sorted(by.items()):
        times.sort()
        n = len(times)
        out.append({"subgraph": subgraph, "x_cache": status, "requests": n,
                    "share": n / totals[subgraph],
                    "p50_ms": times[n // 2], "p90_ms": times[int(n * 0.9)],
                    "p99_ms": times[min(n - 1, int(n * 0.99))], "mean_ms": statistics.fmean(times)})
    return out


def markdown(results):
    out = ["# make bench-entities-hops", "",
           f"The subgraph hop of `make bench-entities` on {bench_entities.LIGHT} connections (below "
           f"saturation), after its warm-up ({bench_entities.WARMUP} requests) and "
           f"{bench_entities.SECONDS} s at saturation; data source {bench_entities.SOURCE_MS} ms. Time in "
           "Envoy: first byte from the gateway to last byte back, ms.", ""]
    for name, r in results.items():
        light = r["client"]["latency_ms"]
        out += [f"**({name})** client p50 {light['p50']:.2f} ms, p99 {light['p99']:.2f} ms, "
                f"{r['client']['requests']} requests", "",
                "| subgraph | x-cache | share of its requests | p50 | p90 | p99 | mean |",
                "|---|---|---|---|---|---|---|"]
        out += [f"| {h['subgraph']} | {h['x_cache']} | {h['share']:.1%} | {h['p50_ms']:.2f} | "
                f"{h['p90_ms']:.2f} | {h['p99_ms']:.2f} | {h['mean_ms']:.2f} |" for h in r["hops"]]
        out.append("")
    return "\n".join(out)


def main():
    _, bodies = bench_entities.workload()
    work = pathlib.Path(tempfile.mkdtemp(prefix="graphql-cache-hops-"))
    bodies_file = work / "bodies.jsonl"
    bodies_file.write_text("\n".join(bodies) + "\n")
    results = {}
    for name in ("c", "e"):
        light, by_status = run(name, str(bodies_file), work)
        results[name] = {"client": light, "hops": by_status}
        print(f"({name}) client p50 {light['latency_ms']['p50']:.2f} p99 {light['latency_ms']['p99']:.2f}",
              flush=True)
    RESULTS.mkdir(exist_ok=True)
    (RESULTS / "entities-hops.json").write_text(json.dumps(results, indent=1) + "\n")
    text = markdown(results)
    (RESULTS / "entities-hops.md").write_text(text + "\n")
    print(text)


if __name__ == "__main__":
    main()
