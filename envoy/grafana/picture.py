#!/usr/bin/env python3
"""`make dashboard-picture`: docs/images/dashboard.png from a real run.

Starts the fleet of `make demo-cluster` without Docker (Redis, the L2 service, the origin and two
Envoys on envoy/fleet.yaml, moved to free ports on 127.0.0.1), a real Prometheus scraping both
Envoys' admin /stats/prometheus and the L2's /metrics every 2 s, sends a bounded mix of named
GraphQL operations (plus mutations, purges and a few bad requests) for --seconds, then draws the
dashboard with render.py: its own panels and queries, evaluated by that Prometheus over the run.
Every process it starts stops with it.

Usage: picture.py --prometheus BIN [--seconds 75] [--out docs/images/dashboard.png]
(ENVOY_BIN, GRAPHQL_CACHE_WASM, ORIGIN_BIN, L2_BIN from the Makefile; redis-server on PATH).
"""

import argparse
import http.client
import json
import os
import random
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
import urllib.request

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
sys.path.insert(0, HERE)

import render  # noqa: E402

# The demo's development secrets (the Makefile's DEMO_SECRETS): never for anything but a demo.
SECRETS = {
    "GRAPHQL_CACHE_FLEET_KEY": "dev-fleet-key-change-me-0123456789abcdef",
    "GRAPHQL_CACHE_L2_SECRET": "dev-l2-secret-change-me-0123456789",
    "GRAPHQL_CACHE_PURGE_TOKEN": "demo-purge-token-change-me",
}
HOST = "graphql.example.com"  # the fleet's one name: every Envoy keys it the same
SCRAPE_SECONDS = 2
# Added to the filter's configuration for the picture: the origin's test headers reach it through
# the shared fetch (x-origin-header sets the answer's cache-control, set-cookie, ...), a stale
# window, and a cache small enough that evictions and admission show.
PICTURE_CONFIG = (
    '"forward_headers": ["x-origin-header", "x-origin-delay-ms"], '
    '"stale_while_revalidate_seconds": 20, "cache_bytes": 65536, "cache_slots": 128, '
    '"max_entry_bytes": 8192, '
)


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def replace_once(text, old, new, count=1):
    n = text.count(old)
    if n != count:
        raise SystemExit(f"envoy/fleet.yaml: expected {count} of {old!r}, found {n}: has it changed?")
    return text.replace(old, new)


def fleet_config(ports, wasm):
    with open(os.path.join(ROOT, "envoy", "fleet.yaml")) as f:
        text = f.read()
    text = replace_once(text, "address: 0.0.0.0,", "address: 127.0.0.1,")
    text = replace_once(text, "port_value: 9901 ", f"port_value: {ports['admin']} ")
    text = replace_once(text, "port_value: 8080 ", f"port_value: {ports['listener']} ")
    text = replace_once(text, "port_value: 8082 ", f"port_value: {ports['internal']} ")
    text = replace_once(text, "port_value: 8081 ", f"port_value: {ports['origin']} ")
    text = replace_once(text, "port_value: 8090 ", f"port_value: {ports['l2']} ", count=2)
    text = replace_once(text, "filename: graphql_cache.wasm", f"filename: {wasm}")
    text = replace_once(text, '"ttl_seconds": 30,', '"ttl_seconds": 30, ' + PICTURE_CONFIG)
    return text


class Fleet:
    def __init__(self, logs):
        self.logs, self.procs = logs, []

    def run(self, name, argv, cwd=None, env=None):
        log = open(os.path.join(self.logs, f"{name}.log"), "w")
        p = subprocess.Popen(argv, cwd=cwd or self.logs, env=env, stdout=log, stderr=subprocess.STDOUT,
                             stdin=subprocess.DEVNULL)
        self.procs.append((name, p))
        return p

    def stop(self):
        for _, p in reversed(self.procs):
            if p.poll() is None:
                p.terminate()
        for _, p in self.procs:
            try:
                p.wait(timeout=10)
            except subprocess.TimeoutExpired:
                p.kill()
                p.wait()

    def check_alive(self):
        for name, p in self.procs:
            if p.poll() is not None:
                raise SystemExit(f"{name} exited ({p.returncode}); see {self.logs}/{name}.log")


