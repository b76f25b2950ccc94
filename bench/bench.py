#!/usr/bin/env python3
"""`make bench`: every scenario side by side in one run, through a real Envoy, with wrk.

Envoy runs with one worker pinned to CPU 0; wrk (and the origin) are pinned to CPU 1. Each
scenario gets a fresh origin and Envoy, a warm-up run, then a measured run. Results go to
bench/results/latest.json and bench/results/latest.png, and a table to stdout.

BENCH_ONLY=a,b runs some scenarios; BENCH_COMPARE=<other .wasm> runs each filter scenario a second
time with that build in the same rounds (the A/B method) and prints both, with their ratios.

The `-gw` scenarios put a Mercurius federation gateway (bench/gateway/gateway.js, Node) in front as
the origin and send its 3-field query; the `-ac` ones load Envoy with autocannon (pinned in
bench/gateway/package-lock.json) instead of wrk, with the headers autocannon sends. Each is
compared with its own floor, answering the same body, loaded by the same tool.
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
# The results' file names: bench/results/<BENCH_NAME>.{json,txt,png}.
NAME = os.environ.get("BENCH_NAME", "latest")
FLOOR_WASM = ROOT / "bench/floor/target/wasm32-wasip1/release/wasm_floor.wasm"
LUA = ROOT / "bench/post.lua"
# The Envoy bootstrap's templates, shared with the Rust tests (testkit).
BOOTSTRAP = ROOT / "testkit/bootstrap"

SECONDS = int(os.environ.get("BENCH_SECONDS", "4"))
ROUNDS = int(os.environ.get("BENCH_ROUNDS", "3"))
WARMUP = int(os.environ.get("BENCH_WARMUP", "2"))
CONNECTIONS = int(os.environ.get("BENCH_CONNECTIONS", "100"))
ENVOY_CPU, LOAD_CPU = "0", "1"
# BENCH_PORT_OFFSET moves every port of the run (another bench holds the usual ones).
PORT_OFFSET = int(os.environ.get("BENCH_PORT_OFFSET", "0"))
LISTEN, ADMIN, ORIGIN_PORT = 18080 + PORT_OFFSET, 18901 + PORT_OFFSET, 18081 + PORT_OFFSET
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
REDIS_PORT, L2_PORT = 18379 + PORT_OFFSET, 18090 + PORT_OFFSET
# The second Envoy of the two-Envoy expiry run.
LISTEN_B, ADMIN_B = 18180 + PORT_OFFSET, 18911 + PORT_OFFSET
# Distinct queries for l2-hit: L1 holds one entry, so nearly every request is an L1 miss that L2
# answers.
L2_HIT_KEYS = 1000
# The gateway-shaped traffic (issue 20): a Mercurius federation gateway of two subgraphs as the
# origin (on the load CPU, on ORIGIN_PORT; its subgraphs on the next two ports of GATEWAY_PORTS),
# a 3-field query whose answer is 463 bytes, and autocannon as the second load tool.
GATEWAY_DIR = ROOT / "bench/gateway"
AUTOCANNON = GATEWAY_DIR / "node_modules/autocannon/autocannon.js"
GATEWAY = ("gateway",)  # a scenario's origin_args: this origin instead of graphql-origin
GATEWAY_PORTS = 18085 + PORT_OFFSET  # its subgraphs: this port and the next
GATEWAY_ANSWER_BYTES = []  # the gateway's answer, once fetched (463)
GATEWAY_QUERY = ("query Home { me { id name email plan } topProducts { upc name price inStock } "
                 "departments { id name } }")
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


def floor_filter(answer, mode=""):
    """The floor of a wasm hit (bench/floor): reads headers and body, answers `answer` locally.
    `mode` (its VM configuration) adds work: a host call made ten more times (bench/hostcalls.py),
    or `cache_minimum`, what any correct cache hit adds (the route's cluster, the clock, `age`)."""
    text = _wasm_filter(FLOOR_WASM, "wasm_floor", answer)
    if not mode:
        return text
    vm = ("runtime: envoy.wasm.runtime.v8\n"
          "                  configuration:\n"
          "                    \"@type\": type.googleapis.com/google.protobuf.StringValue\n"
          f"                    value: {mode}")
    assert "runtime: envoy.wasm.runtime.v8" in text
    return text.replace("runtime: envoy.wasm.runtime.v8", vm)


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


def gateway_available():
    return AUTOCANNON.exists() and shutil.which("node")


def gateway_scenarios(gw_answer, gw_body):
    """Hits shaped like a federation gateway's traffic, beside a floor answering the same body,
    each loaded by wrk and by autocannon (`-ac`); wrk sends autocannon's headers too."""
    like_autocannon = {"BENCH_BODY_FILE": gw_body, "BENCH_CONNECTION": "keep-alive"}
    s = []
    for suffix, tool in (("", "wrk"), ("-ac", "autocannon")):
        env = dict(like_autocannon, BENCH_TOOL=tool)
        s.append((f"ttl10-gw{suffix}", GATEWAY, bootstrap(wasm_filter({"ttl_seconds": 10}), ORIGIN_ROUTE), env))
        s.append((f"wasm-floor-gw{suffix}", GATEWAY, bootstrap(floor_filter(gw_answer), ORIGIN_ROUTE), env))
    # The floor plus only what a correct hit must add: no cache can be nearer the floor than this.
    s.append(("wasm-minimum-gw", GATEWAY, bootstrap(floor_filter(gw_answer, "cache_minimum"), ORIGIN_ROUTE),
              dict(like_autocannon, BENCH_TOOL="wrk")))
    return s


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
    # With the admin routes on: every hit is also kept in the what-if ring (serving::recent).
    admin = {"ttl_seconds": 10, "purge_path": "/graphql-cache/purge", "purge_token": "bench-purge-token-0123456789"}
    s.append(("ttl10-admin", [], bootstrap(wasm_filter(admin), ORIGIN_ROUTE), {}))
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
    if args == GATEWAY:
        return start_gateway()
    p = subprocess.Popen(
        ["taskset", "-c", LOAD_CPU, str(ORIGIN), "--listen", f"127.0.0.1:{ORIGIN_PORT}", "--threads", "1", *args],
        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    wait_http(f"http://127.0.0.1:{ORIGIN_PORT}/_origin/health")
    return p


def start_gateway():
    p = subprocess.Popen(
        ["taskset", "-c", LOAD_CPU, "node", str(GATEWAY_DIR / "gateway.js"), "--port", str(ORIGIN_PORT),
         "--subgraphs", str(GATEWAY_PORTS)], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    wait_http(f"http://127.0.0.1:{ORIGIN_PORT}/_origin/health", timeout=30)
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


def autocannon_start(seconds, body_file, env_extra, listen=None, connections=None):
    """autocannon as the issue's harness ran it: POST the body with its content-type, one request
    at a time per connection; it adds `Connection: keep-alive` itself."""
    return subprocess.Popen(
        ["taskset", "-c", LOAD_CPU, "node", str(AUTOCANNON), f"-c{connections or CONNECTIONS}", "-d", str(seconds),
         "-m", "POST", "-H", "content-type=application/json", "-i", env_extra.get("BENCH_BODY_FILE", body_file),
         "-j", f"http://127.0.0.1:{listen or LISTEN}/graphql"],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


def autocannon_result(p):
    """autocannon's JSON as wrk_result's fields (its latencies are whole milliseconds)."""
    out, err = p.communicate()
    if p.returncode != 0:
        raise RuntimeError(f"autocannon failed: {err}")
    j = json.loads(out)
    return {"requests": j["requests"]["total"], "duration_us": int(j["duration"] * 1e6), "non2xx": j["non2xx"],
            "socket_errors": j["errors"] + j["timeouts"], "p50_us": j["latency"]["p50"] * 1000,
            "p99_us": j["latency"]["p99"] * 1000, "mean_us": j["latency"]["mean"] * 1000}


def load(seconds, body_file, env_extra, listen=None):
    """One run of the scenario's load tool (BENCH_TOOL: wrk unless autocannon)."""
    if env_extra.get("BENCH_TOOL") == "autocannon":
        return autocannon_result(autocannon_start(seconds, body_file, env_extra, listen))
    return wrk_result(wrk_start(seconds, body_file, env_extra, listen))


def cpu_seconds(p):
    """User and system CPU time of a process so far."""
    fields = pathlib.Path(f"/proc/{p.pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


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


def fetch_answer(origin_args=(), query=QUERY):
    origin = start_origin(origin_args)
    try:
        req = urllib.request.Request(f"http://127.0.0.1:{ORIGIN_PORT}/graphql", data=json.dumps({"query": query}).encode(),
                                     headers={"content-type": "application/json"})
        with urllib.request.urlopen(req, timeout=5) as r:
            return r.read().decode()
    finally:
        stop(origin)


def ports_free():
    """Envoy listens with SO_REUSEPORT: a leftover process on our port would silently take half
    the load, so refuse to start instead."""
    import socket
    for port in (LISTEN, ADMIN, ORIGIN_PORT, LISTEN_B, ADMIN_B, REDIS_PORT, L2_PORT, GATEWAY_PORTS, GATEWAY_PORTS + 1):
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
        load(WARMUP, body_file, env_extra)
        before = origin_count() if origin else 0
        cpu_before, wall_before = cpu_seconds(envoy), time.time()
        r = load(SECONDS, body_file, env_extra)
        cpu, wall = cpu_seconds(envoy) - cpu_before, time.time() - wall_before
        r["origin_requests"] = (origin_count() - before) if origin else 0
    finally:
        stop(envoy)
        stop(origin)
    r["rps"] = r["requests"] / (r["duration_us"] / 1e6)
    # How busy Envoy's one core was (below ~0.95: the load tool, not Envoy, set the pace), and its
    # CPU time per request.
    r["envoy_busy"] = cpu / wall
    r["envoy_us_per_request"] = cpu * 1e6 / max(r["requests"], 1)
    return r


# The -gw hits are measured in pairs with their floor (hit, floor): see measure_pair.
PAIRS = {"ttl10-gw": "wasm-floor-gw", "ttl10-gw-ac": "wasm-floor-gw-ac", "wasm-minimum-gw": "wasm-floor-gw"}


# How a pair is loaded: `together` (both at once) or `slices` (one at a time, alternating).
PAIR_MODE = os.environ.get("BENCH_PAIR_MODE", "together")


def measure_pair(hit, floor, work, body_file):
    """A hit scenario and its floor in one go: both Envoys up at once (the hit's on LISTEN, the
    floor's on LISTEN_B, both pinned to CPU 0), warmed up, then loaded for SECONDS.

    `together` (the default): both loaded at once by their own load tool (both on CPU 1), so the
    kernel shares CPU 0 between the two Envoys, equal time each: their req/s are inversely as
    their CPU time per request, and a short burst of other work on this machine slows both alike
    (over five runs whose req/s varied threefold, the ratio varied by +-0.03). Work that holds
    CPU 0 for long still compresses the ratio towards 1 (each Envoy pays the same extra per
    request): the run says so when the two Envoys' busy shares add up to less than 0.9. Two
    autocannons may not saturate two Envoys either: then the req/s ratio tends to 1, and the
    ratio of their CPU time per request (printed beside it) is the one to read. Sharing the core
    costs each Envoy about twice its lone CPU time per request, both alike: the ratio agreed
    with `slices` (0.87 both), the req/s are not a lone Envoy's.

    `slices`: one Envoy loaded at a time, in alternating 1 s slices (hit, floor, floor, hit,
    ...), each with CPU 0 to itself as in `measure`; steadier than scenarios measured minutes
    apart, less so than `together` when the machine is busy."""
    (hit_name, origin_args, hit_yaml, env), (_, _, floor_yaml, _) = hit, floor
    origin = envoys = None
    try:
        origin = start_origin(origin_args)
        dirs = [pathlib.Path(work) / n for n in ("hit", "floor")]
        for d in dirs:
            d.mkdir(exist_ok=True)
        for port, moved in ((LISTEN, LISTEN_B), (ADMIN, ADMIN_B)):
            assert floor_yaml.count(f"port_value: {port} ") == 1, f"the floor's bootstrap has no port {port}"
            floor_yaml = floor_yaml.replace(f"port_value: {port} ", f"port_value: {moved} ")
        envoys = [start_envoy(hit_yaml, dirs[0]), start_envoy(floor_yaml, dirs[1], admin=ADMIN_B)]
        listens = [LISTEN, LISTEN_B]
        for listen in listens:
            load(WARMUP, body_file, env, listen)
        before = origin_count()
        cpu_before = [cpu_seconds(e) for e in envoys]
        slices = [[], []]
        if PAIR_MODE == "slices":
            for k in range(SECONDS):
                for i in ((0, 1) if k % 2 == 0 else (1, 0)):
                    slices[i].append(load(1, body_file, env, listens[i]))
        else:
            tool = (autocannon_start, autocannon_result) if env.get("BENCH_TOOL") == "autocannon" else (
                wrk_start, wrk_result)
            started = [tool[0](SECONDS, body_file, env, listen) for listen in listens]
            slices = [[tool[1](p)] for p in started]
        cpu = [cpu_seconds(e) - c for e, c in zip(envoys, cpu_before)]
        fetched = origin_count() - before
    finally:
        for p in (envoys or []) + [origin]:
            stop(p)
    out = []
    for i, runs in enumerate(slices):
        requests, duration_us = sum(r["requests"] for r in runs), sum(r["duration_us"] for r in runs)
        r = {"requests": requests, "duration_us": duration_us, "rps": requests / (duration_us / 1e6),
             "non2xx": sum(r["non2xx"] for r in runs), "socket_errors": sum(r["socket_errors"] for r in runs),
             "p50_us": sorted(r["p50_us"] for r in runs)[len(runs) // 2], "p99_us": max(r["p99_us"] for r in runs),
             "mean_us": sum(r["mean_us"] for r in runs) / len(runs),
             "origin_requests": fetched if i == 0 else 0,
             "envoy_busy": cpu[i] / (duration_us / 1e6), "envoy_us_per_request": cpu[i] * 1e6 / max(requests, 1)}
        out.append(r)
    out[0]["paired_ratio"] = out[0]["rps"] / out[1]["rps"]
    out[0]["paired_cpu_ratio"] = out[1]["envoy_us_per_request"] / out[0]["envoy_us_per_request"]
    return out


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
    every = scenarios(answer, tagged_body, bodies)
    if not gateway_available():
        print("node or autocannon is missing: no -gw scenarios (make bench installs bench/gateway/node_modules)")
    elif not only or any("-gw" in n for n in only):
        gw_body = os.path.join(work, "gateway.json")
        with open(gw_body, "w") as f:
            f.write(json.dumps({"query": GATEWAY_QUERY}))
        gw_answer = fetch_answer(GATEWAY, GATEWAY_QUERY)
        GATEWAY_ANSWER_BYTES.append(len(gw_answer.encode()))
        every += gateway_scenarios(gw_answer, gw_body)
    chosen = [s for s in every if not only or s[0] in only]
    expiry_runs = [(n, l2) for n, l2 in (("fleet-expiry-l2", True), ("fleet-expiry-l1", False))
                   if fleet and (not only or n in only)]
    compare = os.environ.get("BENCH_COMPARE")
    pairs = dict(PAIRS)
    if compare:
        # The A/B method: every scenario that loads the filter runs again with another build.
        # By default each is measured together with its twin (measure_pair: both Envoys on CPU 0
        # at once, each with its own load), which holds the ratio steady on a busy machine;
        # BENCH_AB=interleaved runs the twins one after the other in the same rounds instead.
        twins = [(f"{name}@cmp", o, y.replace(str(WASM), compare), e)
                 for name, o, y, e in chosen if str(WASM) in y]
        chosen += twins
        if os.environ.get("BENCH_AB", "paired") == "paired":
            pairs = {name[:-len("@cmp")]: name for name, _, yaml_text, _ in twins
                     if yaml_text.count(f"port_value: {LISTEN} ") == 1}
    runs = {name: [] for name, *_ in chosen}
    # A hit with its floor among the chosen is measured with it (measure_pair), where the hit's
    # turn comes.
    by_name = {c[0]: c for c in chosen}
    paired = {floor for hit, floor in pairs.items() if hit in by_name and floor in by_name}
    line = lambda name, r: (f"  {name:16s} {r['rps']:10.0f} req/s  p50 {r['p50_us']/1000:7.2f} ms  p99 {r['p99_us']/1000:7.2f} ms"
                            f"  non-2xx {r['non2xx']}  origin {r['origin_requests']}  envoy busy {r['envoy_busy']:.2f}"
                            f", {r['envoy_us_per_request']:.1f} us/req")
    # Rounds interleave the scenarios, so a slow spell of this shared machine hits all of them
    # alike; each scenario reports its median round. Every other round runs them in reverse: of
    # two neighbours, the second ran about 1% slower here (an A/B run in both orders showed
    # it), and alternating cancels that out.
    for round_no in range(1, ROUNDS + 1):
        print(f"round {round_no}/{ROUNDS}", flush=True)
        order = chosen if round_no % 2 else list(reversed(chosen))
        for name, origin_args, yaml_text, env_extra in order:
            if name in paired:
                continue
            if pairs.get(name) in paired:
                r, floor = measure_pair(by_name[name], by_name[pairs[name]], work, body_file)
                r["paired_with"] = pairs[name]
                runs[pairs[name]].append(floor)
                print(line(pairs[name], floor), flush=True)
                print(line(name, r) + f"  ({r['paired_ratio']:.3f} of {pairs[name]}'s req/s, "
                                      f"{r['paired_cpu_ratio']:.3f} of its CPU/request)", flush=True)
                if PAIR_MODE == "together" and r["envoy_busy"] + floor["envoy_busy"] < 0.9:
                    print(f"  (the pair had {r['envoy_busy'] + floor['envoy_busy']:.2f} of CPU 0: other work held it, "
                          "or the load tools could not keep up; the ratio leans towards 1)", flush=True)
            else:
                r = measure(origin_args, yaml_text, env_extra, work, body_file)
                print(line(name, r), flush=True)
            runs[name].append(r)
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
        if "paired_ratio" in median:
            # Against its floor: the median of the rounds' ratios, each from the same slices.
            for field in ("paired_ratio", "paired_cpu_ratio"):
                ratios = sorted(r[field] for r in runs[name])
                median[field] = ratios[len(ratios) // 2]
                median[f"rounds_{field}"] = [round(r[field], 3) for r in runs[name]]
        results.append(median)
    shutil.rmtree(work, ignore_errors=True)
    return answer, results


def compare_report(results):
    """BENCH_WASM against BENCH_COMPARE, scenario by scenario, and each one's ratios."""
    by = {r["name"]: r for r in results}
    lines = [f"{'scenario':14s} {'BENCH_WASM':>11s} {'COMPARE':>11s} {'ratio':>7s}  (paired: median of the rounds' "
             "ratios, each measured with both Envoys at once; else the ratio of the medians)"]
    for r in results:
        twin = by.get(f"{r['name']}@cmp")
        if twin:
            paired = r.get("paired_with") == twin["name"]
            ratio_ = r["paired_ratio"] if paired else r["rps"] / twin["rps"]
            lines.append(f"{r['name']:14s} {r['rps']:11.0f} {twin['rps']:11.0f} {ratio_:7.3f}")
    for top, bottom in [("ttl10", "wasm-ceiling"), ("bypass", "proxy")]:
        if top in by and bottom in by:
            cmp_bottom = by.get(f"{bottom}@cmp", by[bottom])
            lines.append(f"{top}/{bottom}: BENCH_WASM {by[top]['rps'] / by[bottom]['rps']:.2f}"
                         f", COMPARE {by[top + '@cmp']['rps'] / cmp_bottom['rps']:.2f}")
    return "\n".join(lines)


def floor_of(name):
    """The floor a scenario's hits are compared with: the one with its origin, body and load tool."""
    if "-gw" in name:
        return "wasm-floor-gw-ac" if name.endswith("-ac") else "wasm-floor-gw"
    return "wasm-floor"


def report(answer, results):
    by = {r["name"]: r for r in results}
    ratio = lambda r, base: r["rps"] / by[base]["rps"] if base in by else 0.0
    for r in results:
        r["vs_ceiling"] = ratio(r, "ceiling")
        r["vs_wasm_ceiling"] = ratio(r, "wasm-ceiling")
        against_floor = "paired_ratio" in r and not r.get("paired_with", "").endswith("@cmp")
        r["vs_wasm_floor"] = r["paired_ratio"] if against_floor else ratio(r, floor_of(r["name"]))
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
        ("ttl10-gw >= 95% of wasm-floor-gw (wrk)", "ttl10-gw", "wasm-floor-gw", "rps", 0.95, ">="),
        ("ttl10-gw-ac >= 95% of wasm-floor-gw-ac (autocannon)", "ttl10-gw-ac", "wasm-floor-gw-ac", "rps", 0.95, ">="),
    ]
    targets = []
    for name, top, bottom, field, goal, op in wanted:
        if top in by and (bottom is None or bottom in by):
            below = 5000 if bottom is None else by[bottom][field]
            # A hit measured with its floor: the median of the rounds' paired ratios.
            paired = "paired_ratio" in by[top] and PAIRS.get(top) == bottom
            targets.append((name, by[top]["paired_ratio"] if paired else by[top][field] / below, goal, op))
    if "l2-hit" in by:
        l2 = by["l2-hit"]
        targets.append(("l2-hit: origin requests <= 1% of its requests",
                        l2["origin_requests"] / max(l2["requests"], 1), 0.01, "<="))
    if "fleet-expiry-l2" in by:
        targets.append(("fleet-expiry-l2: origin fetches per 1 s expiry for 2 Envoys <= 1",
                        by["fleet-expiry-l2"]["origin_per_expiry"], 1.0, "<="))
    lines = []
    lines.append(f"{'scenario':16s} {'req/s':>10s} {'p50 ms':>8s} {'p99 ms':>8s} {'non-2xx':>8s} {'origin':>8s} {'/ceiling':>9s} "
                 f"{'/wasm-ceil':>10s} {'/floor':>7s} {'busy':>5s} {'us/req':>6s}")
    for r in results:
        lines.append(f"{r['name']:16s} {r['rps']:10.0f} {r['p50_us']/1000:8.2f} {r['p99_us']/1000:8.2f} {r['non2xx']:8d} "
                     f"{r['origin_requests']:8d} {r['vs_ceiling']:9.2f} {r['vs_wasm_ceiling']:10.2f} {r['vs_wasm_floor']:7.2f}"
                     f" {r.get('envoy_busy', 0):5.2f} {r.get('envoy_us_per_request', 0):6.1f}")
    lines.append("")
    for name, value, goal, op in targets:
        ok = value >= goal if op == ">=" else value <= goal
        lines.append(f"{'PASS' if ok else 'MISS'}  {name}: {value:.3f}")
    if "paired_ratio" in by.get("wasm-minimum-gw", {}):
        bound = by["wasm-minimum-gw"]["paired_ratio"]
        lines.append(f"      wasm-minimum-gw / wasm-floor-gw: {bound:.3f} (the floor plus a cluster read, a clock "
                     "read and an age header: the nearest any correct cache hit can come to the floor)")
        if "paired_ratio" in by.get("ttl10-gw", {}):
            lines.append(f"      ttl10-gw / wasm-minimum-gw: {by['ttl10-gw']['paired_ratio'] / bound:.3f}")
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
        "gateway_answer_bytes": GATEWAY_ANSWER_BYTES[0] if GATEWAY_ANSWER_BYTES else None,
        "pinning": f"envoy --concurrency 1 on CPU {ENVOY_CPU}; wrk -t1 (or autocannon) and the origin on CPU {LOAD_CPU}",
    }
    RESULTS.mkdir(parents=True, exist_ok=True)
    out = {"machine": machine, "results": results,
           "targets": [{"target": n, "value": v, "goal": g, "op": o} for n, v, g, o in targets]}
    (RESULTS / f"{NAME}.json").write_text(json.dumps(out, indent=2) + "\n")
    (RESULTS / f"{NAME}.txt").write_text(table + "\n")
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
    fig.savefig(RESULTS / f"{NAME}.png", dpi=110)


if __name__ == "__main__":
    start = time.time()
    print(f"{CONNECTIONS} connections, {WARMUP} s warm-up + {SECONDS} s per scenario, {ROUNDS} rounds (median)", flush=True)
    answer, results = run()
    if os.environ.get("BENCH_COMPARE"):
        print()
        print(compare_report(results))
    print()
    named = "BENCH_NAME" in os.environ
    if os.environ.get("BENCH_ONLY") and not named:
        # Some scenarios only: the table and the ratios they allow, nothing written (unless named).
        RESULTS = pathlib.Path(tempfile.mkdtemp(prefix="graphql-cache-bench-only-"))
    print(report(answer, results))
    if not os.environ.get("BENCH_ONLY") or named:
        print(f"\nwrote bench/results/{NAME}.json, {NAME}.txt, {NAME}.png in {time.time() - start:.0f} s")
