#!/usr/bin/env python3
"""`make soak`: a million distinct keys (answers of about 1 KB, each asked twice) through one
Envoy (2 workers) with the filter, in bounded steps (wrk, pinned as in the bench). After 100k, 500k
and 1M keys it samples Envoy's RSS and the filter's counters: once `cache_bytes` is spent, memory
must stay flat (the filter never grows per key) and within the budget plus Envoy's own.
"""
import json
import os
import pathlib
import subprocess
import sys
import tempfile
import time
import urllib.request

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parent))
import bench  # noqa: E402  (reuses its Envoy bootstrap and process helpers)

ROOT = bench.ROOT
LUA = ROOT / "bench/soak.lua"
STEPS = [int(s) for s in os.environ.get("SOAK_STEPS", "100000,500000,1000000").split(",")]
CONFIG = {"ttl_seconds": 300, "cache_bytes": 64 << 20}
# Requests per second wrk sustains here for all-miss traffic (each key new); sizes each step.
RATE = float(os.environ.get("SOAK_RATE", "2500"))


def rss_mb(pid):
    for line in open(f"/proc/{pid}/status"):
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    return 0.0


def counters():
    with urllib.request.urlopen(f"http://127.0.0.1:{bench.ADMIN}/stats?format=json&filter=graphql_cache", timeout=5) as r:
        stats = json.loads(r.read())["stats"]
    return {s["name"].split(".")[-1]: s["value"] for s in stats if "value" in s}


def main():
    bench.ports_free()
    work = tempfile.mkdtemp(prefix="graphql-cache-soak-")
    origin = bench.start_origin([])
    yaml_text = bench.bootstrap(bench.wasm_filter(CONFIG), bench.ORIGIN_ROUTE)
    envoy = bench.start_envoy(yaml_text, work, concurrency=2)
    rows = []
    sent = 0
    started = time.time()
    # Envoy's own (its VMs, the filter's fixed records) before any key: what the budget adds to.
    time.sleep(2)
    baseline = rss_mb(envoy.pid)
    print(f"  {0:>9} keys  Envoy RSS {baseline:8.1f} MiB (baseline)", flush=True)
    try:
        for target in STEPS:
            env = dict(os.environ, SOAK_START=str(sent), SOAK_COUNT=str(target - sent), SOAK_THREADS="2")
            # wrk's threads stop after their share, but wrk itself waits out -d: size it to the
            # share at a rate this machine sustains, with room to spare.
            duration = max(5, int(2 * (target - sent) / RATE * 1.3) + 2)
            subprocess.run(["taskset", "-c", bench.LOAD_CPU, "wrk", "-t2", "-c32", f"-d{duration}s", "--timeout", "10s",
                            "-s", str(LUA), f"http://127.0.0.1:{bench.LISTEN}/graphql"],
                           env=env, capture_output=True, text=True, check=True)
            sent = target
            c = counters()
            asked = c.get("misses", 0) + c.get("hits", 0)
            if asked < 2 * target * 0.99:
                print(f"  only {asked} of {2 * target} requests were sent in time (raise SOAK_RATE's margin)")
            rows.append((target, rss_mb(envoy.pid), c.get("stores", 0), c.get("evictions", 0),
                         c.get("admissions_rejected", 0)))
            print(f"  {target:>9} keys  Envoy RSS {rows[-1][1]:8.1f} MiB  stores {rows[-1][2]}  evictions {rows[-1][3]}"
                  f"  not admitted {rows[-1][4]}", flush=True)
    finally:
        bench.stop(envoy)
        bench.stop(origin)
    print()
    print(f"{'keys':>9} {'RSS MiB':>9} {'stores':>9} {'evictions':>10} {'not admitted':>13}")
    for keys, rss, stores, evictions, rejected in rows:
        print(f"{keys:>9} {rss:9.1f} {stores:>9} {evictions:>10} {rejected:>13}")
    growth = rows[-1][1] - rows[0][1]
    print(f"\nRSS growth from {rows[0][0]} to {rows[-1][0]} keys: {growth:+.1f} MiB "
          f"(cache_bytes {CONFIG['cache_bytes'] >> 20} MiB of ~1.1 KB entries; flat once it is spent)")
    print(f"RSS over the baseline ({baseline:.1f} MiB) at {rows[-1][0]} keys: {rows[-1][1] - baseline:+.1f} MiB")
    print(f"soak took {time.time() - started:.0f} s")


if __name__ == "__main__":
    main()
