#!/usr/bin/env python3
"""`make bench-entities`: a catalogue workload through Apollo Gateway with (a) no cache, (b) the
whole-response cache in front of the gateway, (c) entity caching on the subgraph hop, (d) both;
then what a partial hit costs at the subgraph hop; then (a) and (c) side by side in time below
saturation, which gives the light-load p99 verdict (see paired_light). Writes
bench/results/entities.{json,md,png}.

Topology (tests/federation/: three Node subgraphs, Apollo Gateway 2.14), all on 127.0.0.1:

  (a) client -> gateway -> subgraphs
  (b) client -> Envoy (whole answers) -> gateway -> subgraphs
  (c) client -> gateway -> Envoy (entities) -> subgraphs
  (d) client -> Envoy (whole answers) -> gateway -> Envoy (entities) -> subgraphs
  (e) client -> gateway -> Envoy (no filter) -> subgraphs: (c)'s hop without the filter

Each Envoy its own process with one worker (so each layer's counters are its own); nothing
pinned (the gateway, the subgraphs, the Envoys and the load share the machine's cores), unless
ENTITIES_PIN=1 (make bench-entities-pinned): the gateway and subgraphs on CPU 1, the Envoys and
the load on CPU 0. A run of a
configuration starts everything fresh (empty caches), sends the first ENTITIES_WARMUP bodies of the
workload, zeroes the subgraphs' counts, and loads it for ENTITIES_SECONDS from the next body on:
every configuration sees the same sequence of client queries. ENTITIES_ROUNDS rounds, every other
one in reverse order; a configuration's figures are its median round's (req/s, p50, p99) or its
rounds' together (representations, CPU per request).

The workload (seeded, deterministic): `query Search($term, $offset) { search(term, first: 10,
offset) { id name price reviews { id rating author { id name } } } }`: a page of a search's
results. Terms are drawn from a Zipf(0.7) popularity over 100,000 terms, the page from 1st 60 %,
2nd 25 %, 3rd 15 %. A term's results are products drawn from a Zipf(1) popularity over the 200
products (tests/federation/schemas.mjs, `searchResults`), so pages of different searches share
their popular products, with their reviews (reviews subgraph: `_entities` of Product) and the
reviews' authors (users subgraph: `_entities` of User), while a whole page rarely repeats.

The subgraphs keep their data in memory; each subgraph request first waits ENTITIES_SOURCE_MS (2 by
default) as if reading a database once (one batched query a request): latency, not CPU.

Equal cache memory: `cache_bytes` = ENTITIES_CACHE_BYTES for the one cache of (b) and of (c), and
half of it for each of (d)'s two.
"""
import atexit
import bisect
import http.client
import itertools
import json
import os
import pathlib
import random
import re
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import time
import urllib.request

ROOT = pathlib.Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "bench"))
import bench  # noqa: E402  (the Envoy bootstrap, rendered from testkit/bootstrap/)

ENVOY = os.environ.get("ENVOY_BIN", str(ROOT / ".tools/bin/envoy"))
WASM = os.environ.get("GRAPHQL_CACHE_WASM", str(ROOT / "target/wasm32-wasip1/release/graphql_cache.wasm"))
FEDERATION = ROOT / "tests/federation"
LOAD = ROOT / "bench/entities/load.mjs"
RESULTS = ROOT / "bench/results"
# The results' file names: bench/results/<ENTITIES_NAME>.{json,md,png}.
NAME = os.environ.get("ENTITIES_NAME", "entities")

SECONDS = int(os.environ.get("ENTITIES_SECONDS", "15"))
WARMUP = int(os.environ.get("ENTITIES_WARMUP", "600"))
ROUNDS = int(os.environ.get("ENTITIES_ROUNDS", "5"))
CONNECTIONS = int(os.environ.get("ENTITIES_CONNECTIONS", "8"))
CACHE_BYTES = int(os.environ.get("ENTITIES_CACHE_BYTES", str(4 << 20)))
PARTIAL_REPS = int(os.environ.get("ENTITIES_PARTIAL_REPS", "1000"))
SEED = 20261202
BODIES = 200_000
TERMS, TERM_ZIPF = 100_000, 0.7
PAGES = [(0, 0.60), (10, 0.25), (20, 0.15)]
# What subgraphs with @cacheControl hints send; without it Apollo Gateway answers `no-store` and
# the whole-response cache stores nothing.
SUBGRAPH_CACHE_CONTROL = "public, max-age=60"
# The catalogue (tests/federation/schemas.mjs's rules, scaled): product i has i % 4 reviews, by users
# ((i + k) % USERS) + 1.
PRODUCTS, USERS = 20_000, 5_000
# Each subgraph answer waits this long (SUBGRAPHS_DELAY_MS), as a subgraph reading its
# database once per request does: in-memory subgraphs that resolve in microseconds leave an entity
# cache nothing to save but their CPU (ENTITIES_SOURCE_MS=0 measures that case).
SOURCE_MS = int(os.environ.get("ENTITIES_SOURCE_MS", "2"))
# Client latency is also measured below saturation: after the saturation run, the same stream
# continues on ENTITIES_LIGHT_CONNECTIONS connections (each sends its next request when answered).
# A closed loop at saturation has mean latency connections / throughput (Little's law), so its
# percentiles rank CPU per request on this shared machine, not what a request waits for.
# (autocannon's overallRate is no fixed offered load: it sends each second's quota at full speed.)
LIGHT = int(os.environ.get("ENTITIES_LIGHT_CONNECTIONS", "2"))
LIGHT_SECONDS = int(os.environ.get("ENTITIES_LIGHT_SECONDS", "15"))
# ENTITIES_PIN=1: the application (gateway and subgraphs) on `make bench`'s origin CPU, the clients
# and the Envoys on its Envoy CPU, as where the proxy's CPU is not taken from the application (a
# sidecar's own share, a gateway node). By default every process shares both CPUs, and Envoy
# competes with the gateway.
PIN = os.environ.get("ENTITIES_PIN", "0") not in ("", "0")
APP_CPU, PROXY_CPU = bench.LOAD_CPU, bench.ENVOY_CPU
QUERY = ("query Search($term: String!, $offset: Int!) { search(term: $term, first: 10, offset: $offset) "
         "{ id name price reviews { id rating author { id name } } } }")

FRONT_CONFIG = {"ttl_seconds": 60}
# envoy/federation.yaml's subgraph-hop configuration (Product prefetched), with User public and
# prefetched too: the bench's clients send no authorization and ask only for users' names (with
# `User: private`, an anonymous client's users are fetched every time, never stored, and never
# prefetched).
ENTITY_CONFIG = {"ttl_seconds": 60, "vary_headers": [], "default_scope": "public",
                 "entities": {"ttl_seconds": 60, "types": {"Product": {"ttl_seconds": 300, "prefetch": True},
                                                            "User": {"prefetch": True}}}}
