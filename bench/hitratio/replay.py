"""Replays a trace through a real Envoy with the filter, in order, and counts origin fetches.

Each key is its own GraphQL request, `query HitRatio($k: String!, $n: Int!) { echo(value: $k)
big(size: $n) }` with `k` the key's name and `n` chosen so the answer's body is exactly
ANSWER_BYTES. Requests go one at a time (each waits for its answer), on keep-alive connections:
one with 1 worker; with 2 workers, one connection accepted by each worker (found through Envoy's
per-worker listener counters), used alternately (request i on worker i % 2), so both workers see
half the trace and the order stays exactly the trace's.
"""
import http.client
import json
import os
import pathlib
import re
import socket
import subprocess
import sys
import tempfile
import time
import urllib.request

ROOT = pathlib.Path(__file__).resolve().parents[2]
ENVOY = os.environ.get("ENVOY_BIN", str(ROOT / ".tools/bin/envoy"))
sys.path.insert(0, str(ROOT / "bench"))
import bench  # noqa: E402  (the bench's bootstrap, rendered from testkit/bootstrap/)

WASM = os.environ.get("GRAPHQL_CACHE_WASM", str(ROOT / "target/wasm32-wasip1/release/graphql_cache.wasm"))
ORIGIN = os.environ.get("ORIGIN_BIN", str(ROOT / "target/release/graphql-origin"))
ANSWER_BYTES = 1024
QUERY = "query HitRatio($k: String!, $n: Int!) { echo(value: $k) big(size: $n) }"
# A key named `err/...` asks for `fail` too: its answer carries `errors` and is never stored.
QUERY_ERR = "query HitRatio($k: String!, $n: Int!) { echo(value: $k) big(size: $n) fail }"


def body(key):
    # {"data":{"echo":"<k>","big":"<n x>"}} is 29 bytes besides the key and the padding.
    pad = ANSWER_BYTES - 29 - len(json.dumps(key)) + 2
    query = QUERY_ERR if key.startswith("err/") else QUERY
    return json.dumps({"query": query, "variables": {"k": key, "n": pad}}).encode()


def get(url, timeout=5):
    with urllib.request.urlopen(url, timeout=timeout) as r:
        return r.read()