def get(url, headers=None, timeout=2):
    req = urllib.request.Request(url, headers=headers or {})
    with urllib.request.urlopen(req, timeout=timeout) as r:
        return r.read().decode()


def wait_for(what, fn, fleet, seconds=30):
    deadline = time.time() + seconds
    while time.time() < deadline:
        fleet.check_alive()
        try:
            if fn():
                return
        except OSError:
            pass
        time.sleep(0.1)
    raise SystemExit(f"{what} did not come up within {seconds} s; logs in {fleet.logs}")


def envoy_ready(admin):
    if get(f"http://127.0.0.1:{admin}/ready").strip() != "LIVE":
        return False
    clusters = get(f"http://127.0.0.1:{admin}/clusters")
    healthy = sum(1 for line in clusters.splitlines()
                  if line.startswith("graphql_cache_l2") and line.endswith("::health_flags::healthy"))
    stats = get(f"http://127.0.0.1:{admin}/stats?filter=^cluster.graphql_cache_l2_wait.upstream_rq_active$")
    active = int(stats.rsplit(":", 1)[-1].strip() or 0)
    return healthy == 2 and active >= 1


# --- the traffic -----------------------------------------------------------------------------------

def op(name, query, variables=None, headers=None):
    body = {"query": query, "operationName": name} if name else {"query": query}
    if variables is not None:
        body["variables"] = variables
    return json.dumps(body), headers or {}


def zipf_id(n, s=1.1):
    weights = [1 / (i ** s) for i in range(1, n + 1)]
    return random.choices(range(1, n + 1), weights)[0]


def random_request():
    """One request of the mix: (body, extra headers)."""
    r = random.random()
    if r < 0.30:
        return op("Home", "query Home { users { __typename id name } requestCount }")
    if r < 0.50:
        return op("UserProfile", "query UserProfile($id: ID!) { user(id: $id) { __typename id name email } }",
                  {"id": str(zipf_id(40))})
    if r < 0.66:
        # Many distinct posts: cold misses, and the small cache evicts.
        return op("PostDetail", "query PostDetail($id: ID!) { post(id: $id) { __typename id title body } }",
                  {"id": str(random.randint(1, 400))})
    if r < 0.76:
        # Short-lived answers served stale while one refresh runs.
        return op("Feed", "query Feed { posts { __typename id title } }", None,
                  {"x-origin-header": "cache-control: max-age=3, stale-while-revalidate=30"})
    if r < 0.80:
        return op("Flaky", "query Flaky { fail }")
    if r < 0.83:
        return op("Session", "query Session { users { id } }", None, {"x-origin-header": "cache-control: no-store"})
    if r < 0.85:
        return op("Banner", "query Banner { requestCount }", None, {"x-origin-header": "set-cookie: seen=1"})
    if r < 0.90:
        return op(None, "{ users { __typename id } }")
    if r < 0.94:
        return op("RenameUser",
                  "mutation RenameUser($id: ID!, $name: String!) { updateUser(id: $id, name: $name) { __typename id name } }",
                  {"id": str(random.randint(1, 3)), "name": random.choice(["Alice", "Bob", "Carol"])})
    if r < 0.96:
        return '{"query": "query Broken { users { id }"', {}
    return '{"query": ', {}


