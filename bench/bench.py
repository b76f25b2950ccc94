#!/usr/bin/env python3
"""`make bench`: every scenario side by side in one run, through a real Envoy, with wrk.

Envoy runs with one worker pinned to CPU 0; wrk (and the origin) are pinned to CPU 1. Each
scenario gets a fresh origin and Envoy, a warm-up run, then a measured run. Results go to
bench/results/latest.json and bench/results/latest.png, and a table to stdout.

BENCH_ONLY=a,b runs some scenarios; BENCH_COMPARE=<other .wasm> runs each filter scenario a second
time with that build in the same rounds (the A/B method) and prints both, with their ratios.
"""
import json
import os
import pathlib
import re
import shutil
import subprocess
import sys
import tempfile
import textwrap
import time
import urllib.request

ROOT = pathlib.Path(__file__).resolve().parent.parent
ENVOY = os.environ.get("ENVOY_BIN", str(ROOT / ".tools/bin/envoy"))
WASM = pathlib.Path(os.environ.get("BENCH_WASM", ROOT / "target/wasm32-wasip1/release/graphql_cache.wasm"))
ORIGIN = ROOT / "target/release/graphql-origin"
RESULTS = ROOT / "bench/results"
FLOOR_WASM = ROOT / "bench/floor/target/wasm32-wasip1/release/wasm_floor.wasm"
LUA = ROOT / "bench/post.lua"
# The Envoy bootstrap's templates, shared with the Rust tests (testkit).
BOOTSTRAP = ROOT / "testkit/bootstrap"

SECONDS = int(os.environ.get("BENCH_SECONDS", "4"))
ROUNDS = int(os.environ.get("BENCH_ROUNDS", "3"))
WARMUP = int(os.environ.get("BENCH_WARMUP", "2"))
CONNECTIONS = int(os.environ.get("BENCH_CONNECTIONS", "100"))
ENVOY_CPU, LOAD_CPU = "0", "1"
LISTEN, ADMIN, ORIGIN_PORT = 18080, 18901, 18081
QUERY = "query Users { users { id name email posts { id title } } }"
# The same with __typename everywhere (as Apollo Client and urql send it): its answer gives the
# entry 13 tags (operation, field, 2 types, 9 entities).
TAGGED_QUERY = "query Users { users { __typename id name email posts { __typename id title } } }"
# The slow origin: 20 ms per request and finite capacity (8 at a time, the rest queue), like a
# GraphQL gateway in front of federated services.
SLOW_ORIGIN = ["--delay-ms", "20", "--max-inflight", "8"]
# The fleet (issue 11): Redis and the L2 service, started once for the run (on the load CPU).
L2_BIN = ROOT / "target/release/graphql-cache-l2"
L2_DEV_SECRET = os.environ.get("GRAPHQL_CACHE_L2_SECRET", "dev-l2-secret-change-me-0123456789")
REDIS_PORT, L2_PORT = 18379, 18090
# The second Envoy of the two-Envoy expiry run.
LISTEN_B, ADMIN_B = 18180, 18911
# Distinct queries for l2-hit: L1 holds one entry, so nearly every request is an L1 miss that L2
# answers.
L2_HIT_KEYS = 1000
L2_CONFIG = {"cluster": "graphql_cache_l2", "wait_cluster": "graphql_cache_l2_wait",
             # Written in the configuration (a bench has nothing to hide): the demo's values.
             "secret": "dev-l2-secret-change-me-0123456789",
             "fleet_key": "dev-fleet-key-change-me-0123456789abcdef"}


def render(template, **values):
    """testkit/bootstrap/<template>, the tests' Envoy bootstrap, rendered as testkit renders it (the
    README there): `${name}` takes its value; alone on its line (or after `- `), a block of lines
    indented to its column, or nothing."""
    out = []
    for line in (BOOTSTRAP / template).read_text().splitlines():
        block = re.fullmatch(r"( *)(- )?\$\{(\w+)\}", line)
        if not block:
            out.append(re.sub(r"\$\{(\w+)\}", lambda m: str(values[m[1]]), line))
            continue
        indent, item, name = block.groups()
        for i, text in enumerate(textwrap.dedent(str(values[name])).strip("\n").splitlines()):
            lead = indent + (("- " if i == 0 else "  ") if item else "")
            out.append(lead + text if text.strip() else "")
    return "\n".join(out) + "\n"


