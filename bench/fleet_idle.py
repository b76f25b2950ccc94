#!/usr/bin/env python3
"""What an idle fleet costs Redis: Redis, one L2 service, the origin and N Envoys (default 8) x 2
workers on the shipped envoy/fleet.yaml (ports moved to free ones), no client traffic. Waits until
every Envoy uses its L2 (both L2 clusters healthy, every purge-log reader waiting on a long-poll),
then samples Redis's INFO commandstats over SECONDS and prints commands/s in all, per Envoy and by
command, and the L2 service's answers/s by verb.

usage: fleet_idle.py [--envoys N] [--seconds S] [--insecure-no-auth]
env: ENVOY_BIN, GRAPHQL_CACHE_WASM, ORIGIN_BIN, L2_BIN (defaults: the repository's builds)

Without --insecure-no-auth the L2 gets the dev secret in GRAPHQL_CACHE_L2_SECRET, as the tests and
the demo do; a filter that does not send it yet gets 401s (and no purge feed waits), so measure
such a filter with --insecure-no-auth.
"""
import argparse
import os
import pathlib
import re
import shutil
import socket
import subprocess
import sys
import tempfile
import time
import urllib.request

ROOT = pathlib.Path(__file__).resolve().parent.parent
ENVOY = os.path.abspath(os.environ.get("ENVOY_BIN", str(ROOT / ".tools/bin/envoy")))
WASM = os.path.abspath(os.environ.get("GRAPHQL_CACHE_WASM", str(ROOT / "target/wasm32-wasip1/release/graphql_cache.wasm")))
ORIGIN = os.path.abspath(os.environ.get("ORIGIN_BIN", str(ROOT / "target/release/graphql-origin")))
L2 = os.path.abspath(os.environ.get("L2_BIN", str(ROOT / "target/release/graphql-cache-l2")))
DEV_SECRET = "dev-l2-secret-change-me-0123456789"
# What envoy/fleet.yaml reads from Envoy's environment (host_env_keys): the demo's values.
ENVOY_SECRETS = {
    "GRAPHQL_CACHE_FLEET_KEY": "dev-fleet-key-change-me-0123456789abcdef",
    "GRAPHQL_CACHE_L2_SECRET": DEV_SECRET,
    "GRAPHQL_CACHE_PURGE_TOKEN": "demo-purge-token-change-me",
}


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def get(url, headers=None, timeout=2):
    req = urllib.request.Request(url, headers=headers or {})
    try:
        with urllib.request.urlopen(req, timeout=timeout) as r:
            return r.status, r.read().decode()
    except urllib.error.HTTPError as e:
        return e.code, e.read().decode(errors="replace")
    except OSError:
        return None, ""


def wait(what, check, seconds=30):
    deadline = time.time() + seconds
    while time.time() < deadline:
        if check():
            return
        time.sleep(0.1)
    raise SystemExit("fleet_idle: %s never happened" % what)


def redis_cli(port, *args):
    return subprocess.run(["redis-cli", "-p", str(port), *args], capture_output=True, text=True, check=True).stdout


def commandstats(port):
    out = {}
    for line in redis_cli(port, "INFO", "commandstats").splitlines():
        m = re.match(r"cmdstat_([^:]+):calls=(\d+)", line)
        if m:
            out[m.group(1)] = int(m.group(2))
    return out


def l2_counts(port, auth):
    status, text = get("http://127.0.0.1:%d/metrics" % port, auth)
    out = {}
    for line in text.splitlines():
        m = re.match(r'l2_requests_total\{verb="(\w+)",outcome="(\w+)"\} (\d+)', line)
        if m:
            out[m.group(1)] = out.get(m.group(1), 0) + int(m.group(3))
    return out