CONFIGS = [
    # (name, label, front cache bytes, entity cache bytes)
    ("a", "no cache", 0, 0),
    ("b", "whole-response cache", CACHE_BYTES, 0),
    ("c", "entity cache", 0, CACHE_BYTES),
    ("d", "both (half each)", CACHE_BYTES // 2, CACHE_BYTES // 2),
    # (c)'s topology without the filter: what the Envoy hop itself costs, so (c) against (e) is
    # the filter's own effect where an Envoy is on that hop anyway (a mesh, a sidecar).
    ("e", "Envoy hop, no filter", 0, 0),
]
# The configuration whose subgraph hop is a plain Envoy.
PLAIN_HOP = "e"

PROCS = []
DIRS = []


def cleanup(*_):
    for p in reversed(PROCS):
        stop(p)
    PROCS.clear()


def remove_dirs():
    for d in DIRS:
        shutil.rmtree(d, ignore_errors=True)


def on_signal(signum, _frame):
    cleanup()
    sys.exit(128 + signum)


def stop(p):
    if p.poll() is None:
        p.terminate()
        try:
            p.wait(timeout=5)
        except subprocess.TimeoutExpired:
            p.kill()
            p.wait()


def cpu_seconds(p):
    """User and system CPU time of a process so far."""
    fields = pathlib.Path(f"/proc/{p.pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def cpu_while(procs, run):
    """`run()`'s result and the CPU seconds each of `procs` spent meanwhile."""
    before = {n: cpu_seconds(p) for n, p in procs.items()}
    result = run()
    return result, {n: cpu_seconds(p) - before[n] for n, p in procs.items()}


def get(url, timeout=5):
    with urllib.request.urlopen(url, timeout=timeout) as r:
        return r.read()


def post(url, data=b"", timeout=5):
    req = urllib.request.Request(url, data=data, method="POST", headers={"content-type": "application/json"})
    with urllib.request.urlopen(req, timeout=timeout) as r:
        return r.read()


# --- the workload ------------------------------------------------------------------------------
def workload():
    """BODIES client request bodies, and each one's (term, offset)."""
    rng = random.Random(SEED)
    cumulative = list(itertools.accumulate(1 / r ** TERM_ZIPF for r in range(1, TERMS + 1)))
    offsets, weights = zip(*PAGES)
    keys, bodies = [], []
    for _ in range(BODIES):
        term = f"q{bisect.bisect_left(cumulative, rng.random() * cumulative[-1])}"
        offset = rng.choices(offsets, weights)[0]
        keys.append((term, offset))
        bodies.append(json.dumps({"query": QUERY, "variables": {"term": term, "offset": offset},
                                  "operationName": "Search"}, separators=(",", ":")))
    return keys, bodies


def repeats(keys, start, end):
    """Of the bodies [start, end), the share asking exactly what an earlier body asked."""
    seen = set(keys[:start])
    n = 0
    for k in keys[start:end]:
        n += k in seen
        seen.add(k)
    return n / max(end - start, 1)


# --- processes ---------------------------------------------------------------------------------
def pinned(cpu, argv):
    return ["taskset", "-c", cpu, *argv] if PIN else argv


def node(script, args, env, ready_word=" ready "):
    p = subprocess.Popen(pinned(APP_CPU, ["node", str(FEDERATION / script), *args]), env=dict(os.environ, **env),
                         stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
    PROCS.append(p)
    line = p.stdout.readline()
    if ready_word not in line:
        raise RuntimeError(f"{script} did not start: {line!r}")
    return p, line.split(ready_word, 1)[1].strip()


class Subgraphs:
    def __init__(self):
        self.proc, ready = node("subgraphs.mjs", ["--port-products", "0", "--port-reviews", "0", "--port-users", "0"],
                                {"SUBGRAPHS_CACHE_CONTROL": SUBGRAPH_CACHE_CONTROL, "SUBGRAPHS_DELAY_MS": str(SOURCE_MS),
                                 "FEDERATION_PRODUCTS": str(PRODUCTS), "FEDERATION_USERS": str(USERS)})
        self.urls = json.loads(ready)
        self.ports = {n: int(re.search(r":(\d+)/", u).group(1)) for n, u in self.urls.items()}

    def reset(self):
        for port in self.ports.values():
            post(f"http://127.0.0.1:{port}/counts/reset")

    def counts(self):
        return {n: json.loads(get(f"http://127.0.0.1:{port}/counts")) for n, port in self.ports.items()}


def gateway(urls):
    env = {"PRODUCTS_URL": urls["products"], "REVIEWS_URL": urls["reviews"], "USERS_URL": urls["users"],
           "PORT": "0", "APOLLO_TELEMETRY_DISABLED": "1"}
    p, url = node("apollo-gateway.mjs", [], env)
    return p, url


def filter_item(config, vm_id):
    return bench._wasm_filter(WASM, vm_id, json.dumps(config))


def route(prefix, cluster):
    return f'- match: {{ prefix: "{prefix}" }}\n  route: {{ cluster: {cluster}, timeout: 15s }}'


class Envoy:
    """One Envoy (one worker) with one listener; ports chosen by the kernel."""

    def __init__(self, name, yaml_text):
        self.dir = pathlib.Path(tempfile.mkdtemp(prefix=f"graphql-cache-entities-{name}-"))
        DIRS.append(self.dir)
        (self.dir / "envoy.yaml").write_text(yaml_text)
        admin_file = self.dir / "admin.txt"
        self.log = open(self.dir / "envoy.log", "w")
        self.proc = subprocess.Popen(
            pinned(PROXY_CPU, [ENVOY, "-c", str(self.dir / "envoy.yaml"), "--concurrency", "1", "--use-dynamic-base-id",
                               "--admin-address-path", str(admin_file), "-l", "warning"]),
            stdout=self.log, stderr=subprocess.STDOUT)
        PROCS.append(self.proc)
        deadline = time.time() + 60
        while True:
            if self.proc.poll() is not None:
                raise RuntimeError(f"Envoy exited:\n{(self.dir / 'envoy.log').read_text()}")
            if time.time() > deadline:
                raise RuntimeError("Envoy not ready after 60 s")
            try:
                self.admin = int(admin_file.read_text().strip().rsplit(":", 1)[1])
                get(f"http://127.0.0.1:{self.admin}/ready", timeout=1)
                listeners = json.loads(get(f"http://127.0.0.1:{self.admin}/listeners?format=json"))
                status = next(l for l in listeners["listener_statuses"] if l["name"] == name)
                self.port = status["local_address"]["socket_address"]["port_value"]
                break
            except Exception:
                time.sleep(0.05)

    def counters(self):
        text = get(f"http://127.0.0.1:{self.admin}/stats?filter=%5Ewasmcustom%5C.graphql_cache%5C.").decode()
        out = {}
        for line in text.splitlines():
            name, _, value = line.partition(": ")
            if value.strip().isdigit():
                out[name.rsplit(".", 1)[1]] = int(value)
        return out


def front_envoy(gateway_port, cache_bytes):
    listener = bench.render("listener.yaml", name="front", port=0, listener_extra="", stat_prefix="front", routes="",
                            catch_all="route: { cluster: origin, timeout: 30s }",
                            filters=filter_item(dict(FRONT_CONFIG, cache_bytes=cache_bytes), "graphql_cache"))
    yaml_text = bench.render("envoy.yaml", admin_port=0, listener=listener,
                             origin_cluster=bench.render("cluster.yaml", name="origin", port=gateway_port),
                             clusters="", bootstrap_extra="")
    return Envoy("front", yaml_text)


def subgraph_envoy(ports, config):
    """envoy/federation.yaml's `subgraphs` listener: a prefix route to each subgraph, paths kept
    (with no filter when `config` is None)."""
    routes = "\n".join(route(f"/{n}/", n) for n in ("products", "reviews", "users"))
    filters = filter_item(config, "graphql_cache_entities") if config is not None else ""
    listener = bench.render("listener.yaml", name="subgraphs", port=0, listener_extra="", stat_prefix="subgraphs",
                            routes=routes, catch_all="direct_response: { status: 404 }", filters=filters)
    clusters = bench.render("cluster.yaml", name="reviews", port=ports["reviews"]) + \
        bench.render("cluster.yaml", name="users", port=ports["users"])
    yaml_text = bench.render("envoy.yaml", admin_port=0, listener=listener,
                             origin_cluster=bench.render("cluster.yaml", name="products", port=ports["products"]),
                             clusters=clusters, bootstrap_extra="")
    return Envoy("subgraphs", yaml_text)


def load(url, bodies_file, start, amount=None, seconds=None, connections=CONNECTIONS, raw=None):
    args = pinned(PROXY_CPU, ["node", str(LOAD)]) + ["--url", url, "--bodies", bodies_file, "--start", str(start),
            "--connections", str(connections)]
    args += ["--amount", str(amount)] if amount else ["--duration", str(seconds)]
    args += ["--raw", raw] if raw else []
    out = subprocess.run(args, capture_output=True, text=True, timeout=(seconds or 120) + 60)
    if out.returncode != 0:
        raise RuntimeError(f"load.mjs failed: {out.stderr}")
    return json.loads(out.stdout.strip().splitlines()[-1])


def ask(url, body):
    return json.loads(post(url, body.encode(), timeout=15))


# --- one configuration -------------------------------------------------------------------------
def subgraph_hop(name, entity_bytes, subgraphs):
    """The configuration's Envoy on the subgraph hop, if it has one, and the subgraphs' URLs the
    gateway is given."""
    if not entity_bytes and name != PLAIN_HOP:
        return None, dict(subgraphs.urls)
    envoy = subgraph_envoy(subgraphs.ports, dict(ENTITY_CONFIG, cache_bytes=entity_bytes) if entity_bytes else None)
    return envoy, {n: f"http://127.0.0.1:{envoy.port}/{n}/graphql" for n in subgraphs.urls}


def run_config(name, front_bytes, entity_bytes, keys, bodies, bodies_file, probes):
    subgraphs = Subgraphs()
    envoys = {}
    try:
        hop, urls = subgraph_hop(name, entity_bytes, subgraphs)
        if hop:
            envoys["subgraphs"] = hop
        gateway_proc, url = gateway(urls)
        if front_bytes:
            envoys["front"] = front_envoy(int(re.search(r":(\d+)/", url).group(1)), front_bytes)
            url = f"http://127.0.0.1:{envoys['front'].port}/"
        procs = {"gateway": gateway_proc, "subgraphs": subgraphs.proc}
        procs.update({f"envoy_{n}": e.proc for n, e in envoys.items()})
        warm = load(url, bodies_file, 0, amount=WARMUP)
        subgraphs.reset()
        before = {n: e.counters() for n, e in envoys.items()}
        r, cpu = cpu_while(procs, lambda: load(url, bodies_file, warm["next_index"], seconds=SECONDS))
        counts = subgraphs.counts()
        after = {n: e.counters() for n, e in envoys.items()}
        # Latency below saturation: the same stream continued on LIGHT connections.
        paced = load(url, bodies_file, r["next_index"], seconds=LIGHT_SECONDS, connections=LIGHT) if LIGHT else None
        # Answers to a few queries of the warm-up, asked again now: each must equal (a)'s.
        answers = [ask(url, bodies[i]) for i in probes]
    finally:
        cleanup()
    r["rps"] = r["requests"] / r["duration_s"]
    if paced:
        r["paced"] = {k: paced[k] for k in ("requests", "duration_s", "non2xx", "latency_ms")}
    r["cpu_seconds"] = cpu
    r["cpu_ms_per_request"] = {n: v * 1000 / max(r["requests"], 1) for n, v in cpu.items()}
    r["representations"] = sum(c["representations"] for c in counts.values())
    r["subgraph_requests"] = sum(c["requests"] for c in counts.values())
    r["representations_per_request"] = r["representations"] / max(r["requests"], 1)
    r["subgraph_requests_per_request"] = r["subgraph_requests"] / max(r["requests"], 1)
    r["resolved"] = {n: c["resolved"] for n, c in counts.items()}
    r["exact_repeats"] = repeats(keys, r["first_index"], r["next_index"])
    r["warmup"] = {k: warm[k] for k in ("requests", "duration_s", "non2xx")}
    r["envoy_counters"] = {n: {k: after[n].get(k, 0) - before[n].get(k, 0) for k in after[n]
                               if after[n].get(k, 0) != before[n].get(k, 0)} for n in after}
    return r, answers


def aggregate(runs):
    req = sum(r["requests"] for r in runs)
    med = lambda f: statistics.median(f(r) for r in runs)
    return {
        "rounds": len(runs),
        "requests": req,
        "rps": med(lambda r: r["rps"]),
        "rounds_rps": [round(r["rps"]) for r in runs],
        "rounds_p99_ms": [round(r["latency_ms"]["p99"], 1) for r in runs],
        "p50_ms": med(lambda r: r["latency_ms"]["p50"]),
        "p99_ms": med(lambda r: r["latency_ms"]["p99"]),
        # On LIGHT connections (below saturation), median round.
        "paced_p50_ms": med(lambda r: r["paced"]["latency_ms"]["p50"]) if "paced" in runs[0] else None,
        "paced_p99_ms": med(lambda r: r["paced"]["latency_ms"]["p99"]) if "paced" in runs[0] else None,
        "rounds_paced_p99_ms": [round(r["paced"]["latency_ms"]["p99"], 1) for r in runs if "paced" in r],
        "paced_non2xx": sum(r.get("paced", {}).get("non2xx", 0) for r in runs),
        "representations_per_request": sum(r["representations"] for r in runs) / max(req, 1),
        "subgraph_requests_per_request": sum(r["subgraph_requests"] for r in runs) / max(req, 1),
        "exact_repeats": med(lambda r: r["exact_repeats"]),
        "non2xx": sum(r["non2xx"] for r in runs),
        "errors": sum(r["errors"] + r["timeouts"] for r in runs),
        "front_hit_ratio": hit_ratio(runs, "front"),
        # CPU time per client request of each process, over the measured windows.
        "cpu_ms_per_request": {n: sum(r["cpu_seconds"].get(n, 0) for r in runs) * 1000 / max(req, 1)
                               for n in runs[0]["cpu_seconds"]},
        "resolved_per_request": {t: sum(r["resolved"][sg].get(t, 0) for r in runs for sg in r["resolved"]) / max(req, 1)
                                 for t in ("Product", "User", "Review")},
        "entity_layer": {k: sum(r["envoy_counters"].get("subgraphs", {}).get(k, 0) for r in runs)
                         for k in ("hits", "misses", "stores", "evictions", "admissions_rejected")},
    }


def hit_ratio(runs, layer):
    c = [r["envoy_counters"].get(layer) for r in runs]
    if not all(c):
        return None
    hits = sum(x.get("hits", 0) for x in c)
    return hits / max(hits + sum(x.get("misses", 0) for x in c), 1)


# --- partial hits at the subgraph hop ----------------------------------------------------------
# What Apollo Gateway sends the reviews subgraph for the workload's query (tests/federation/README.md).
ENTITIES_QUERY = ("query Search__reviews__1($representations:[_Any!]!){_entities(representations:$representations)"
                  "{...on Product{reviews{id rating author{__typename id}}}}}")


class Conn:
    def __init__(self, port):
        self.port = port
        self.c = http.client.HTTPConnection("127.0.0.1", port, timeout=15)

    def send(self, path, ids, round_tag):
        body = json.dumps({"query": ENTITIES_QUERY, "operationName": "Search__reviews__1",
                           "variables": {"representations": [{"__typename": "Product", "id": str(i)} for i in ids]}})
        headers = {"content-type": "application/json", "accept": "*/*", "x-bench-round": round_tag}
        t = time.perf_counter()
        self.c.request("POST", path, body, headers)
        resp = self.c.getresponse()
        data = resp.read()
        elapsed = (time.perf_counter() - t) * 1000
        if resp.status != 200 or b'"errors"' in data:
            raise RuntimeError(f"{resp.status} {data[:300]!r}")
        return elapsed, resp.getheader("x-cache"), resp.getheader("x-cache-entities"), json.loads(data)


# The pause after a request whose entities the next one finds (see partial_hits).
SETTLE_S = 0.005


def partial_hits():
    """_entities requests of 20 Products to the reviews subgraph through Envoy's subgraph listener:
    18 cached and 2 not (PARTIAL) against none cached (MISS), alternately, PARTIAL_REPS times each;
    all 20 cached (HIT) and straight to the subgraph (no Envoy) beside them. Each repetition has
    its own `x-bench-round` header, a `vary_headers` entry of this Envoy: its entities are new to
    the cache, so repetitions never find each other's. After the request that stores what the next
    one finds (the 18, the miss), a pause of SETTLE_S: Envoy stores a fetched batch's entities just
    after answering it (about 1 ms later, or when a batch that needs them comes first), and the
    request timed next must not be charged for storing the one before."""
    subgraphs = Subgraphs()
    try:
        # The default 64 MiB, not the load's budget: the repetitions' ~40 entities each must all be
        # admitted (a full table admits a newcomer only over a more often asked entry).
        config = dict(ENTITY_CONFIG, debug_headers=True, vary_headers=["x-bench-round"])
        envoy = subgraph_envoy(subgraphs.ports, config)
        via, direct = Conn(envoy.port), Conn(subgraphs.ports["reviews"])
        rng = random.Random(SEED + 1)
        times = {"partial": [], "miss": [], "hit": [], "direct": []}
        answers_equal = True
        # The admission policy may refuse a warmed entity now and then (the cache is full of
        # entities asked more often): that repetition's split is then not 18/2. Counted, not fatal.
        off_split = 0
        for i in range(-20, PARTIAL_REPS):  # the first 20: warm-up, not kept
            ids = rng.sample(range(1, PRODUCTS + 1), 20)
            took = {}
            order = ("partial", "miss") if i % 2 == 0 else ("miss", "partial")
            for kind in order:
                tag = f"{kind}-{i}"
                if kind == "partial":
                    _, x, _, _ = via.send("/reviews/graphql", ids[:18], tag)
                    assert x == "MISS", x
                    time.sleep(SETTLE_S)
                    took["partial"], x, xe, partial = via.send("/reviews/graphql", ids, tag)
                    assert x == "PARTIAL", (x, xe)
                    off_split += xe != "hit=18 fetched=2"
                else:
                    took["miss"], x, _, miss = via.send("/reviews/graphql", ids, tag)
                    assert x == "MISS", x
                    time.sleep(SETTLE_S)
                    took["hit"], x, _, hit = via.send("/reviews/graphql", ids, tag)
                    assert x in ("HIT", "PARTIAL"), x
                    off_split += x != "HIT"
            took["direct"], _, _, plain = direct.send("/graphql", ids, "direct")
            answers_equal &= partial == miss == hit == plain
            if i >= 0:
                for k, v in took.items():
                    times[k].append(v)
    finally:
        cleanup()
    out = {k: summary(v) for k, v in times.items()}
    out["samples"] = {k: [round(x, 3) for x in v] for k, v in times.items()}
    out["answers_equal"] = answers_equal
    out["off_split"] = off_split
    out["ratio"] = {q: out["partial"][q] / out["miss"][q] for q in ("p50", "p90", "p99", "mean")}
    out["repetitions"] = PARTIAL_REPS
    return out


def summary(values):
    v = sorted(values)
    q = lambda p: v[min(len(v) - 1, int(p * len(v)))]
    return {"p50": q(0.5), "p90": q(0.9), "p99": q(0.99), "mean": statistics.fmean(v), "n": len(v)}


# --- (a) against (c) below saturation, side by side --------------------------------------------
# The rounds above run each configuration on its own, minutes apart, and this VM's speed drifts
# between them by more than the light-load p99 difference the target asks about (one run's (c)/(a)
# moved from 0.80 to 1.24 between rounds). So that target's verdict comes from here: (a) and (c)
# up at once (each its own subgraphs and gateway), each warmed as a round warms it, then loaded in
# turn, never together: PAIRED_SLICES slices of PAIRED_SLICE_S seconds on LIGHT connections, (a)
# then (c), then (c) then (a), and so on, each stack continuing its own copy of the stream. Every
# answered request's latency is kept; percentiles pool a configuration's slices, and the ratio's
# 95 % interval comes from resampling slice pairs (slice i of (a) with slice i of (c): what drifts,
# drifts for both). Half the slices run with (a)'s stack started first, half (after a fresh start)
# with (c)'s. The verdict is PASS when that interval lies at or below 1, MISS when above, PARITY
# when it holds 1. ENTITIES_PAIRED_SLICES=0 skips it (the verdict then uses the rounds).
PAIRED_SLICES = int(os.environ.get("ENTITIES_PAIRED_SLICES", "32"))
PAIRED_SLICE_S = int(os.environ.get("ENTITIES_PAIRED_SLICE_S", "10"))
PAIRED_RESAMPLES = 2000
PAIRED_SEED = 20261203


def paired_stack(name):
    """(a), (c) or (e) up: the gateway's URL and the stack's processes (for their CPU)."""
    subgraphs = Subgraphs()
    entity_bytes = next(e for n, _, _, e in CONFIGS if n == name)
    hop, urls = subgraph_hop(name, entity_bytes, subgraphs)
    procs = {"subgraphs": subgraphs.proc}
    if hop:
        procs["envoy_subgraphs"] = hop.proc
    gateway_proc, url = gateway(urls)
    procs["gateway"] = gateway_proc
    return url, procs


def paired_warm(url, bodies_file):
    """A round's warm-up and saturation run: the index of the stream's next body."""
    warmed = load(url, bodies_file, 0, amount=WARMUP)
    return load(url, bodies_file, warmed["next_index"], seconds=SECONDS)["next_index"]


def ratio_interval(a_slices, c_slices, field):
    """The 95 % interval of (c)'s pooled percentile over (a)'s, resampling the slice pairs."""
    rng = random.Random(PAIRED_SEED)
    n = len(a_slices)
    ratios = []
    for _ in range(PAIRED_RESAMPLES):
        picks = [rng.randrange(n) for _ in range(n)]
        a = summary([v for i in picks for v in a_slices[i]])[field]
        c = summary([v for i in picks for v in c_slices[i]])[field]
        ratios.append(c / a)
    ratios.sort()
    return ratios[int(0.025 * len(ratios))], ratios[min(len(ratios) - 1, int(0.975 * len(ratios)))]


def paired_cpu(spent, requests, wall_s):
    """A stack's CPU over its slices: ms per client request by process, and the share of the
    machine's CPUs it kept busy (the load generator, the same for both, not counted)."""
    total = sum(spent.values())
    return {"ms_per_request": {n: v * 1000 / max(requests, 1) for n, v in spent.items()},
            "busy_share": total / max(wall_s, 1e-9) / (os.cpu_count() or 1)}


def paired_light(bodies_file, slices=PAIRED_SLICES, seconds=PAIRED_SLICE_S, stacks=("a", "c")):
    """`stacks` ((a) and (c) unless asked) loaded in alternating slices: pooled percentiles, the
    ratio of the second over the first and its interval, and each stack's CPU in its slices.
    The stacks are started afresh for the second half of the slices in the other order: in an
    A/A run (one build in both stacks) the stack started second ran about 2 % slower at the
    median, which would always count against the second."""
    base, other = stacks
    kept = {base: [], other: []}
    spent = {base: {}, other: {}}
    wall = {base: 0.0, other: 0.0}
    work = pathlib.Path(tempfile.mkdtemp(prefix="graphql-cache-paired-"))
    DIRS.append(work)
    halves = [((base, other), range(0, slices // 2)), ((other, base), range(slices // 2, slices))]
    try:
        for started, slice_numbers in halves:
            up = {name: paired_stack(name) for name in started}
            at = {name: paired_warm(up[name][0], bodies_file) for name in started}
            for i in slice_numbers:
                for name in ((base, other) if i % 2 == 0 else (other, base)):
                    raw = work / f"{name}-{i}.json"
                    url, procs = up[name]
                    r, cpu = cpu_while(procs, lambda: load(url, bodies_file, at[name], seconds=seconds,
                                                           connections=LIGHT, raw=str(raw)))
                    at[name] = r["next_index"]
                    wall[name] += r["duration_s"]
                    for n, v in cpu.items():
                        spent[name][n] = spent[name].get(n, 0.0) + v
                    kept[name].append(json.loads(raw.read_text()))
                print(f"  paired slice {i + 1}/{slices}: ({base}) p99 {summary(kept[base][-1])['p99']:.2f} ms  "
                      f"({other}) p99 {summary(kept[other][-1])['p99']:.2f} ms", flush=True)
            cleanup()
    finally:
        cleanup()
    out = {name: summary([v for s in kept[name] for v in s]) for name in kept}
    out["cpu"] = {name: paired_cpu(spent[name], out[name]["n"], wall[name]) for name in kept}
    out["ratio"] = {f: out[other][f] / out[base][f] for f in ("p50", "p99")}
    out["interval"] = {f: ratio_interval(kept[base], kept[other], f) for f in ("p50", "p99")}
    out["slice_p99_ratio"] = [summary(c)["p99"] / summary(a)["p99"] for a, c in zip(kept[base], kept[other])]
    out["settings"] = {"slices": slices, "slice_seconds": seconds, "connections": LIGHT, "stacks": [base, other]}
    return out


def paired_verdict(paired):
    """(c)'s light-load p99 against (a)'s: a ratio whose interval holds 1 is a tie at what the
    run can resolve, whichever side of 1 the point falls (PASS needs the whole interval at or
    below 1, MISS the whole of it above)."""
    lo, hi = paired["interval"]["p99"]
    return "PASS" if hi <= 1.0 else "MISS" if lo > 1.0 else "PARITY"


def paired_lines(paired):
    """The side-by-side measurement, as report lines."""
    s = paired["settings"]
    base, other = s["stacks"]
    labels = {n: f"({n}) {label}" for n, label, *_ in CONFIGS}
    out = [f"({base}) against ({other}) on {s['connections']} connections, side by side in time: {s['slices']} slices of "
           f"{s['slice_seconds']} s each, alternating, both stacks up and warmed as in a round; percentiles over "
           "every request of a configuration, the ratio's 95 % interval from resampling the slices in pairs; CPU "
           "of each stack's processes in its own slices (the load generator not counted).", "",
           "| configuration | requests | p50 ms | p90 ms | p99 ms | mean ms | CPU ms / client request | the machine's CPU kept busy |",
           "|---|---|---|---|---|---|---|---|"]
    for name in (base, other):
        r = paired[name]
        cpu = paired["cpu"][name]
        by_proc = ", ".join(f"{n.replace('envoy_', 'Envoy ')} {v:.2f}" for n, v in sorted(cpu["ms_per_request"].items()))
        out.append(f"| {labels[name]} | {r['n']} | {r['p50']:.2f} | {r['p90']:.2f} | {r['p99']:.2f} | {r['mean']:.2f} | "
                   f"{sum(cpu['ms_per_request'].values()):.2f} ({by_proc}) | {cpu['busy_share']:.0%} |")
    out.append("")
    for field in ("p50", "p99"):
        lo, hi = paired["interval"][field]
        out.append(f"- ({other}) over ({base}), {field}: **{paired['ratio'][field]:.3f}** "
                   f"(95 % interval {lo:.3f} to {hi:.3f})")
    per = paired["slice_p99_ratio"]
    out.append(f"- ({other}) over ({base}), p99 of each slice pair: median {statistics.median(per):.3f}, "
               f"{sum(r <= 1 for r in per)} of {len(per)} at or below 1")
    return out


# --- report ------------------------------------------------------------------------------------
def report(agg, partial, meta, paired=None):
    a, b, c = (agg[n] for n in "abc")
    reps_ratio = b["representations_per_request"] / max(c["representations_per_request"], 1e-9)
    paced = c["paced_p99_ms"] is not None
    p99_ratio = (c["paced_p99_ms"] / a["paced_p99_ms"]) if paced else c["p99_ms"] / a["p99_ms"]
    sat_ratio = c["p99_ms"] / a["p99_ms"]
    part = partial["ratio"]["p50"]
    e = agg[PLAIN_HOP]
    hop_ratio = (c["paced_p99_ms"] / e["paced_p99_ms"]) if paced else c["p99_ms"] / e["p99_ms"]
    hop_sat = c["p99_ms"] / e["p99_ms"]
    where = f"on {LIGHT} connections (below saturation)" if paced else "at saturation"
    # Each round's (c) beside its own (a): rounds run minutes apart, and this machine's
    # neighbours change its speed between them more than between two configurations of a round.
    by_round = paired_ratios(c, a, "rounds_paced_p99_ms" if paced else "rounds_p99_ms")
    rounds_text = (f"the rounds' median {p99_ratio:.2f} (round by round "
                   f"{', '.join(f'{x:.2f}' for x in by_round)}; at saturation {sat_ratio:.2f})")
    verdict = lambda ok: "PASS" if ok else "MISS"
    if paired:
        lo, hi = paired["interval"]["p99"]
        p99_ratio = paired["ratio"]["p99"]
        target_where = (f"on {LIGHT} connections, side by side in {paired['settings']['slices']} alternating "
                        "slices (the rounds are minutes apart)")
        p99_text = f"{p99_ratio:.3f} of (a), 95 % interval {lo:.3f} to {hi:.3f}; {rounds_text}"
        p99_verdict = paired_verdict(paired)
    else:
        target_where, p99_text = where, f"{p99_ratio:.2f} of (a): {rounds_text}"
        p99_verdict = verdict(p99_ratio <= 1.0)
    targets = [
        ("(c) representations per client request at least 5x fewer than (b)", f"{reps_ratio:.1f}x fewer", verdict(reps_ratio >= 5)),
        (f"(c) client p99 no higher than (a), {target_where}", p99_text, p99_verdict),
        ("partial hit (18 of 20 cached) <= 1.2x a full miss, median", f"{part:.2f}x", verdict(part <= 1.2)),
    ]
    lines = [f"| configuration | client req/s (saturation) | p50 / p99 ms at saturation | p50 / p99 ms on {LIGHT} connections | representations / client request | subgraph requests / client request | front cache hit ratio | CPU ms / client request | exact repeats in the stream |",
             "|---|---|---|---|---|---|---|---|---|"]
    for name, label, *_ in CONFIGS:
        r = agg[name]
        hr = "-" if r["front_hit_ratio"] is None else f"{r['front_hit_ratio']:.1%}"
        at_rate = f"{r['paced_p50_ms']:.1f} / {r['paced_p99_ms']:.1f}" if paced else "-"
        lines.append(f"| ({name}) {label} | {r['rps']:.0f} | {r['p50_ms']:.1f} / {r['p99_ms']:.1f} | {at_rate} | "
                     f"{r['representations_per_request']:.2f} | {r['subgraph_requests_per_request']:.2f} | {hr} | "
                     f"{sum(r['cpu_ms_per_request'].values()):.2f} | {r['exact_repeats']:.1%} |")
    lines.append("")
    lines.append("Per configuration: req/s and p99 of each round (the table: their median); CPU ms per client request "
                 "by process (saturation runs); representations per client request by type.")
    lines.append("")
    lines.append(f"| configuration | req/s by round | p99 ms by round (saturation) | p99 ms by round ({LIGHT} connections) | CPU ms / client request | Product / User representations |")
    lines.append("|---|---|---|---|---|---|")
    for name, label, *_ in CONFIGS:
        r = agg[name]
        cpu = ", ".join(f"{n.replace('envoy_', 'Envoy ')} {v:.2f}" for n, v in r["cpu_ms_per_request"].items())
        res = r["resolved_per_request"]
        lines.append(f"| ({name}) | {', '.join(map(str, r['rounds_rps']))} | {', '.join(map(str, r['rounds_p99_ms']))} | "
                     f"{', '.join(map(str, r['rounds_paced_p99_ms'])) or '-'} | {cpu} | {res['Product']:.2f} / {res['User']:.2f} |")
    lines.append("")
    lines.append("Partial hit at the subgraph hop (`_entities` of 20 Products to the reviews subgraph through Envoy, "
                 f"{partial['repetitions']} repetitions each, ms):")
    lines.append("")
    lines.append("| request | p50 | p90 | p99 | mean |")
    lines.append("|---|---|---|---|---|")
    for k, label in (("miss", "MISS: none cached (fetched whole, split)"), ("partial", "PARTIAL: 18 cached, 2 fetched"),
                     ("hit", "HIT: all 20 cached"), ("direct", "straight to the subgraph (no Envoy)")):
        s = partial[k]
        lines.append(f"| {label} | {s['p50']:.2f} | {s['p90']:.2f} | {s['p99']:.2f} | {s['mean']:.2f} |")
    r = partial["ratio"]
    lines.append(f"| PARTIAL / MISS | {r['p50']:.2f} | {r['p90']:.2f} | {r['p99']:.2f} | {r['mean']:.2f} |")
    lines.append("")
    if paired:
        lines += paired_lines(paired) + [""]
    for t, v, verdict_text in targets:
        lines.append(f"- {verdict_text} {t}: {v}")
    lines.append(f"- (not a target) (c) client p99 against ({PLAIN_HOP}), the same Envoy hop without the filter, {where}: "
                 f"{hop_ratio:.2f} (at saturation {hop_sat:.2f}); ({PLAIN_HOP}) against (a): "
                 f"{(e['paced_p99_ms'] / a['paced_p99_ms']) if paced else e['p99_ms'] / a['p99_ms']:.2f}")
    lines.append(f"- every probe answer equal to (a)'s in (b), (c), (d), (e): {meta['answers_equal']}; "
                 f"partial, miss, hit and direct answers equal: {partial['answers_equal']}")
    return "\n".join(lines), [{"target": t, "value": v, "verdict": verdict_text, "pass": verdict_text == "PASS"}
                               for t, v, verdict_text in targets]


def paired_ratios(x, y, field):
    """x's value over y's, round by round."""
    return [u / v for u, v in zip(x[field], y[field]) if v]


def chart(agg, partial, path, paired=None):
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    import matplotlib.ticker

    names = [f"({n}) {label}".replace(" (half", "\n(half").replace(" cache", "\ncache").replace(" hop,", " hop,\n") for n, label, *_ in CONFIGS]
    rows = [agg[n] for n, *_ in CONFIGS]
    xs = list(range(len(rows)))
    colors = ["#7f7f7f", "#1f77b4", "#2ca02c", "#9467bd", "#c7c7c7"]
    fig, axes = plt.subplots(2, 3, figsize=(17, 9))
    ax = axes[0][0]
    ax.bar(xs, [r["rps"] for r in rows], color=colors)
    for i, r in enumerate(rows):
        ax.text(i, r["rps"], f"{r['rps']:.0f}", ha="center", va="bottom")
    ax.set_title("client requests/s (median round)")
    ax = axes[0][1]
    paced = rows[0]["paced_p99_ms"] is not None
    p50 = [r["paced_p50_ms" if paced else "p50_ms"] for r in rows]
    p99 = [r["paced_p99_ms" if paced else "p99_ms"] for r in rows]
    ax.bar([x - 0.2 for x in xs], p50, 0.4, label="p50", color="#aec7e8")
    ax.bar([x + 0.2 for x in xs], p99, 0.4, label="p99", color="#1f77b4")
    ax.set_title(f"client latency on {LIGHT} connections, ms (median round)" if paced
                 else "client latency at saturation, ms (median round)")
    if paired:
        lo, hi = paired["interval"]["p99"]
        ax.text(0.02, 0.97, f"side by side, {paired['settings']['slices']} slices: (c)/(a) p99 "
                f"{paired['ratio']['p99']:.3f} (95 % {lo:.3f} to {hi:.3f})", transform=ax.transAxes, va="top", fontsize=8)
    ax.legend(loc="lower right")
    ax = axes[0][2]
    procs = ["gateway", "subgraphs", "envoy_front", "envoy_subgraphs"]
    bottom = [0.0] * len(rows)
    for proc, color in zip(procs, ["#ff7f0e", "#8c564b", "#1f77b4", "#2ca02c"]):
        v = [r["cpu_ms_per_request"].get(proc, 0) for r in rows]
        ax.bar(xs, v, bottom=bottom, label=proc.replace("envoy_", "Envoy, "), color=color)
        bottom = [b + x for b, x in zip(bottom, v)]
    ax.set_title("CPU ms per client request, by process")
    ax.legend(fontsize=8)
    ax = axes[1][0]
    prod = [r["resolved_per_request"]["Product"] for r in rows]
    user = [r["resolved_per_request"]["User"] for r in rows]
    ax.bar(xs, prod, label="Product (reviews subgraph)", color="#17becf")
    ax.bar(xs, user, bottom=prod, label="User (users subgraph)", color="#bcbd22")
    for i, r in enumerate(rows):
        ax.text(i, r["representations_per_request"], f"{r['representations_per_request']:.2f}", ha="center", va="bottom")
    ax.set_title("representations resolved by the subgraphs per client request")
    ax.legend(fontsize=8)
    for a in (axes[0][0], axes[0][1], axes[0][2], axes[1][0]):
        a.set_xticks(xs)
        a.set_xticklabels(names, fontsize=8)
        a.grid(axis="y", alpha=0.3)
    kinds = [("miss", "MISS (0 of 20 cached)"), ("partial", "PARTIAL (18 of 20 cached)"), ("hit", "HIT (20 of 20)"),
             ("direct", "no Envoy")]
    ax = axes[1][1]
    qs = ["p50", "p90", "p99"]
    for j, (k, label) in enumerate(kinds):
        ax.bar([x + (j - 1.5) * 0.2 for x in range(len(qs))], [partial[k][q] for q in qs], 0.2, label=label)
    ax.set_xticks(range(len(qs)))
    ax.set_xticklabels(qs)
    ax.set_title("_entities of 20 Products at the subgraph hop, ms")
    ax.legend(fontsize=8)
    ax.grid(axis="y", alpha=0.3)
    ax = axes[1][2]
    for k, label in kinds:
        v = sorted(partial["samples"][k])
        ax.plot(v, [(i + 1) / len(v) for i in range(len(v))], label=label)
    ax.set_xscale("log")
    ax.xaxis.set_major_formatter(matplotlib.ticker.ScalarFormatter())
    ax.xaxis.set_minor_formatter(matplotlib.ticker.NullFormatter())
    ax.set_xlabel("ms (log)")
    ax.set_title(f"the same, distribution ({partial['repetitions']} requests each)")
    ax.legend(fontsize=8)
    ax.grid(alpha=0.3)
    fig.suptitle(f"Entity caching: search pages through Apollo Gateway, {CONNECTIONS} connections, {SECONDS} s x {ROUNDS} rounds "
                 f"a configuration, cache_bytes {CACHE_BYTES >> 20} MiB a configuration (half each in (d))")
    fig.tight_layout()
    fig.savefig(path, dpi=90)


def main():
    atexit.register(remove_dirs)
    atexit.register(cleanup)
    signal.signal(signal.SIGTERM, on_signal)
    signal.signal(signal.SIGINT, on_signal)
    for f in (pathlib.Path(WASM), pathlib.Path(ENVOY), FEDERATION / "node_modules", LOAD.parent.parent / "gateway/node_modules"):
        if not f.exists():
            sys.exit(f"{f} is missing (make bench-entities builds and installs it)")
    started = time.time()
    keys, bodies = workload()
    work = pathlib.Path(tempfile.mkdtemp(prefix="graphql-cache-entities-"))
    DIRS.append(work)
    bodies_file = str(work / "bodies.jsonl")
    pathlib.Path(bodies_file).write_text("\n".join(bodies) + "\n")
    probes = list(range(0, WARMUP, max(WARMUP // 20, 1)))[:20]
    print(f"{CONNECTIONS} connections, {WARMUP} requests of warm-up + {SECONDS} s a configuration, {ROUNDS} rounds; "
          f"cache_bytes {CACHE_BYTES} (split in (d))", flush=True)
    runs = {n: [] for n, *_ in CONFIGS}
    reference = None
    answers_equal = True
    for round_no in range(ROUNDS):
        order = CONFIGS if round_no % 2 == 0 else list(reversed(CONFIGS))
        for name, label, front_bytes, entity_bytes in order:
            r, answers = run_config(name, front_bytes, entity_bytes, keys, bodies, bodies_file, probes)
            if name == "a" and reference is None:
                reference = answers
            runs[name].append((r, answers))
            print(f"  round {round_no + 1} ({name}) {label:22s} {r['rps']:7.0f} req/s  p50 {r['latency_ms']['p50']:6.1f} ms"
                  f"  p99 {r['latency_ms']['p99']:6.1f} ms  {r['representations_per_request']:6.2f} representations/request"
                  f"  non-2xx {r['non2xx']}  repeats {r['exact_repeats']:.1%}"
                  + (f"  on {LIGHT} connections p50 {r['paced']['latency_ms']['p50']:5.1f} p99 {r['paced']['latency_ms']['p99']:5.1f} ms"
                     if "paced" in r else ""), flush=True)
            print("      CPU ms per client request: " + ", ".join(f"{n} {v:.2f}" for n, v in r["cpu_ms_per_request"].items())
                  + f"; entity layer {r['envoy_counters'].get('subgraphs', {})}", flush=True)
    for name in runs:
        for _, answers in runs[name]:
            if answers != reference:
                answers_equal = False
                print(f"  ({name}): a probe's answer differs from (a)'s", flush=True)
    print("partial hits at the subgraph hop ...", flush=True)
    partial = partial_hits()
    paired = None
    if LIGHT and PAIRED_SLICES:
        print(f"(a) and (c) side by side on {LIGHT} connections, {PAIRED_SLICES} slices ...", flush=True)
        paired = paired_light(bodies_file)
    agg = {n: aggregate([r for r, _ in runs[n]]) for n in runs}
    meta = {"answers_equal": answers_equal}
    table, targets = report(agg, partial, meta, paired)
    machine = {
        "cpus": os.cpu_count(),
        "cpu_model": next((l.split(":", 1)[1].strip() for l in open("/proc/cpuinfo") if l.startswith("model name")), "?"),
        "envoy": subprocess.run([ENVOY, "--version"], capture_output=True, text=True).stdout.strip().split("version: ")[-1],
        "node": subprocess.run(["node", "--version"], capture_output=True, text=True).stdout.strip(),
        "load_average_at_end": os.getloadavg(),
        "pinned": PIN,
    }
    settings = {"connections": CONNECTIONS, "seconds": SECONDS, "warmup_requests": WARMUP, "rounds": ROUNDS,
                "cache_bytes": CACHE_BYTES, "light_connections": LIGHT, "light_seconds": LIGHT_SECONDS, "seed": SEED, "terms": TERMS, "term_zipf": TERM_ZIPF, "pages": PAGES,
                "query": QUERY, "products": PRODUCTS, "users": USERS, "subgraph_cache_control": SUBGRAPH_CACHE_CONTROL, "subgraph_source_ms": SOURCE_MS, "front_config": FRONT_CONFIG,
                "entity_config": ENTITY_CONFIG, "configs": [{"name": n, "label": l, "front_cache_bytes": f,
                                                             "entity_cache_bytes": e} for n, l, f, e in CONFIGS]}
    RESULTS.mkdir(parents=True, exist_ok=True)
    out = {"machine": machine, "settings": settings, "results": agg, "rounds": {n: [r for r, _ in runs[n]] for n in runs},
           "partial_hit": partial, "paired_light": paired, "targets": targets, "answers_equal": answers_equal}
    (RESULTS / f"{NAME}.json").write_text(json.dumps(out, indent=2) + "\n")
    head = (f"# make bench-entities\n\n{machine['cpus']} CPUs ({machine['cpu_model']}), Envoy {machine['envoy']}, "
            f"Node {machine['node']}; {CONNECTIONS} connections, {WARMUP} requests of warm-up then {SECONDS} s, then "
            f"{LIGHT_SECONDS} s on {LIGHT} connections (latency below saturation), "
            f"{ROUNDS} rounds a configuration"
            + (f", then (a) and (c) side by side on {LIGHT} connections in {PAIRED_SLICES} alternating slices of "
               f"{PAIRED_SLICE_S} s" if paired else "") + f"; cache_bytes {CACHE_BYTES} a configuration (in (d) half for each "
            f"cache); each subgraph request waits {SOURCE_MS} ms for its data source (ENTITIES_SOURCE_MS). "
            + (f"Pinned (ENTITIES_PIN): gateway and subgraphs on CPU {APP_CPU}, clients and Envoys on CPU {PROXY_CPU}. "
               if PIN else "")
            + "See docs/performance.md for the workload.\n\n")
    (RESULTS / f"{NAME}.md").write_text(head + table + "\n")
    chart(agg, partial, RESULTS / f"{NAME}.png", paired)
    print()
    print(table)
    print(f"\nwrote bench/results/{NAME}.json, {NAME}.md, {NAME}.png in {time.time() - started:.0f} s")


if __name__ == "__main__":
    main()