def _wasm_filter(wasm, vm_id, configuration):
    """The filter's `http_filters` item, indented as bootstrap()'s `filters` are written here."""
    item = render("wasm_filter.yaml", allow_stop="true", vm_id=vm_id, wasm=wasm, config=json.dumps(configuration))
    return "\n" + textwrap.indent(item.rstrip("\n"), " " * 10)


def wasm_filter(config):
    return _wasm_filter(WASM, "graphql_cache", json.dumps(config))


def floor_filter(answer):
    """The floor of a wasm hit (bench/floor): reads headers and body, answers `answer` locally."""
    return _wasm_filter(FLOOR_WASM, "wasm_floor", answer)


BUFFER = """
          - name: envoy.filters.http.buffer
            typed_config:
              "@type": type.googleapis.com/envoy.extensions.filters.http.buffer.v3.Buffer
              max_request_bytes: 65536"""


def l2_clusters():
    """The L2 clusters exactly as envoy/fleet.yaml ships them, pointed at the bench's service."""
    text = (ROOT / "envoy/fleet.yaml").read_text()
    start = text.index("  - name: graphql_cache_l2\n")
    block = text[start:]
    end = block.find("\n  - name: ", block.index("graphql_cache_l2_wait"))
    block = block if end < 0 else block[:end + 1]
    assert "port_value: 8090" in block, "envoy/fleet.yaml's L2 clusters no longer use port 8090"
    return block.replace("port_value: 8090", f"port_value: {L2_PORT}")


def bootstrap(filters, route, admin=None, listen=None, clusters="", origin_port=None):
    """One listener (`route`: its catch-all's action; `filters`: before the router), the origin
    cluster and `clusters`, from testkit/bootstrap/ as the tests' Envoys are. Ports default to the
    bench's; 0 lets the kernel choose."""
    def port(given, default):
        return default if given is None else given
    listener = render("listener.yaml", name="bench", port=port(listen, LISTEN), listener_extra="", stat_prefix="bench",
                      routes="", catch_all=route, filters=filters)
    return render("envoy.yaml", admin_port=port(admin, ADMIN), listener=listener,
                  origin_cluster=render("cluster.yaml", name="origin", port=port(origin_port, ORIGIN_PORT)),
                  clusters=clusters, bootstrap_extra="")


def direct_route(body):
    return f"""                direct_response:
                  status: 200
                  body: {{ inline_string: {json.dumps(body)} }}
                response_headers_to_add:
                - header: {{ key: content-type, value: application/json }}"""


ORIGIN_ROUTE = "                route: { cluster: origin, timeout: 30s }"


def chain_config():
    """The shipped envoy/envoy.yaml with bench ports and the rate limit out of reach."""
    text = (ROOT / "envoy/envoy.yaml").read_text()
    for old, new in [
        ("port_value: 8080", f"port_value: {LISTEN}"),
        ("port_value: 9901", f"port_value: {ADMIN}"),
        ("port_value: 8082", f"port_value: {LISTEN + 2}"),
        ("port_value: 8081", f"port_value: {ORIGIN_PORT}"),
        ("filename: graphql_cache.wasm", f"filename: {WASM}"),
        ("max_tokens: 20, tokens_per_fill: 20", "max_tokens: 1000000000, tokens_per_fill: 1000000000"),
        ('"debug_headers": true', '"debug_headers": false'),
    ]:
        assert old in text, f"envoy/envoy.yaml no longer contains {old!r}"
        text = text.replace(old, new)
    return text


