"""What the fleet benchmarks share (bench/fleet_idle.py, bench/purges.py): the builds they run,
the demo's secrets, and a fleet started on 127.0.0.1 with free ports: Redis, one L2 service
(graphql-cache-l2), the origin and N Envoys x 2 workers on the shipped envoy/fleet.yaml (only its
ports moved, and optionally members added to the filter's configuration), every process stopped
on the way out (normal exit, an error, Ctrl-C or SIGTERM).

env: ENVOY_BIN, GRAPHQL_CACHE_WASM, ORIGIN_BIN, L2_BIN (defaults: the repository's builds)
"""
import os
import pathlib
import re
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.request

ROOT = pathlib.Path(__file__).resolve().parent.parent
ENVOY = os.path.abspath(os.environ.get("ENVOY_BIN", str(ROOT / ".tools/bin/envoy")))
WASM = os.path.abspath(os.environ.get("GRAPHQL_CACHE_WASM", str(ROOT / "target/wasm32-wasip1/release/graphql_cache.wasm")))
ORIGIN = os.path.abspath(os.environ.get("ORIGIN_BIN", str(ROOT / "target/release/graphql-origin")))
L2 = os.path.abspath(os.environ.get("L2_BIN", str(ROOT / "target/release/graphql-cache-l2")))
DEV_SECRET = "dev-l2-secret-change-me-0123456789"
PURGE_TOKEN = "demo-purge-token-change-me"
# What envoy/fleet.yaml reads from Envoy's environment (host_env_keys): the demo's values.
ENVOY_SECRETS = {
    "GRAPHQL_CACHE_FLEET_KEY": "dev-fleet-key-change-me-0123456789abcdef",
    "GRAPHQL_CACHE_L2_SECRET": DEV_SECRET,
    "GRAPHQL_CACHE_PURGE_TOKEN": PURGE_TOKEN,
}
# The line of fleet.yaml's filter configuration after which extra members go (as the tests do).
CONFIG_ANCHOR = '"debug_headers": true,'
# The script's name in messages: fleet_idle, purges.
PROG = pathlib.Path(sys.argv[0]).stem


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
    raise SystemExit("%s: %s never happened" % (PROG, what))


def check_tools():
    for tool in (ENVOY, WASM, ORIGIN, L2):
        if not os.path.exists(tool):
            sys.exit("%s: %s is missing (make build)" % (PROG, tool))
    if not shutil.which("redis-server"):
        sys.exit("%s: redis-server is not on PATH (apt-get install redis-server)" % PROG)


def redis_cli(port, *args):
    return subprocess.run(["redis-cli", "-p", str(port), *args], capture_output=True, text=True, check=True).stdout


def commandstats(port):
    out = {}
    for line in redis_cli(port, "INFO", "commandstats").splitlines():
        m = re.match(r"cmdstat_([^:]+):calls=(\d+)", line)
        if m:
            out[m.group(1)] = int(m.group(2))
    return out


def l2_metrics(port, auth):
    """The L2 service's answers so far, {(verb, outcome): count}, from its /metrics."""
    status, text = get("http://127.0.0.1:%d/metrics" % port, auth)
    out = {}
    for line in text.splitlines():
        m = re.match(r'l2_requests_total\{verb="(\w+)",outcome="(\w+)"\} (\d+)', line)
        if m:
            out[(m.group(1), m.group(2))] = int(m.group(3))
    return out


def l2_counts(port, auth):
    """The L2 service's answers so far by verb, {verb: count}."""
    out = {}
    for (verb, _), n in l2_metrics(port, auth).items():
        out[verb] = out.get(verb, 0) + n
    return out


def envoy_config(ports, origin_port, l2_port, extra_config=""):
    text = (ROOT / "envoy/fleet.yaml").read_text()
    for old, new in ((8080, ports["public"]), (8082, ports["internal"]), (9901, ports["admin"]),
                     (8081, origin_port), (8090, l2_port)):
        assert "port_value: %d" % old in text, "envoy/fleet.yaml no longer uses port %d" % old
        text = text.replace("port_value: %d" % old, "port_value: %d" % new)
    if extra_config:
        assert CONFIG_ANCHOR in text, "envoy/fleet.yaml no longer contains %s" % CONFIG_ANCHOR
        text = text.replace(CONFIG_ANCHOR, CONFIG_ANCHOR + " " + extra_config)
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


