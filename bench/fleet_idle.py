#!/usr/bin/env python3
"""What an idle fleet costs Redis: Redis, one L2 service, the origin and N Envoys (default 8) x 2
workers on the shipped envoy/fleet.yaml (ports moved to free ones), no client traffic. Waits until
every Envoy uses its L2 (both L2 clusters healthy, every purge-log reader waiting on a long-poll),
then samples Redis's INFO commandstats over SECONDS and prints commands/s in all, per Envoy and by
command, and the L2 service's answers/s by verb.

usage: fleet_idle.py [--envoys N] [--seconds S] [--insecure-no-auth]
env: ENVOY_BIN, GRAPHQL_CACHE_WASM, ORIGIN_BIN, L2_BIN (defaults: the repository's builds);
FLEET_IDLE_KEEP=1 keeps the processes' logs. The fleet starts as bench/fleet_common.py starts it.

Without --insecure-no-auth the L2 gets the dev secret in GRAPHQL_CACHE_L2_SECRET, as the tests and
the demo do; a filter that does not send it yet gets 401s (and no purge feed waits), so measure
such a filter with --insecure-no-auth.
"""
import argparse
import time

from fleet_common import (DEV_SECRET, Processes, check_tools, commandstats, l2_counts, redis_cli, start_fleet,
                          wait_fleet_ready)


def report(args, before, after, l2_before, l2_after, elapsed):
    delta = {c: after.get(c, 0) - before.get(c, 0) for c in after}
    delta = {c: n for c, n in delta.items() if n > 0 and c not in ("info", "config|resetstat")}
    total = sum(delta.values())
    print("idle fleet: %d Envoys x 2 workers, one L2, one Redis; %.1f s without client traffic"
          % (args.envoys, elapsed))
    print("Redis commands/s: %.1f in all, %.2f per Envoy" % (total / elapsed, total / elapsed / args.envoys))
    for c, n in sorted(delta.items(), key=lambda kv: -kv[1]):
        print("  %-20s %8.2f/s  (%.2f per Envoy)" % (c, n / elapsed, n / elapsed / args.envoys))
    print("L2 service answers/s by verb (from its /metrics):")
    for verb in sorted(l2_after):
        n = l2_after[verb] - l2_before.get(verb, 0)
        if n:
            print("  %-20s %8.2f/s" % (verb, n / elapsed))


def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--envoys", type=int, default=8)
    p.add_argument("--seconds", type=float, default=10.0)
    p.add_argument("--insecure-no-auth", action="store_true")
    # One follower of the purge log per Envoy; builds before it had one per worker and one on the
    # main thread (3 with --concurrency 2).
    p.add_argument("--readers", type=int, default=1, help="purge-log long-polls per Envoy once caught up")
    args = p.parse_args()
    check_tools()
    auth = {} if args.insecure_no_auth else {"authorization": "Bearer " + DEV_SECRET}
    with Processes("FLEET_IDLE_KEEP") as procs:
        redis_port, l2_port, _, envoys = start_fleet(procs, args.envoys, args.insecure_no_auth)
        wait_fleet_ready(procs, envoys, args.readers)
        # Past the start-up reads: the steady idle state.
        time.sleep(2)
        redis_cli(redis_port, "CONFIG", "RESETSTAT")
        l2_before = l2_counts(l2_port, auth)
        t0 = time.time()
        time.sleep(args.seconds)
        after = commandstats(redis_port)
        elapsed = time.time() - t0
        l2_after = l2_counts(l2_port, auth)
        report(args, {}, after, l2_before, l2_after, elapsed)


if __name__ == "__main__":
    main()