def scenarios(answer, tagged_body, bodies):
    token = (ROOT / "envoy/tokens/alice.jwt").read_text().strip()
    direct = direct_route(answer)
    s = [
        ("ceiling", None, bootstrap(BUFFER, direct), {}),
        ("wasm-ceiling", None, bootstrap(wasm_filter({"paths": ["/nothing-matches"]}) + BUFFER, direct), {}),
        ("proxy", [], bootstrap("", ORIGIN_ROUTE), {}),
        ("bypass", [], bootstrap(wasm_filter({"rules": [{"field": "users", "cache": False}]}), ORIGIN_ROUTE), {}),
    ]
    for ttl in (0, 1, 10):
        s.append((f"ttl{ttl}", [], bootstrap(wasm_filter({"ttl_seconds": ttl}), ORIGIN_ROUTE), {}))
    # What any wasm cache hit must pay, in exactly ttl10's setup.
    s.append(("wasm-floor", [], bootstrap(floor_filter(answer), ORIGIN_ROUTE), {}))
    # Hits whose entries carry tags: the purge check on the hit path.
    s.append(("ttl10-tags", [], bootstrap(wasm_filter({"ttl_seconds": 10}), ORIGIN_ROUTE),
              {"BENCH_BODY_FILE": tagged_body}))
    # The same without the cluster in the key (one property read less per request).
    s.append(("ttl10-lean", [], bootstrap(wasm_filter({"ttl_seconds": 10, "key_by_cluster": False}), ORIGIN_ROUTE), {}))
    # And without invalidation (no purge-epoch read per lookup): the hit path's two optional host
    # calls removed, against wasm-floor (the A/B of configuration steps).
    s.append(("ttl10-bare", [], bootstrap(wasm_filter(
        {"ttl_seconds": 10, "key_by_cluster": False, "mutation_invalidation": "off"}), ORIGIN_ROUTE), {}))
    s.append(("chain", [], chain_config(), {"BENCH_AUTH": f"Bearer {token}"}))
    s.append(("proxy-slow", SLOW_ORIGIN, bootstrap("", ORIGIN_ROUTE), {}))
    for ttl in (0, 1, 10):
        s.append((f"ttl{ttl}-slow", SLOW_ORIGIN, bootstrap(wasm_filter({"ttl_seconds": ttl}), ORIGIN_ROUTE), {}))
    # Expiry every second, but clients never wait for the slow origin: stale while one refresh runs.
    s.append(("swr-slow", SLOW_ORIGIN,
              bootstrap(wasm_filter({"ttl_seconds": 1, "stale_while_revalidate_seconds": 10}), ORIGIN_ROUTE), {}))
    if fleet_available():
        # Every request an L2 hit: L1 keeps one entry (and no hot copies) of 1000 keys in turn.
        l2_hit = {"ttl_seconds": 60, "cache_slots": 1, "local_cache_bytes": 0, "l2": L2_CONFIG}
        s.append(("l2-hit", [], bootstrap(wasm_filter(l2_hit), ORIGIN_ROUTE, clusters=l2_clusters()),
                  {"BENCH_BODIES_FILE": bodies}))
    return s


def fleet_available():
    return L2_BIN.exists() and shutil.which("redis-server") and shutil.which("redis-cli")