class Processes:
    """A work directory and the processes started in it (each logging to <name>.log there), all
    stopped, last started first, when the `with` block ends however it ends; SIGTERM ends it as
    Ctrl-C does. The directory is removed unless the environment variable `keep_env` is set."""

    def __init__(self, keep_env):
        self.keep_env = keep_env
        self.procs = []
        self.by_name = {}
        self.work = pathlib.Path(tempfile.mkdtemp(prefix=PROG.replace("_", "-") + "-"))

    def __enter__(self):
        signal.signal(signal.SIGTERM, _exit_on_signal)
        # Ctrl-C ends the run even when started in the background (where SIGINT comes ignored).
        signal.signal(signal.SIGINT, signal.default_int_handler)
        return self

    def run(self, name, cmd, env=None):
        log = open(self.work / (name + ".log"), "w")
        proc = subprocess.Popen(cmd, cwd=self.work, stdout=log, stderr=subprocess.STDOUT, env=env)
        self.procs.append(proc)
        self.by_name[name] = proc
        return proc

    def __exit__(self, *exc):
        for pr in reversed(self.procs):
            if pr.poll() is None:
                pr.terminate()
        for pr in self.procs:
            try:
                pr.wait(timeout=10)
            except subprocess.TimeoutExpired:
                pr.kill()
                pr.wait()
        if os.environ.get(self.keep_env):
            print("%s: logs kept in %s" % (PROG, self.work))
        else:
            shutil.rmtree(self.work, ignore_errors=True)
        return False


def _exit_on_signal(signum, frame):
    raise SystemExit(128 + signum)


def start_fleet(procs, envoys, insecure_no_auth=False, extra_config=""):
    """Redis, the L2 service, the origin and `envoys` Envoys (2 workers each) under `procs`.
    Returns redis_port, l2_port, origin_port and each Envoy's ports {public, internal, admin}."""
    work = procs.work
    redis_port, l2_port, origin_port = free_port(), free_port(), free_port()
    procs.run("redis", ["redis-server", "--port", str(redis_port), "--bind", "127.0.0.1", "--save", "", "--appendonly", "no"])
    env = dict(os.environ)
    l2_cmd = [L2, "--listen", "127.0.0.1:%d" % l2_port, "--redis", "redis://127.0.0.1:%d" % redis_port]
    if insecure_no_auth:
        l2_cmd.append("--insecure-no-auth")
    else:
        env["GRAPHQL_CACHE_L2_SECRET"] = DEV_SECRET
    procs.run("l2", l2_cmd, env=env)
    procs.run("origin", [ORIGIN, "--listen", "127.0.0.1:%d" % origin_port])
    wait("the L2 service's health", lambda: get("http://127.0.0.1:%d/health" % l2_port)[0] == 200)
    wait("the origin", lambda: get("http://127.0.0.1:%d/_origin/health" % origin_port)[0] == 200)
    (work / "graphql_cache.wasm").symlink_to(os.path.abspath(WASM))
    started = []
    for i in range(envoys):
        ports = {"public": free_port(), "internal": free_port(), "admin": free_port()}
        (work / ("envoy-%d.yaml" % i)).write_text(envoy_config(ports, origin_port, l2_port, extra_config))
        procs.run("envoy-%d" % i, [ENVOY, "-c", "envoy-%d.yaml" % i, "--concurrency", "2",
                                   "--use-dynamic-base-id", "-l", "warning"], env=dict(os.environ, **ENVOY_SECRETS))
        started.append(ports)
    return redis_port, l2_port, origin_port, started


def wait_fleet_ready(procs, envoys, readers=1):
    """Waits (60 s at most) until every Envoy uses its L2: both L2 clusters healthy, `readers`
    purge-log long-polls waiting."""
    wait("every Envoy using its L2 (logs in %s)" % procs.work,
         lambda: all(envoy_ready(e["admin"], readers) for e in envoys), seconds=60)