class Origin:
    def __init__(self):
        self.proc = subprocess.Popen([ORIGIN, "--listen", "127.0.0.1:0", "--threads", "1"],
                                     stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
        line = self.proc.stdout.readline()
        m = re.search(r"listening on [\d.]+:(\d+)", line)
        if not m:
            self.stop()
            raise RuntimeError(f"origin did not start: {line!r}")
        self.port = int(m.group(1))

    def count(self):
        return json.loads(get(f"http://127.0.0.1:{self.port}/_origin/count"))["requests"]

    def stop(self):
        stop(self.proc)


def stop(proc):
    if proc and proc.poll() is None:
        proc.terminate()
        try:
            proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


def bootstrap(config, origin_port):
    """The bench's Envoy (testkit/bootstrap/, as the tests' and bench.py's are) with this filter
    configuration, its ports chosen by the kernel."""
    return bench.bootstrap(bench._wasm_filter(WASM, "graphql_cache", json.dumps(config)), bench.ORIGIN_ROUTE,
                           admin=0, listen=0, origin_port=origin_port)


class Envoy:
    def __init__(self, config, origin_port, workers):
        self.dir = pathlib.Path(tempfile.mkdtemp(prefix="graphql-cache-hitratio-"))
        (self.dir / "envoy.yaml").write_text(bootstrap(config, origin_port))
        admin_file = self.dir / "admin.txt"
        self.log = open(self.dir / "envoy.log", "w")
        self.proc = subprocess.Popen(
            [ENVOY, "-c", str(self.dir / "envoy.yaml"), "--concurrency", str(workers), "--use-dynamic-base-id",
             "--admin-address-path", str(admin_file), "-l", "warning"],
            stdout=self.log, stderr=subprocess.STDOUT)
        deadline = time.time() + 60
        while True:
            if self.proc.poll() is not None:
                raise RuntimeError(f"Envoy exited:\n{(self.dir / 'envoy.log').read_text()}")
            if time.time() > deadline:
                self.stop()
                raise RuntimeError("Envoy not ready after 60 s")
            try:
                self.admin = int(admin_file.read_text().strip().rsplit(":", 1)[1])
                get(f"http://127.0.0.1:{self.admin}/ready", timeout=1)
                listeners = json.loads(get(f"http://127.0.0.1:{self.admin}/listeners?format=json"))
                status = next(l for l in listeners["listener_statuses"] if l["name"] == "bench")
                self.port = status["local_address"]["socket_address"]["port_value"]
                break
            except Exception:
                time.sleep(0.05)

    def stats(self, pattern):
        """Counters and gauges whose name matches the regex `pattern`."""
        text = get(f"http://127.0.0.1:{self.admin}/stats?filter={urllib.request.quote(pattern)}").decode()
        out = {}
        for line in text.splitlines():
            name, _, value = line.partition(": ")
            if value.strip().isdigit():
                out[name] = int(value)
        return out

    def filter_counters(self):
        return {name.rsplit(".", 1)[1]: v for name, v in
                self.stats(r"^wasmcustom\.graphql_cache\.(hits|misses|stores|bypasses|evictions|admissions_rejected|would_hit_2x|would_hit_4x)$").items()}

    def worker_connections(self):
        """worker index -> downstream connections it has open on the listener."""
        out = {}
        for name, value in self.stats(r"^listener\..*worker_[0-9]+\.downstream_cx_active$").items():
            if "admin" not in name:
                out[int(re.search(r"worker_(\d+)", name).group(1))] = value
        return out

    def stop(self):
        stop(self.proc)
        self.log.close()


class Conn:
    """A minimal HTTP/1.1 keep-alive client: the request's bytes are built once per key, and an
    answer is read by its content-length (Envoy gives one for hits and misses here); a few times
    cheaper than http.client, so the replay measures the cache rather than the client."""

    def __init__(self, port):
        self.sock = socket.create_connection(("127.0.0.1", port), timeout=30)
        self.sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        self.buf = b""

    def exchange(self, request):
        """Sends `request`; returns (status, x-cache value)."""
        self.sock.sendall(request)
        while b"\r\n\r\n" not in self.buf:
            self.recv()
        head, _, self.buf = self.buf.partition(b"\r\n\r\n")
        lines = head.split(b"\r\n")
        status = int(lines[0].split(b" ", 2)[1])
        length, x_cache = None, "none"
        for line in lines[1:]:
            name, _, value = line.partition(b":")
            name = name.strip().lower()
            if name == b"content-length":
                length = int(value)
            elif name == b"x-cache":
                x_cache = value.strip().decode()
        if length is None:
            raise RuntimeError(f"no content-length in {head!r}")
        while len(self.buf) < length:
            self.recv()
        self.buf = self.buf[length:]
        return status, x_cache

    def recv(self):
        data = self.sock.recv(65536)
        if not data:
            raise RuntimeError("Envoy closed the connection")
        self.buf += data

    def close(self):
        self.sock.close()


def request_bytes(key):
    b = body(key)
    return (b"POST /graphql HTTP/1.1\r\nhost: hitratio\r\ncontent-type: application/json\r\n"
            b"content-length: " + str(len(b)).encode() + b"\r\n\r\n" + b)


def connections(envoy, workers):
    """One keep-alive connection accepted by each worker, in worker order."""
    if workers == 1:
        return [Conn(envoy.port)]
    chosen = {}
    for _ in range(64):
        before = envoy.worker_connections()
        conn = Conn(envoy.port)
        worker = None
        for _ in range(100):
            after = envoy.worker_connections()
            grew = [w for w, n in after.items() if n > before.get(w, 0)]
            if grew:
                worker = grew[0]
                break
            time.sleep(0.01)
        if worker is None or worker in chosen:
            conn.close()
            time.sleep(0.05)  # let the active gauge fall back before the next try
            continue
        chosen[worker] = conn
        if len(chosen) == workers:
            return [chosen[w] for w in sorted(chosen)]
    raise RuntimeError(f"could not place a connection on each of {workers} workers")


def replay(named_traces, config, workers, origin):
    """Replays each trace through a fresh Envoy (fresh shared data, fresh workers); per trace:
    origin fetches, the x-cache values seen, the filter's counters and the seconds it took.

    One Envoy per trace, as the simulators start empty per trace: what a trace leaves behind is
    not empty memory for the next, since the table admits by how often keys were asked for, and
    the last trace's hot keys would be counted hotter than the new trace's for a while."""
    return {name: replay_one(trace, config, workers, origin) for name, trace in named_traces}


def replay_one(trace, config, workers, origin):
    envoy = Envoy(config, origin.port, workers)
    try:
        conns = connections(envoy, workers)
        if workers > 1:
            print(f"  connections open per worker (Envoy's listener gauges): {envoy.worker_connections()}", flush=True)
        seen = {}
        requests = {}
        before = origin.count()
        counters_before = envoy.filter_counters()
        started = time.time()
        for i, key in enumerate(trace):
            req = requests.get(key)
            if req is None:
                req = requests[key] = request_bytes(key)
            status, x = conns[i % len(conns)].exchange(req)
            if status != 200:
                raise RuntimeError(f"{key}: HTTP {status}")
            seen[x] = seen.get(x, 0) + 1
        seconds = time.time() - started
        fetched = origin.count() - before
        counters = {k: v - counters_before.get(k, 0) for k, v in envoy.filter_counters().items()}
        for c in conns:
            c.close()
        return {"fetched": fetched, "x_cache": seen, "counters": counters, "seconds": seconds}
    finally:
        envoy.stop()


def probe_entry(config, origin):
    """The answer as the filter stores it for one key, to size an entry: (body bytes, stored
    header bytes, tags) from a MISS with `debug_headers` on."""
    envoy = Envoy(dict(config, debug_headers=True), origin.port, 1)
    try:
        conn = http.client.HTTPConnection("127.0.0.1", envoy.port, timeout=30)
        conn.request("POST", "/graphql", body=body("probe/0"), headers={"content-type": "application/json"})
        r = conn.getresponse()
        data = r.read()
        assert r.getheader("x-cache") == "MISS", r.getheaders()
        tags = r.getheader("x-cache-tags", "")
        stored = [(n.lower(), v) for n, v in r.getheaders() if stored_header(n.lower())]
        conn.close()
        return len(data), stored, [t for t in re.split(r"[,\s]+", tags) if t]
    finally:
        envoy.stop()


def hop_by_hop():
    """src/config/headers.rs's HOP_BY_HOP, read from the source so the two cannot drift."""
    text = (ROOT / "src/config/headers.rs").read_text()
    m = re.search(r"pub const HOP_BY_HOP: &\[&str\] = &\[(.*?)\];", text, re.S)
    if not m:
        raise RuntimeError("HOP_BY_HOP not found in src/config/headers.rs")
    return set(re.findall(r'"([^"]+)"', m.group(1)))


def stored_header(name):
    """Whether an entry keeps a response header (cache/headers.rs `replayed`: end-to-end, not
    date, age, set-cookie, x-envoy-*, x-cache*); `server` is added by Envoy after the filter."""
    return (name not in hop_by_hop() and name not in ("date", "age", "set-cookie", "server")
            and not name.startswith(("x-envoy-", "x-cache")))


def entry_bytes(body_len, stored, tags):
    """cache/entry.rs's encoded_len for an entry stored without `debug_headers`: a fixed header
    of 97 bytes (magic, version, digest, seven u64 times, status, header count), 2 + len(name) +
    4 + len(value) per stored header, 2 + 8 per tag hash, 2 (the tags text, empty unless
    debug_headers), 4 + the body."""
    return 97 + sum(6 + len(n) + len(v) for n, v in stored) + 2 + 8 * len(tags) + 2 + 4 + body_len