def envoy_config(ports, origin_port, l2_port):
    text = (ROOT / "envoy/fleet.yaml").read_text()
    for old, new in ((8080, ports["public"]), (8082, ports["internal"]), (9901, ports["admin"]),
                     (8081, origin_port), (8090, l2_port)):
        assert "port_value: %d" % old in text, "envoy/fleet.yaml no longer uses port %d" % old
        text = text.replace("port_value: %d" % old, "port_value: %d" % new)
    return text


def envoy_ready(admin, readers):
    status, clusters = get("http://127.0.0.1:%d/clusters" % admin)
    if status != 200:
        return False
    healthy = sum(1 for l in clusters.splitlines()
                  if l.startswith("graphql_cache_l2") and l.endswith("::health_flags::healthy"))
    _, stats = get("http://127.0.0.1:%d/stats?filter=^cluster.graphql_cache_l2_wait.upstream_rq_active$" % admin)
    active = int(stats.rsplit(":", 1)[-1]) if ":" in stats else 0
    return healthy == 2 and active >= readers


def start_fleet(args, work, procs):
    def run(name, cmd, cwd=work, env=None):
        log = open(work / (name + ".log"), "w")
        procs.append(subprocess.Popen(cmd, cwd=cwd, stdout=log, stderr=subprocess.STDOUT, env=env))

    redis_port, l2_port, origin_port = free_port(), free_port(), free_port()
    run("redis", ["redis-server", "--port", str(redis_port), "--bind", "127.0.0.1", "--save", "", "--appendonly", "no"])
    env = dict(os.environ)
    l2_cmd = [L2, "--listen", "127.0.0.1:%d" % l2_port, "--redis", "redis://127.0.0.1:%d" % redis_port]
    if args.insecure_no_auth:
        l2_cmd.append("--insecure-no-auth")
    else:
        env["GRAPHQL_CACHE_L2_SECRET"] = DEV_SECRET
    run("l2", l2_cmd, env=env)
    run("origin", [ORIGIN, "--listen", "127.0.0.1:%d" % origin_port])
    wait("the L2 service's health", lambda: get("http://127.0.0.1:%d/health" % l2_port)[0] == 200)
    wait("the origin", lambda: get("http://127.0.0.1:%d/_origin/health" % origin_port)[0] == 200)
    (work / "graphql_cache.wasm").symlink_to(os.path.abspath(WASM))
    admins = []
    for i in range(args.envoys):
        ports = {"public": free_port(), "internal": free_port(), "admin": free_port()}
        (work / ("envoy-%d.yaml" % i)).write_text(envoy_config(ports, origin_port, l2_port))
        run("envoy-%d" % i, [ENVOY, "-c", "envoy-%d.yaml" % i, "--concurrency", "2",
                             "--use-dynamic-base-id", "-l", "warning"], env=dict(os.environ, **ENVOY_SECRETS))
        admins.append(ports["admin"])
    return redis_port, l2_port, admins


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
    for tool in (ENVOY, WASM, ORIGIN, L2):
        if not os.path.exists(tool):
            sys.exit("fleet_idle: %s is missing (make build)" % tool)
    if not shutil.which("redis-server"):
        sys.exit("fleet_idle: redis-server is not on PATH (apt-get install redis-server)")
    auth = {} if args.insecure_no_auth else {"authorization": "Bearer " + DEV_SECRET}
    procs = []
    work = pathlib.Path(tempfile.mkdtemp(prefix="fleet-idle-"))
    try:
        redis_port, l2_port, admins = start_fleet(args, work, procs)
        wait("every Envoy using its L2 (logs in %s)" % work,
             lambda: all(envoy_ready(a, args.readers) for a in admins), seconds=60)
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
    finally:
        for pr in reversed(procs):
            pr.terminate()
        for pr in procs:
            try:
                pr.wait(timeout=10)
            except subprocess.TimeoutExpired:
                pr.kill()
        if os.environ.get("FLEET_IDLE_KEEP"):
            print("fleet_idle: logs kept in %s" % work)
        else:
            shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