def start_fleet_services():
    """Redis and the L2 service for the run; `None` when either is missing (no fleet scenarios)."""
    if not fleet_available():
        print("redis-server or the L2 service is missing: no fleet scenarios (make build; apt-get install redis-server)")
        return []
    redis = subprocess.Popen(
        ["taskset", "-c", LOAD_CPU, "redis-server", "--port", str(REDIS_PORT), "--bind", "127.0.0.1",
         "--save", "", "--appendonly", "no"], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    # The service requires a bearer secret; the Envoys send the same dev value from their env.
    env = dict(os.environ, GRAPHQL_CACHE_L2_SECRET=L2_DEV_SECRET)
    l2 = subprocess.Popen(
        ["taskset", "-c", LOAD_CPU, str(L2_BIN), "--listen", f"127.0.0.1:{L2_PORT}",
         "--redis", f"redis://127.0.0.1:{REDIS_PORT}"], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
        env=env)
    wait_http(f"http://127.0.0.1:{L2_PORT}/health")
    return [l2, redis]


def flush_redis():
    subprocess.run(["redis-cli", "-p", str(REDIS_PORT), "FLUSHALL"], capture_output=True, check=False)


def wait_http(url, timeout=20):
    deadline = time.time() + timeout
    while time.time() < deadline:
        try:
            with urllib.request.urlopen(url, timeout=1) as r:
                if r.status == 200:
                    return
        except Exception:
            time.sleep(0.05)
    raise RuntimeError(f"{url} not ready")


def origin_count():
    with urllib.request.urlopen(f"http://127.0.0.1:{ORIGIN_PORT}/_origin/count", timeout=2) as r:
        return json.loads(r.read())["requests"]


def start_origin(args):
    p = subprocess.Popen(
        ["taskset", "-c", LOAD_CPU, str(ORIGIN), "--listen", f"127.0.0.1:{ORIGIN_PORT}", "--threads", "1", *args],
        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    wait_http(f"http://127.0.0.1:{ORIGIN_PORT}/_origin/health")
    return p


def start_envoy(yaml_text, workdir, concurrency=1, admin=None):
    path = pathlib.Path(workdir) / "envoy.yaml"
    path.write_text(yaml_text)
    log = open(pathlib.Path(workdir) / "envoy.log", "w")
    p = subprocess.Popen(
        ["taskset", "-c", ENVOY_CPU, ENVOY, "-c", str(path), "--concurrency", str(concurrency),
         "--use-dynamic-base-id", "-l", "warning"], stdout=log, stderr=subprocess.STDOUT)
    wait_http(f"http://127.0.0.1:{admin or ADMIN}/ready")
    return p


def wrk_start(seconds, body_file, env_extra, listen=None, connections=None):
    env = dict(os.environ)
    env["BENCH_BODY_FILE"] = body_file
    env.update(env_extra)
    return subprocess.Popen(
        ["taskset", "-c", LOAD_CPU, "wrk", "-t1", f"-c{connections or CONNECTIONS}", f"-d{seconds}s",
         "--timeout", "10s", "-s", str(LUA), f"http://127.0.0.1:{listen or LISTEN}/graphql"],
        env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


def wrk_result(p):
    out, err = p.communicate()
    if p.returncode != 0:
        raise RuntimeError(f"wrk failed: {err}")
    line = next(l for l in out.splitlines() if l.startswith("BENCH_JSON "))
    return json.loads(line[len("BENCH_JSON "):])


def wrk(seconds, body_file, env_extra):
    return wrk_result(wrk_start(seconds, body_file, env_extra))


def stop(p):
    if p and p.poll() is None:
        p.terminate()
        try:
            p.wait(timeout=5)
        except subprocess.TimeoutExpired:
            p.kill()


def fetch_answer():
    origin = start_origin([])
    try:
        req = urllib.request.Request(f"http://127.0.0.1:{ORIGIN_PORT}/graphql", data=json.dumps({"query": QUERY}).encode(),
                                     headers={"content-type": "application/json"})
        with urllib.request.urlopen(req, timeout=5) as r:
            return r.read().decode()
    finally:
        stop(origin)


def ports_free():
    """Envoy listens with SO_REUSEPORT: a leftover process on our port would silently take half
    the load, so refuse to start instead."""
    import socket
    for port in (LISTEN, ADMIN, ORIGIN_PORT, LISTEN_B, ADMIN_B, REDIS_PORT, L2_PORT):
        with socket.socket() as s:
            s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            try:
                s.bind(("127.0.0.1", port))
            except OSError:
                sys.exit(f"port {port} is in use: stop whatever listens there and run again")


def measure(origin_args, yaml_text, env_extra, work, body_file):
    """One scenario once: fresh origin and Envoy, warm-up, measured run."""
    origin = envoy = None
    if "graphql_cache_l2" in yaml_text:
        flush_redis()
    try:
        origin = start_origin(origin_args) if origin_args is not None else None
        envoy = start_envoy(yaml_text, work)
        wrk(WARMUP, body_file, env_extra)
        before = origin_count() if origin else 0
        r = wrk(SECONDS, body_file, env_extra)
        r["origin_requests"] = (origin_count() - before) if origin else 0
    finally:
        stop(envoy)
        stop(origin)
    r["rps"] = r["requests"] / (r["duration_us"] / 1e6)
    return r


def measure_fleet_expiry(with_l2, work, body_file):
    """Two Envoys (one worker each) behind the slow origin, 1 s TTL, half the connections on each:
    origin fetches per expiry for the whole fleet, with the shared L2 and without it."""
    config = {"ttl_seconds": 1}
    if with_l2:
        config["l2"] = L2_CONFIG
        flush_redis()
    clusters = l2_clusters() if with_l2 else ""
    origin = envoy_a = envoy_b = None
    try:
        origin = start_origin(SLOW_ORIGIN)
        dirs = [pathlib.Path(work) / n for n in ("a", "b")]
        for d in dirs:
            d.mkdir(exist_ok=True)
        envoy_a = start_envoy(bootstrap(wasm_filter(config), ORIGIN_ROUTE, clusters=clusters), dirs[0])
        envoy_b = start_envoy(bootstrap(wasm_filter(config), ORIGIN_ROUTE, admin=ADMIN_B, listen=LISTEN_B,
                                        clusters=clusters), dirs[1], admin=ADMIN_B)
        half = CONNECTIONS // 2
        # Both Envoys behind one name, as behind a load balancer (the host is part of the key).
        env = {"BENCH_HOST": "graphql.example"}
        for p in [wrk_start(WARMUP, body_file, env, LISTEN, half), wrk_start(WARMUP, body_file, env, LISTEN_B, half)]:
            wrk_result(p)
        before = origin_count()
        runs = [wrk_start(SECONDS, body_file, env, LISTEN, half), wrk_start(SECONDS, body_file, env, LISTEN_B, half)]
        a, b = [wrk_result(p) for p in runs]
        fetched = origin_count() - before
    finally:
        for p in (envoy_a, envoy_b, origin):
            stop(p)
    rps = a["requests"] / (a["duration_us"] / 1e6) + b["requests"] / (b["duration_us"] / 1e6)
    return dict(a, requests=a["requests"] + b["requests"], non2xx=a["non2xx"] + b["non2xx"],
                p99_us=max(a["p99_us"], b["p99_us"]), p50_us=max(a["p50_us"], b["p50_us"]),
                origin_requests=fetched, rps=rps, origin_per_expiry=fetched / SECONDS)


def run():
    for tool in ("wrk", "taskset"):
        if not shutil.which(tool):
            sys.exit(f"{tool} not found (bench/run.sh installs it)")
    ports_free()
    answer = fetch_answer()
    work = tempfile.mkdtemp(prefix="graphql-cache-bench-")
    body_file = os.path.join(work, "body.json")
    with open(body_file, "w") as f:
        f.write(json.dumps({"query": QUERY}))
    tagged_body = os.path.join(work, "tagged.json")
    with open(tagged_body, "w") as f:
        f.write(json.dumps({"query": TAGGED_QUERY}))
    only = [n for n in os.environ.get("BENCH_ONLY", "").split(",") if n]
    bodies = os.path.join(work, "bodies.txt")
    with open(bodies, "w") as f:
        for i in range(L2_HIT_KEYS):
            f.write(json.dumps({"query": QUERY.replace("{ users", f"{{ u{i}: users", 1)}) + "\n")
    fleet = start_fleet_services()
    chosen = [s for s in scenarios(answer, tagged_body, bodies) if not only or s[0] in only]
    expiry_runs = [(n, l2) for n, l2 in (("fleet-expiry-l2", True), ("fleet-expiry-l1", False))
                   if fleet and (not only or n in only)]
    compare = os.environ.get("BENCH_COMPARE")
    if compare:
        # The A/B method: every scenario that loads the filter runs again with another build,
        # interleaved in the same rounds, so both see the same machine.
        chosen += [(f"{name}@cmp", o, y.replace(str(WASM), compare), e)
                   for name, o, y, e in chosen if str(WASM) in y]
    runs = {name: [] for name, *_ in chosen}
    # Rounds interleave the scenarios, so a slow spell of this shared machine hits all of them
    # alike; each scenario reports its median round. Every other round runs them in reverse: of
    # two neighbours, the second ran about 1% slower here (an A/B run in both orders showed
    # it), and alternating cancels that out.
    for round_no in range(1, ROUNDS + 1):
        print(f"round {round_no}/{ROUNDS}", flush=True)
        order = chosen if round_no % 2 else list(reversed(chosen))
        for name, origin_args, yaml_text, env_extra in order:
            r = measure(origin_args, yaml_text, env_extra, work, body_file)
            runs[name].append(r)
            print(f"  {name:14s} {r['rps']:10.0f} req/s  p50 {r['p50_us']/1000:7.2f} ms  p99 {r['p99_us']/1000:7.2f} ms"
                  f"  non-2xx {r['non2xx']}  origin {r['origin_requests']}", flush=True)
        for name, with_l2 in expiry_runs:
            r = measure_fleet_expiry(with_l2, work, body_file)
            runs.setdefault(name, []).append(r)
            print(f"  {name:14s} {r['rps']:10.0f} req/s  origin {r['origin_requests']} in {SECONDS} s "
                  f"({r['origin_per_expiry']:.2f} per 1 s expiry)", flush=True)
    for p in fleet:
        stop(p)
    results = []
    for name in [c[0] for c in chosen] + [n for n, _ in expiry_runs]:
        ordered = sorted(runs[name], key=lambda r: r["rps"])
        median = dict(ordered[len(ordered) // 2], name=name, rounds_rps=[round(r["rps"]) for r in runs[name]])
        results.append(median)
    shutil.rmtree(work, ignore_errors=True)
    return answer, results


def compare_report(results):
    """BENCH_WASM against BENCH_COMPARE, scenario by scenario, and each one's ratios."""
    by = {r["name"]: r for r in results}
    lines = [f"{'scenario':14s} {'BENCH_WASM':>11s} {'COMPARE':>11s} {'ratio':>7s}"]
    for r in results:
        twin = by.get(f"{r['name']}@cmp")
        if twin:
            lines.append(f"{r['name']:14s} {r['rps']:11.0f} {twin['rps']:11.0f} {r['rps'] / twin['rps']:7.2f}")
    for top, bottom in [("ttl10", "wasm-ceiling"), ("bypass", "proxy")]:
        if top in by and bottom in by:
            cmp_bottom = by.get(f"{bottom}@cmp", by[bottom])
            lines.append(f"{top}/{bottom}: BENCH_WASM {by[top]['rps'] / by[bottom]['rps']:.2f}"
                         f", COMPARE {by[top + '@cmp']['rps'] / cmp_bottom['rps']:.2f}")
    return "\n".join(lines)


def report(answer, results):
    by = {r["name"]: r for r in results}
    ratio = lambda r, base: r["rps"] / by[base]["rps"] if base in by else 0.0
    for r in results:
        r["vs_ceiling"] = ratio(r, "ceiling")
        r["vs_wasm_ceiling"] = ratio(r, "wasm-ceiling")
        r["vs_wasm_floor"] = ratio(r, "wasm-floor")
    ttl1 = [r for r in results if r["name"] in ("ttl1", "ttl1-slow", "swr-slow")]
    for r in ttl1:
        expiries = SECONDS / 1.0
        r["origin_per_expiry"] = r["origin_requests"] / expiries
    # (name, top, bottom, field, goal, op): top/bottom of field, for the scenarios this run has.
    wanted = [
        ("ttl10 >= 90% of wasm-ceiling", "ttl10", "wasm-ceiling", "rps", 0.9, ">="),
        ("ttl10-lean >= 90% of wasm-ceiling", "ttl10-lean", "wasm-ceiling", "rps", 0.9, ">="),
        ("ttl10-bare >= 95% of wasm-floor", "ttl10-bare", "wasm-floor", "rps", 0.95, ">="),
        ("bypass >= 90% of proxy", "bypass", "proxy", "rps", 0.9, ">="),
        ("ttl10 >= 95% of wasm-floor", "ttl10", "wasm-floor", "rps", 0.95, ">="),
        ("chain >= 75% of ttl10", "chain", "ttl10", "rps", 0.75, ">="),
        ("ttl0-slow >= 90% of connections / origin latency (100 / 20 ms)", "ttl0-slow", None, "rps", 0.9, ">="),
        ("ttl10-tags within 5% of ttl10", "ttl10-tags", "ttl10", "rps", 0.95, ">="),
        ("swr-slow p99 <= 1.5x ttl10-slow p99", "swr-slow", "ttl10-slow", "p99_us", 1.5, "<="),
        ("ttl0-slow >= 4x proxy-slow req/s", "ttl0-slow", "proxy-slow", "rps", 4.0, ">="),
        ("ttl0-slow p99 <= 0.5x proxy-slow p99", "ttl0-slow", "proxy-slow", "p99_us", 0.5, "<="),
    ]
    targets = []
    for name, top, bottom, field, goal, op in wanted:
        if top in by and (bottom is None or bottom in by):
            below = 5000 if bottom is None else by[bottom][field]
            targets.append((name, by[top][field] / below, goal, op))
    if "l2-hit" in by:
        l2 = by["l2-hit"]
        targets.append(("l2-hit: origin requests <= 1% of its requests",
                        l2["origin_requests"] / max(l2["requests"], 1), 0.01, "<="))
    if "fleet-expiry-l2" in by:
        targets.append(("fleet-expiry-l2: origin fetches per 1 s expiry for 2 Envoys <= 1",
                        by["fleet-expiry-l2"]["origin_per_expiry"], 1.0, "<="))
    lines = []
    lines.append(f"{'scenario':14s} {'req/s':>10s} {'p50 ms':>8s} {'p99 ms':>8s} {'non-2xx':>8s} {'origin':>8s} {'/ceiling':>9s} {'/wasm-ceil':>10s} {'/floor':>7s}")
    for r in results:
        lines.append(f"{r['name']:14s} {r['rps']:10.0f} {r['p50_us']/1000:8.2f} {r['p99_us']/1000:8.2f} {r['non2xx']:8d} "
                     f"{r['origin_requests']:8d} {r['vs_ceiling']:9.2f} {r['vs_wasm_ceiling']:10.2f} {r['vs_wasm_floor']:7.2f}")
    lines.append("")
    for name, value, goal, op in targets:
        ok = value >= goal if op == ">=" else value <= goal
        lines.append(f"{'PASS' if ok else 'MISS'}  {name}: {value:.2f}")
    for r in ttl1:
        lines.append(f"      {r['name']}: {r['origin_requests']} origin requests over {SECONDS} s of 1 s TTL "
                     f"({r['origin_per_expiry']:.2f} per expiry; goal 1)")
    if "l2-hit" in by:
        l2 = by["l2-hit"]["rps"]
        for base in ("ttl10", "proxy"):
            if base in by:
                lines.append(f"      l2-hit / {base}: {l2 / by[base]['rps']:.2f}")
    for name in ("fleet-expiry-l2", "fleet-expiry-l1"):
        if name in by:
            lines.append(f"      {name}: {by[name]['origin_requests']} origin requests over {SECONDS} s of 1 s TTL "
                         f"on 2 Envoys ({by[name]['origin_per_expiry']:.2f} per expiry)")
    table = "\n".join(lines)
    machine = {
        "cpus": os.cpu_count(),
        "cpu_model": next((l.split(":", 1)[1].strip() for l in open("/proc/cpuinfo") if l.startswith("model name")), "?"),
        "envoy": subprocess.run([ENVOY, "--version"], capture_output=True, text=True).stdout.strip().split("version: ")[-1],
        "connections": CONNECTIONS, "seconds": SECONDS, "warmup_seconds": WARMUP, "rounds": ROUNDS,
        "answer_bytes": len(answer.encode()),
        "pinning": f"envoy --concurrency 1 on CPU {ENVOY_CPU}; wrk -t1 and the origin on CPU {LOAD_CPU}",
    }
    RESULTS.mkdir(parents=True, exist_ok=True)
    out = {"machine": machine, "results": results,
           "targets": [{"target": n, "value": v, "goal": g, "op": o} for n, v, g, o in targets]}
    (RESULTS / "latest.json").write_text(json.dumps(out, indent=2) + "\n")
    (RESULTS / "latest.txt").write_text(table + "\n")
    chart(results)
    return table


def chart(results):
    try:
        import matplotlib
        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        print("matplotlib not available: no chart")
        return
    names = [r["name"] for r in results]
    fig, (a, b) = plt.subplots(2, 1, figsize=(11, 7), sharex=True)
    colors = ["#888888" if n in ("ceiling", "wasm-ceiling", "proxy", "proxy-slow") else "#2f6db3" for n in names]
    a.bar(names, [r["rps"] for r in results], color=colors)
    a.set_ylabel("requests/s")
    a.set_title(f"GraphQL cache in Envoy: {CONNECTIONS} connections, 1 Envoy worker, median of {ROUNDS} rounds (grey: baselines)")
    for i, r in enumerate(results):
        a.text(i, r["rps"], f"{r['rps']/1000:.1f}k", ha="center", va="bottom", fontsize=8)
    b.bar(names, [r["p99_us"] / 1000 for r in results], color=colors)
    b.set_ylabel("p99 latency (ms, log)")
    b.set_yscale("log")
    plt.xticks(rotation=30, ha="right")
    fig.tight_layout()
    fig.savefig(RESULTS / "latest.png", dpi=110)


if __name__ == "__main__":
    start = time.time()
    print(f"{CONNECTIONS} connections, {WARMUP} s warm-up + {SECONDS} s per scenario, {ROUNDS} rounds (median)", flush=True)
    answer, results = run()
    if os.environ.get("BENCH_COMPARE"):
        print()
        print(compare_report(results))
    print()
    if os.environ.get("BENCH_ONLY"):
        # Some scenarios only: the table and the ratios they allow, nothing written.
        RESULTS = pathlib.Path(tempfile.mkdtemp(prefix="graphql-cache-bench-only-"))
    print(report(answer, results))
    if not os.environ.get("BENCH_ONLY"):
        print(f"\nwrote bench/results/latest.json, latest.txt, latest.png in {time.time() - start:.0f} s")