class Load:
    def __init__(self, listeners, internal, deadline):
        self.listeners, self.internal, self.deadline = listeners, internal, deadline
        self.sent = self.failed = 0
        self.lock = threading.Lock()

    def count(self, ok):
        with self.lock:
            self.sent += 1
            self.failed += 0 if ok else 1

    def post(self, conns, port, body, headers, path="/graphql"):
        conn = conns.get(port)
        if conn is None:
            conn = conns[port] = http.client.HTTPConnection("127.0.0.1", port, timeout=10)
        h = {"host": HOST, "content-type": "application/json", **headers}
        try:
            conn.request("POST", path, body=body, headers=h)
            resp = conn.getresponse()
            resp.read()
            self.count(resp.status < 500)
        except (OSError, http.client.HTTPException):
            conn.close()
            conns.pop(port, None)
            self.count(False)

    def steady(self, rate):
        conns = {}
        while time.time() < self.deadline:
            body, headers = random_request()
            self.post(conns, random.choice(self.listeners), body, headers)
            time.sleep(random.expovariate(rate))

    def bursts(self):
        """Identical slow queries at once, on both Envoys: one origin fetch, the rest coalesced."""
        body, _ = op("SlowReport", "query SlowReport { slowField(ms: 400) }")
        headers = {"x-origin-header": "cache-control: max-age=2, must-revalidate"}
        while time.time() < self.deadline:
            threads = [threading.Thread(target=self.post, args=({}, self.listeners[i % 2], body, headers))
                       for i in range(12)]
            for t in threads:
                t.start()
            for t in threads:
                t.join()
            time.sleep(3)

    def purges(self):
        conns = {}
        n = 0
        while time.time() < self.deadline:
            time.sleep(6)
            n += 1
            token = SECRETS["GRAPHQL_CACHE_PURGE_TOKEN"] if n % 4 else "wrong-token"
            kind = random.choice(['[{"kind":"type","type":"Post"}]', '[{"kind":"type","type":"User"}]'])
            self.post(conns, random.choice(self.internal), kind, {"authorization": f"Bearer {token}"},
                      path="/graphql-cache/purge")


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--prometheus", required=True, help="the prometheus binary")
    ap.add_argument("--seconds", type=int, default=75, help="how long the load runs")
    ap.add_argument("--rate", type=float, default=25, help="requests per second of each steady client (6)")
    ap.add_argument("--out", default=os.path.join(ROOT, "docs", "images", "dashboard.png"))
    ap.add_argument("--keep", action="store_true", help="keep the logs and Prometheus's data")
    args = ap.parse_args()

    envoy = os.environ.get("ENVOY_BIN", os.path.join(ROOT, ".tools", "bin", "envoy"))
    wasm = os.environ.get("GRAPHQL_CACHE_WASM", os.path.join(ROOT, "target/wasm32-wasip1/release/graphql_cache.wasm"))
    origin = os.environ.get("ORIGIN_BIN", os.path.join(ROOT, "target/release/graphql-origin"))
    l2 = os.environ.get("L2_BIN", os.path.join(ROOT, "target/release/graphql-cache-l2"))
    redis = shutil.which("redis-server")
    envoy, wasm, origin, l2, prometheus = (os.path.abspath(x) for x in (envoy, wasm, origin, l2, args.prometheus))
    for what, path in [("envoy", envoy), ("the wasm", wasm), ("the origin", origin), ("the L2", l2),
                       ("prometheus", prometheus), ("redis-server", redis)]:
        if not path or not os.path.exists(path):
            raise SystemExit(f"{what} not found ({path}): run it through `make dashboard-picture`")

    logs = tempfile.mkdtemp(prefix="dashboard-picture-")
    fleet = Fleet(logs)
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(1))
    ok = False
    try:
        ports = {k: free_port() for k in ("redis", "l2", "origin", "prometheus")}
        envoys = []
        for name in ("a", "b"):
            p = {k: free_port() for k in ("admin", "listener", "internal")}
            p.update(origin=ports["origin"], l2=ports["l2"])
            cfg = os.path.join(logs, f"envoy-{name}.yaml")
            with open(cfg, "w") as f:
                f.write(fleet_config(p, wasm))
            envoys.append((name, p, cfg))
        env = {**os.environ, **SECRETS}
        fleet.run("redis", [redis, "--port", str(ports["redis"]), "--bind", "127.0.0.1", "--save", "",
                            "--appendonly", "no"])
        fleet.run("l2", [l2, "--listen", f"127.0.0.1:{ports['l2']}", "--redis", f"redis://127.0.0.1:{ports['redis']}"],
                  env=env)
        fleet.run("origin", [origin, "--listen", f"127.0.0.1:{ports['origin']}", "--delay-ms", "20"])
        wait_for("the L2 and the origin", lambda: get(f"http://127.0.0.1:{ports['l2']}/health") is not None
                 and get(f"http://127.0.0.1:{ports['origin']}/_origin/health") is not None, fleet)
        for name, p, cfg in envoys:
            fleet.run(f"envoy-{name}", [envoy, "-c", cfg, "--concurrency", "2", "--use-dynamic-base-id",
                                        "-l", "warning"], env=env)
        for name, p, _ in envoys:
            wait_for(f"Envoy {name} with its L2", lambda p=p: envoy_ready(p["admin"]), fleet)

        prom_cfg = os.path.join(logs, "prometheus.yml")
        with open(prom_cfg, "w") as f:
            # JSON is YAML.
            json.dump({
                "global": {"scrape_interval": f"{SCRAPE_SECONDS}s", "scrape_timeout": f"{SCRAPE_SECONDS}s"},
                "scrape_configs": [
                    {"job_name": "envoy", "metrics_path": "/stats/prometheus",
                     "static_configs": [{"targets": [f"127.0.0.1:{p['admin']}"], "labels": {"instance": f"envoy-{n}"}}
                                        for n, p, _ in envoys]},
                    {"job_name": "graphql-cache-l2", "metrics_path": "/metrics",
                     "authorization": {"credentials": SECRETS["GRAPHQL_CACHE_L2_SECRET"]},
                     "static_configs": [{"targets": [f"127.0.0.1:{ports['l2']}"], "labels": {"instance": "l2"}}]},
                ],
            }, f, indent=1)
        prom_url = f"http://127.0.0.1:{ports['prometheus']}"
        fleet.run("prometheus", [prometheus, f"--config.file={prom_cfg}",
                                 f"--storage.tsdb.path={os.path.join(logs, 'tsdb')}",
                                 f"--web.listen-address=127.0.0.1:{ports['prometheus']}", "--log.level=warn"])
        wait_for("Prometheus", lambda: "Ready" in get(f"{prom_url}/-/ready"), fleet)

        stats = get(f"http://127.0.0.1:{envoys[0][1]['admin']}/stats/prometheus")
        if "graphql_cache_hits" not in stats:
            raise SystemExit("Envoy's /stats/prometheus has no graphql_cache_hits: the dashboard's names are wrong")
        if "graphql_cache_op_hits" not in stats:
            print("note: Envoy exports no graphql_cache_op_* series (per-operation counters not in this build, "
                  "or no stats_tags for them in envoy/fleet.yaml): those panels will be empty", flush=True)

        # A few scrapes before the load, so that rates start from zero.
        time.sleep(3 * SCRAPE_SECONDS)
        start = time.time()
        print(f"load: {args.seconds} s on Envoys {[p['listener'] for _, p, _ in envoys]}, "
              f"Prometheus on {prom_url}, logs in {logs}", flush=True)
        load = Load([p["listener"] for _, p, _ in envoys], [p["internal"] for _, p, _ in envoys],
                    start + args.seconds)
        workers = [threading.Thread(target=load.steady, args=(args.rate,)) for _ in range(6)]
        workers += [threading.Thread(target=load.bursts), threading.Thread(target=load.purges)]
        for t in workers:
            t.daemon = True
            t.start()
        while any(t.is_alive() for t in workers):
            fleet.check_alive()
            time.sleep(1)
        # One more scrape, so that the last requests are in.
        end = time.time()
        time.sleep(2 * SCRAPE_SECONDS)
        print(f"load: {load.sent} requests, {load.failed} failed or 5xx", flush=True)
        if load.sent == 0 or load.failed > load.sent / 2:
            raise SystemExit(f"the load mostly failed; logs in {logs}")
        with open(os.path.join(ROOT, "envoy", "grafana", "graphql-cache.json")) as f:
            dashboard = json.load(f)
        version = subprocess.run([prometheus, "--version"], capture_output=True, text=True).stdout.split("\n")[0]
        errors = render.render(dashboard, prom_url, start, end, args.out, scrape_seconds=SCRAPE_SECONDS,
                      footer=f"Drawn by envoy/grafana/render.py (not a Grafana screenshot): the dashboard's own panels "
                             f"and queries, evaluated by {version.split(' (')[0]} over a {args.seconds} s run of "
                             f"make dashboard-picture (two Envoys, the L2, Redis, the test origin).")
        print(f"wrote {os.path.relpath(args.out, ROOT)}")
        for e in errors:
            print(f"query failed: {e}")
        if errors:
            raise SystemExit(f"{len(errors)} panel queries failed on Prometheus")
        ok = True
    finally:
        fleet.stop()
        if ok and not args.keep:
            shutil.rmtree(logs, ignore_errors=True)
        else:
            print(f"logs and Prometheus data kept in {logs}")


if __name__ == "__main__":
    main()
