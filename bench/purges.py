#!/usr/bin/env python3
"""A purge storm on one Envoy of a fleet, and what it costs the others: Redis, one L2 service, the
origin and 3 Envoys (A, B, C) x 2 workers on the shipped envoy/fleet.yaml (ports moved to free
ones; answers live 600 s instead of 30, as in tests/fleet_purges.rs, so that only a purge ends
one), started by bench/fleet_common.py. In one run:

1. warm: B and C each cache 20 answers no purge is about (`query EchoN`, no entity tag), each a
   HIT on a second ask;
2. storm: wrk (bench/purge_storm.lua) POSTs purges of 64 users nobody cached (1000 and up, each
   `entity:User:<id>` in a tag slot, SHA-256's first 8 bytes little-endian mod 4096, that no
   cached answer's tag uses) round-robin to A's purge API, 8 connections for STORM_SECONDS:
   purges/s, the answers by status, A's counters l2_purges_folded (goal 0) and l2_purges_merged;
   meanwhile B's and C's 20 answers are asked once a second (the hit ratio during the storm, goal
   1.0), and again after the log settled (the hit ratio after, goal 1.0);
3. Redis commands per purge accepted (INFO commandstats over the storm and until the log settled,
   by command) and the L2 service's answers by verb (its /metrics);
4. ROUNDS purges of user 1, one at a time: B and C each cache a fresh answer tagged
   entity:User:1 (a new operation name each round, a HIT on a second ask), A gets the purge, and B
   and C are asked every POLL_MS until each answers something else: the delay from A's answer to
   the purge to honoured on each Envoy, and on every Envoy (the larger); first with A's 202
   ("owed"), then with ?wait_ms=5000 from A's 200 ("committed", what the purge API promises).
   Each purge waits a random 0 to JITTER_MS first: the filter sends what it owes on a 100 ms
   timer, and back-to-back rounds would lock onto it.

Also recorded: each process's CPU during the storm (what limits purges/s on a small machine),
the commit, and the wasm's SHA-256 and build time (with the src/ files changed from the commit
before and after that build).

Writes bench/results/purges.{json,md} and prints the table. About 2-3 minutes with the defaults.

usage: purges.py [--storm-seconds S] [--rounds N] [--connections C] [--threads T] [--poll-ms MS]
                 [--jitter-ms MS] [--seed N] [--idle-seconds S] [--name NAME]
env: STORM_SECONDS (60), PURGE_ROUNDS (200); ENVOY_BIN, GRAPHQL_CACHE_WASM, ORIGIN_BIN, L2_BIN
(defaults: the repository's builds); PURGES_KEEP=1 keeps the processes' logs. Needs wrk on PATH
and redis-server (7.4 or newer) on PATH.
"""
import argparse
import hashlib
import http.client
import json
import math
import os
import random
import re
import shutil
import subprocess
import sys
import threading
import time

from fleet_common import (DEV_SECRET, ENVOY, PURGE_TOKEN, ROOT, WASM, Processes, check_tools, commandstats, get,
                          l2_counts, l2_metrics, start_fleet, wait_fleet_ready)

RESULTS = ROOT / "bench/results"
PURGE_PATH = "/graphql-cache/purge"
# Added to fleet.yaml's filter configuration: answers live 600 s (its default 30 s would expire the
# warmed answers in the middle of the storm).
LONG_TTL = '"rules": [{"field": "requestCount", "ttl_seconds": 600}],'
TAG_SLOTS = 4096  # the filter's default tag_slots
NOBODY = 1000  # users from here on do not exist: purging one purges nothing cached
ANSWERS = 20  # unrelated answers cached on each of B and C
USERS = 64  # distinct users purged in the storm
L2_AUTH = {"authorization": "Bearer " + DEV_SECRET}
CPU_NAMES = {"envoy-0": "A", "envoy-1": "B", "envoy-2": "C", "l2": "L2", "redis": "Redis", "origin": "origin",
             "machine": "machine (all)"}


def log(msg):
    print("purges: " + msg, flush=True)


# --- HTTP -----------------------------------------------------------------------------------------

class Client:
    """One keep-alive connection to an Envoy listener (reopened once if it was closed)."""

    def __init__(self, port):
        self.port = port
        self.conn = None

    def post(self, path, body, headers=None):
        hdrs = {"content-type": "application/json", **(headers or {})}
        for attempt in (0, 1):
            if self.conn is None:
                self.conn = http.client.HTTPConnection("127.0.0.1", self.port, timeout=10)
            try:
                self.conn.request("POST", path, body, hdrs)
                r = self.conn.getresponse()
                return r.status, {k.lower(): v for k, v in r.getheaders()}, r.read()
            except (http.client.HTTPException, OSError):
                self.conn.close()
                self.conn = None
                if attempt:
                    raise

    def query(self, q):
        return self.post("/graphql", json.dumps({"query": q}))

    def purge(self, selectors, wait_ms=None):
        path = PURGE_PATH if wait_ms is None else "%s?wait_ms=%d" % (PURGE_PATH, wait_ms)
        return self.post(path, selectors, {"authorization": "Bearer " + PURGE_TOKEN})


def echo_query(n):
    return 'query Echo%d { echo(value: "e%d") requestCount }' % (n, n)


def user_query(name, user):
    return "query %s { user(id: %d) { __typename id name } requestCount }" % (name, user)


def purge_user(user):
    return '[{"kind":"entity","type":"User","id":"%d"}]' % user


def counters(admin):
    """The filter's counters on one Envoy: {name: value} (Envoy names them
    wasmcustom.graphql_cache.<name>)."""
    _, text = get("http://127.0.0.1:%d/stats?filter=^wasmcustom[.]graphql_cache[.]" % admin)
    out = {}
    for line in text.splitlines():
        m = re.match(r"wasmcustom\.graphql_cache\.(\w+): (\d+)$", line)
        if m:
            out[m.group(1)] = int(m.group(2))
    return out


def delta(after, before):
    return {k: v - before.get(k, 0) for k, v in after.items() if v != before.get(k, 0)}


# --- measures -------------------------------------------------------------------------------------

def slot(tag):
    """The tag's purge slot: the filter's tag_hash (SHA-256's first 8 bytes, little-endian) mod
    tag_slots."""
    return int.from_bytes(hashlib.sha256(tag.encode()).digest()[:8], "little") % TAG_SLOTS


def cache(client, queries):
    """Asks for each query (a MISS: born now) and again (a HIT of the same body). The bodies and
    the tags of every answer."""
    bodies, tags = [], set()
    for q in queries:
        status, headers, body = client.query(q)
        if status != 200 or headers.get("x-cache") != "MISS":
            sys.exit("purges: %s: %s %s %s" % (q, status, headers.get("x-cache"), body[:200]))
        bodies.append(body)
        tags.update(t.strip() for t in headers.get("x-cache-tags", "").split(",") if t.strip())
    time.sleep(0.2)  # the stores to the L2 go after the answer
    for q, body in zip(queries, bodies):
        _, headers, again = client.query(q)
        if headers.get("x-cache") != "HIT" or again != body:
            sys.exit("purges: %s is not cached: %s" % (q, headers.get("x-cache")))
    return bodies, tags


def hits(client, queries, bodies):
    """How many of the queries `client`'s Envoy answers with a HIT of the body it cached; what
    the others got (x-cache and x-cache-reason)."""
    n, lost = 0, []
    for q, body in zip(queries, bodies):
        status, headers, got = client.query(q)
        if status == 200 and headers.get("x-cache") == "HIT" and got == body:
            n += 1
        else:
            lost.append("%s %s %s %s" % (q.split()[1], status, headers.get("x-cache"), headers.get("x-cache-reason", "")))
    return n, lost


def sample(probes):
    """Each Envoy's cached answers asked once: {name: {hits, asked, lost}}."""
    out = {}
    for name, client, queries, bodies in probes:
        n, lost = hits(client, queries, bodies)
        out[name] = {"hits": n, "asked": len(queries), "lost": lost}
    return out


class Prober(threading.Thread):
    """Samples B's and C's cached answers every `period` seconds until stopped."""

    def __init__(self, probes, period, t0):
        super().__init__(daemon=True)
        self.probes, self.period, self.t0 = probes, period, t0
        self.samples = []
        self.error = None
        self.stop = threading.Event()

    def run(self):
        while not self.stop.is_set():
            started = time.monotonic()
            try:
                got = {"t": round(started - self.t0, 2), **sample(self.probes)}
            except (http.client.HTTPException, OSError) as e:
                self.error = "%s at %.1f s" % (e, started - self.t0)
                return
            got["ms"] = round((time.monotonic() - started) * 1000, 1)
            self.samples.append(got)
            self.stop.wait(max(0.0, self.period - (time.monotonic() - started)))


def hit_ratio(samples, name):
    asked = sum(s[name]["asked"] for s in samples)
    return sum(s[name]["hits"] for s in samples) / asked if asked else None


def l2_writes(port):
    m = l2_metrics(port, L2_AUTH)
    return tuple(sorted((k, v) for k, v in m.items() if k[0] in ("purge", "marks")))


def wait_settled(l2_port, admins, quiet=1.0, limit=60):
    """Waits until the purge traffic is over: nothing new written to or read from the log (the L2
    service's purge, marks and purges answers) and no purge sent or applied on any Envoy for
    `quiet` seconds (no Redis command spent on it). The seconds it took."""
    t0 = time.monotonic()

    def state():
        return l2_writes(l2_port), tuple(tuple(counters(a).get(k, 0) for k in ("l2_purges_sent", "l2_purges_applied"))
                                         for a in admins)

    seen, since = state(), time.monotonic()
    while time.monotonic() - since < quiet:
        if time.monotonic() - t0 > limit:
            sys.exit("purges: the purge log kept moving for %d s" % limit)
        time.sleep(0.1)
        now = state()
        if now != seen:
            seen, since = now, time.monotonic()
    return time.monotonic() - t0


def cpu_seconds(procs):
    """CPU time (user + system, every thread) each running process has used so far, and the
    machine's busy time (all CPUs, anything running), in seconds."""
    tick = os.sysconf("SC_CLK_TCK")
    out = {}
    for name, proc in procs.by_name.items():
        try:
            fields = open("/proc/%d/stat" % proc.pid).read().rsplit(")", 1)[1].split()
        except OSError:
            continue
        out[name] = (int(fields[11]) + int(fields[12])) / tick
    cpu = [int(x) for x in open("/proc/stat").readline().split()[1:]]
    out["machine"] = (sum(cpu[:8]) - cpu[3] - cpu[4]) / tick
    return out


def wrk_storm(procs, args, port, users):
    """The storm: wrk with bench/purge_storm.lua against A's purge API. What its script printed,
    and the CPU seconds wrk used."""
    bodies = procs.work / "purge-bodies.txt"
    bodies.write_text("".join(purge_user(u) + "\n" for u in users))
    env = dict(os.environ, PURGE_TOKEN=PURGE_TOKEN, PURGE_BODIES_FILE=str(bodies))
    cmd = ["wrk", "-t%d" % args.threads, "-c%d" % args.connections, "-d%ds" % args.storm_seconds, "--latency",
           "-s", str(ROOT / "bench/purge_storm.lua"), "http://127.0.0.1:%d%s" % (port, PURGE_PATH)]
    proc = procs.run("wrk", cmd, env=env)
    deadline = time.monotonic() + args.storm_seconds + 30
    while True:  # wait4: wrk's own CPU time comes with its exit status
        pid, status, usage = os.wait4(proc.pid, os.WNOHANG)
        if pid:
            proc.returncode = os.waitstatus_to_exitcode(status)
            break
        if time.monotonic() > deadline:
            sys.exit("purges: wrk did not end")
        time.sleep(0.05)
    out = (procs.work / "wrk.log").read_text()
    m = re.search(r"^PURGE_JSON (.*)$", out, re.M)
    if proc.returncode != 0 or not m:
        sys.exit("purges: wrk failed (%s):\n%s" % (proc.returncode, out))
    rps = re.search(r"Requests/sec:\s+([\d.]+)", out)
    result = json.loads(m.group(1))
    result["wrk_requests_per_s"] = float(rps.group(1)) if rps else None
    result["wrk_output"] = out[:m.start()].rstrip()
    result["cpu_seconds"] = round(usage.ru_utime + usage.ru_stime, 2)
    return result


def until_changed(client, q, old, since, poll, limit):
    """Asks `q` every `poll` seconds until the answer is not `old`. The delay from `since` to the
    send of the first answer that changed (the Envoy had honoured the purge by then), in ms, and
    how many asks it took; (None, asks) past `limit` seconds."""
    asks = 0
    while True:
        sent = time.perf_counter()
        if sent - since > limit:
            return None, asks
        _, headers, body = client.query(q)
        asks += 1
        if body != old:
            return (sent - since) * 1000, asks
        time.sleep(poll)


def cache_fresh(client, q):
    """Asks `q` until it is a HIT (at most 50 times); the body cached and the asks it took."""
    status, headers, body = client.query(q)
    for asks in range(1, 51):
        status, headers, again = client.query(q)
        if status == 200 and headers.get("x-cache") == "HIT":
            return again, asks
        time.sleep(0.002)
    sys.exit("purges: %s never a HIT (%s %s)" % (q, status, headers.get("x-cache")))


def delays(a, probes, args, wait_ms, tag, rng):
    """`args.rounds` purges of user 1 through A, one at a time, each of an answer B and C hold:
    the delay from A's answer to honoured on each (ms). Each purge waits a random 0 to
    `args.jitter_ms` first, so that the rounds do not lock onto the Envoys' timers (the filter's
    root ticks every 100 ms)."""
    out = {"rounds": [], "timeouts": 0, "purge_status": {}, "not_hit_first": 0}
    poll = args.poll_ms / 1000
    for k in range(args.rounds):
        q = user_query("U%s%d" % (tag, k), 1)
        held = {}
        for name, client in probes:
            held[name], asks = cache_fresh(client, q)
            out["not_hit_first"] += asks > 1
        time.sleep(rng.uniform(0, args.jitter_ms / 1000))
        t = time.perf_counter()
        status, _, body = a.purge(purge_user(1), wait_ms)
        answered = time.perf_counter()
        out["purge_status"][str(status)] = out["purge_status"].get(str(status), 0) + 1
        row = {"answer_ms": round((answered - t) * 1000, 3), "status": status}
        results = {}

        def watch(name, client):
            results[name] = until_changed(client, q, held[name], answered, poll, 5.0)

        threads = [threading.Thread(target=watch, args=p) for p in probes]
        for th in threads:
            th.start()
        for th in threads:
            th.join()
        for name, _ in probes:
            ms, asks = results[name]
            row[name] = None if ms is None else round(ms, 3)
            row[name + "_asks"] = asks
        got = [row[n] for n, _ in probes]
        row["every"] = None if None in got else max(got)
        out["timeouts"] += None in got
        out["rounds"].append(row)
    for key in [n for n, _ in probes] + ["every", "answer_ms"]:
        out[key] = percentiles([r[key] for r in out["rounds"] if r[key] is not None])
    return out


def percentiles(values):
    if not values:
        return None
    s = sorted(values)

    def rank(p):
        return s[max(0, math.ceil(p / 100 * len(s)) - 1)]

    return {"n": len(s), "p50": rank(50), "p90": rank(90), "p99": rank(99), "max": s[-1],
            "mean": round(sum(s) / len(s), 3)}


# --- the run --------------------------------------------------------------------------------------

def build_state():
    """What is measured, taken before the fleet starts: the commit, the files that differ from it,
    the wasm's SHA-256 and age, and which changed files under src/ are newer than the wasm (their
    change is not in it)."""
    git = lambda *a: subprocess.run(["git", "-C", str(ROOT), *a], capture_output=True, text=True).stdout
    dirty = [l[3:] for l in git("status", "--porcelain", "--untracked-files=no").splitlines() if l.strip()]
    built = os.path.getmtime(WASM)
    return {
        "git_commit": git("rev-parse", "HEAD").strip(),
        "git_changed_files": dirty,
        "wasm_sha256": hashlib.sha256(open(WASM, "rb").read()).hexdigest(),
        "wasm_built": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(built)),
        "src_changed_after_wasm_built": [f for f in dirty if f.startswith("src/") and os.path.exists(ROOT / f)
                                         and os.path.getmtime(ROOT / f) > built],
        "src_changed_before_wasm_built": [f for f in dirty if f.startswith("src/") and os.path.exists(ROOT / f)
                                          and os.path.getmtime(ROOT / f) <= built],
    }


def machine(build):
    return {
        "nproc": os.cpu_count(),
        "cpu_model": next((l.split(":", 1)[1].strip() for l in open("/proc/cpuinfo") if l.startswith("model name")), "?"),
        "envoy": subprocess.run([ENVOY, "--version"], capture_output=True, text=True).stdout.strip().split("version: ")[-1],
        "redis": subprocess.run(["redis-server", "--version"], capture_output=True, text=True).stdout.strip(),
        "wrk": subprocess.run(["wrk", "--version"], capture_output=True, text=True).stdout.splitlines()[0].strip(),
        **build,
        "load_average_at_end": os.getloadavg(),
    }


def run(args, procs):
    t_start = time.monotonic()
    build = build_state()
    redis_port, l2_port, _, envoys = start_fleet(procs, 3, extra_config=LONG_TTL)
    wait_fleet_ready(procs, envoys)
    log("fleet up: Redis, one L2, the origin, 3 Envoys x 2 workers (%.1f s)" % (time.monotonic() - t_start))
    a = Client(envoys[0]["internal"])
    admins = {n: e["admin"] for n, e in zip("ABC", envoys)}
    b, c = Client(envoys[1]["public"]), Client(envoys[2]["public"])

    # 1. warm
    on_b = [echo_query(n) for n in range(1, ANSWERS + 1)]
    on_c = [echo_query(n) for n in range(ANSWERS + 1, 2 * ANSWERS + 1)]
    b_bodies, b_tags = cache(b, on_b)
    c_bodies, c_tags = cache(c, on_c)
    kept = b_tags | c_tags | {"entity:User:%d" % u for u in (1, 2, 3)}
    taken = {slot(t) for t in kept}
    # An entity purge also marks these two (tags that stand for entities an entry could not
    # list): the same for every purged user, so no choice of users keeps them clear.
    shared = {t: slot(t) for t in ("entities:User", "overflow")}
    hit_by_shared = sorted(t for t in b_tags | c_tags if slot(t) in shared.values())
    if hit_by_shared:
        log("warning: %s share a slot with every entity purge's entities:User or overflow mark" % hit_by_shared)
    users = []
    u = NOBODY
    while len(users) < USERS:
        if slot("entity:User:%d" % u) not in taken:
            users.append(u)
        u += 1
    log("warm: B and C each hold %d answers (HIT); purging users %d..%d (%d slots kept clear)"
        % (ANSWERS, users[0], users[-1], len(taken)))
    probes = [("B", b, on_b, b_bodies), ("C", c, on_c, c_bodies)]

    # Redis's idle rate, to set against the storm's.
    time.sleep(1)
    idle0, t0 = commandstats(redis_port), time.monotonic()
    time.sleep(args.idle_seconds)
    idle = delta(commandstats(redis_port), idle0)
    idle.pop("info", None)
    idle_s = time.monotonic() - t0

    # 2. storm
    before = {n: counters(p) for n, p in admins.items()}
    redis0, l2_0 = commandstats(redis_port), l2_counts(l2_port, L2_AUTH)
    t_storm = time.monotonic()
    cpu0 = cpu_seconds(procs)
    prober = Prober(probes, 1.0, t_storm)
    prober.start()
    log("storm: wrk, %d connections, %d s, %d users round-robin, to A's purge API" % (args.connections, args.storm_seconds, USERS))
    storm = wrk_storm(procs, args, envoys[0]["internal"], users)
    cpu1, storm_wall = cpu_seconds(procs), time.monotonic() - t_storm
    prober.stop.set()
    prober.join()
    if prober.error:
        sys.exit("purges: the probe of B and C failed: " + prober.error)
    at_end = {n: counters(p) for n, p in admins.items()}
    settle_s = wait_settled(l2_port, list(admins.values()))
    redis1, l2_1 = commandstats(redis_port), l2_counts(l2_port, L2_AUTH)
    storm_to_settled = time.monotonic() - t_storm
    after = {n: counters(p) for n, p in admins.items()}
    after_samples = []
    for _ in range(3):
        after_samples.append(sample(probes))
        time.sleep(1)

    accepted = sum(v for k, v in storm["statuses"].items() if k in ("200", "202"))
    seconds = storm["duration_us"] / 1e6
    commands = delta(redis1, redis0)
    commands.pop("info", None)
    total_commands = sum(commands.values())
    idle_rate = sum(idle.values()) / idle_s
    l2_verbs = delta(l2_1, l2_0)
    result_storm = {
        "wrk": storm,
        "seconds": round(seconds, 3),
        "purges_accepted": accepted,
        "purges_per_s": round(accepted / seconds, 1),
        "non_2xx": sum(v for k, v in storm["statuses"].items() if not k.startswith("2")),
        "socket_errors": sum(storm["socket_errors"].values()),
        "cpu_cores": {**{name: round((cpu1[k] - cpu0[k]) / storm_wall, 3) for k, name in CPU_NAMES.items() if k in cpu1},
                      "wrk": round(storm["cpu_seconds"] / storm_wall, 3)},
        "counters_during": {n: delta(at_end[n], before[n]) for n in admins},
        "counters_until_settled": {n: delta(after[n], before[n]) for n in admins},
        "folded": after["A"].get("l2_purges_folded", 0) - before["A"].get("l2_purges_folded", 0),
        "merged": after["A"].get("l2_purges_merged", 0) - before["A"].get("l2_purges_merged", 0),
        "settle_seconds": round(settle_s, 2),
        "hit_ratio_during": {n: hit_ratio(prober.samples, n) for n in ("B", "C")},
        "hit_ratio_after": {n: hit_ratio(after_samples, n) for n in ("B", "C")},
        "samples_during": prober.samples,
        "samples_after": after_samples,
    }
    result_redis = {
        "seconds": round(storm_to_settled, 2),
        "commands": total_commands,
        "commands_per_purge": round(total_commands / accepted, 4) if accepted else None,
        "idle_commands_per_s": round(idle_rate, 1),
        "commands_per_purge_less_idle": round((total_commands - idle_rate * storm_to_settled) / accepted, 4) if accepted else None,
        "by_command": dict(sorted(commands.items(), key=lambda kv: -kv[1])),
        "idle_by_command": idle,
        "l2_answers_by_verb": l2_verbs,
        "l2_answers_per_purge": {v: round(n / accepted, 4) for v, n in l2_verbs.items()} if accepted else {},
    }
    log("storm: %d purges in %.1f s (%.0f/s), statuses %s, folded %d, merged %d; hits during B %.3f C %.3f, after B %.3f C %.3f"
        % (accepted, seconds, accepted / seconds, storm["statuses"], result_storm["folded"], result_storm["merged"],
           *[result_storm["hit_ratio_during"][n] for n in "BC"], *[result_storm["hit_ratio_after"][n] for n in "BC"]))

    # 4. delay to honoured everywhere
    watchers = [("B", b), ("C", c)]
    rng = random.Random(args.seed)
    log("delay: %d purges of user 1 answered 202 owed, then %d with ?wait_ms=5000" % (args.rounds, args.rounds))
    owed = delays(a, watchers, args, None, "o", rng)
    committed = delays(a, watchers, args, 5000, "c", rng)
    return {
        "machine": machine(build),
        "settings": {"envoys": 3, "workers": 2, "storm_seconds": args.storm_seconds, "connections": args.connections,
                     "wrk_threads": args.threads, "users": users, "answers_each": ANSWERS, "rounds": args.rounds,
                     "poll_ms": args.poll_ms, "jitter_ms": args.jitter_ms, "seed": args.seed, "idle_seconds": args.idle_seconds, "extra_config": LONG_TTL,
                     "tag_slots": TAG_SLOTS, "kept_tags": sorted(kept), "kept_slots": len(taken),
                     "answers_sharing_a_slot_with_every_entity_purge": hit_by_shared},
        "storm": result_storm,
        "redis": result_redis,
        "delay_owed": owed,
        "delay_committed": committed,
        "elapsed_seconds": round(time.monotonic() - t_start, 1),
    }


# --- the report -----------------------------------------------------------------------------------

def fmt_ratio(x):
    return "-" if x is None else "%.3f" % x


def fmt_delay(d):
    if not d:
        return "-"
    return "%.1f / %.1f / %.1f / %.1f" % (d["p50"], d["p90"], d["p99"], d["max"])


def report(r):
    s, red, m = r["storm"], r["redis"], r["machine"]
    top = list(red["by_command"].items())[:5]
    per = ", ".join("%s %.3f" % (c, n / s["purges_accepted"]) for c, n in top) if s["purges_accepted"] else "-"
    verbs = ", ".join("%s %.3f" % (v, n) for v, n in sorted(red["l2_answers_per_purge"].items(), key=lambda kv: -kv[1]) if n)
    lost = sorted({l for smp in s["samples_during"] + s["samples_after"] for n in ("B", "C") for l in smp[n]["lost"]})
    o, c = r["delay_owed"], r["delay_committed"]
    rows = [
        ("purges/s sustained (A, wrk %d connections, %.0f s)" % (r["settings"]["connections"], s["seconds"]),
         "**%.0f** (%d accepted: %s; wrk's Requests/sec %.0f)"
         % (s["purges_per_s"], s["purges_accepted"], ", ".join("%s x %d" % kv for kv in sorted(s["wrk"]["statuses"].items())),
            s["wrk"]["wrk_requests_per_s"] or 0)),
        ("non-2xx / socket errors", "%d / %d" % (s["non_2xx"], s["socket_errors"])),
        ("CPU during the storm, in cores (of %d)" % m["nproc"],
         ", ".join("%s %.2f" % kv for kv in sorted(s["cpu_cores"].items(), key=lambda kv: -kv[1]))),
        ("purge answer latency p50 / p99 (wrk)", "%.2f / %.2f ms" % (s["wrk"]["p50_us"] / 1000, s["wrk"]["p99_us"] / 1000)),
        ("largest `owed` in an answer", "%d" % s["wrk"]["max_owed"]),
        ("A's l2_purges_folded (goal 0: no fold)", "**%d**" % s["folded"]),
        ("A's l2_purges_merged", "%d" % s["merged"]),
        ("A's l2_purges_sent (log writes)", "%d" % s["counters_until_settled"]["A"].get("l2_purges_sent", 0)),
        ("log entries applied (A / B / C; each Envoy reads the whole log, its own purges included)",
         " / ".join("%d" % s["counters_until_settled"][n].get("l2_purges_applied", 0) for n in "ABC")),
        ("log gaps, each a snapshot read instead (A / B / C)",
         " / ".join("%d" % s["counters_until_settled"][n].get("l2_purge_gaps", 0) for n in "ABC")),
        ("B / C hit ratio during the storm (%d samples of %d each)" % (len(s["samples_during"]), ANSWERS),
         "**%s / %s**" % (fmt_ratio(s["hit_ratio_during"]["B"]), fmt_ratio(s["hit_ratio_during"]["C"]))),
        ("B / C hit ratio after (log settled in %.1f s)" % s["settle_seconds"],
         "**%s / %s**" % (fmt_ratio(s["hit_ratio_after"]["B"]), fmt_ratio(s["hit_ratio_after"]["C"]))),
        ("Redis commands per purge", "**%.3f** (%.3f less the idle fleet's %.0f/s); top: %s"
         % (red["commands_per_purge"] or 0, red["commands_per_purge_less_idle"] or 0, red["idle_commands_per_s"], per)),
        ("Redis scripts run (EVALSHA, the L2's round trips) per purge",
         "%.4f" % (red["by_command"].get("evalsha", 0) / s["purges_accepted"] if s["purges_accepted"] else 0)),
        ("log entries (XADD: one per mark) per purge", "%.3f" % (red["by_command"].get("xadd", 0) / s["purges_accepted"]
                                                                 if s["purges_accepted"] else 0)),
        ("L2 answers per purge by verb", verbs or "-"),
        ("delay to honoured on every Envoy, owed (202), ms p50 / p90 / p99 / max", "**%s**" % fmt_delay(o["every"])),
        ("delay to honoured on every Envoy, committed (200), ms p50 / p90 / p99 / max", "**%s**" % fmt_delay(c["every"])),
    ]
    lines = ["# make bench-purges: a purge storm on one Envoy of a fleet", "",
             "%d CPUs (%s), Envoy %s, %s; commit %s, the filter's wasm built %s (sha256 %s...)%s; one run of %.0f s. "
             "Redis, one L2 service, the origin and 3 Envoys (A, B, C) x 2 workers on envoy/fleet.yaml (answers live "
             "600 s), all on 127.0.0.1, load generator and probes included on the same CPUs."
             % (m["nproc"], m["cpu_model"], m["envoy"], m["redis"].split(" sha=")[0], m["git_commit"][:10],
                m["wasm_built"], m["wasm_sha256"][:12],
                "; src/ files changed from the commit before the build (in it): %s" % ", ".join(m["src_changed_before_wasm_built"])
                if m["src_changed_before_wasm_built"] else "; no change to src/ in it", r["elapsed_seconds"]),
             "",
             "Storm: wrk (bench/purge_storm.lua) POSTs purges of %d users nobody cached, round-robin, to A's purge API; "
             "B and C each hold %d answers no purge is about (tag slots clear of the purged users'), asked once a second "
             "during the storm and 3 times after it. Redis commands: INFO commandstats from the storm's start until the "
             "log settled (%.1f s), over the purges accepted; Redis counts the commands its scripts call (the L2's "
             "verbs are one script each). Delay: %d purges of user 1 through A, one at a time, each of a fresh answer "
             "B and C hold (HIT), each after a random pause of 0 to %g ms (the rounds would otherwise lock onto the "
             "filter's 100 ms timer); B and C asked every %g ms (each ask about 1 ms) until the answer changed; the "
             "delay is from A's answer to the send of the first changed ask."
             % (USERS, ANSWERS, red["seconds"], r["settings"]["rounds"], r["settings"]["jitter_ms"], r["settings"]["poll_ms"]),
             "", "| measure | value |", "|---|---|"]
    lines += ["| %s | %s |" % row for row in rows]
    lines += ["", "Delay from A's answer to honoured (ms):", "",
              "| purge answered | A's answer p50 / p99 | B p50 / p90 / p99 / max | C p50 / p90 / p99 / max | every Envoy p50 / p90 / p99 / max | not honoured in 5 s |",
              "|---|---|---|---|---|---|"]
    for label, d in (("202 owed", o), ("200 committed (?wait_ms=5000)", c)):
        lines.append("| %s | %.2f / %.2f | %s | %s | %s | %d |"
                     % (label, d["answer_ms"]["p50"], d["answer_ms"]["p99"], fmt_delay(d["B"]), fmt_delay(d["C"]),
                        fmt_delay(d["every"]), d["timeouts"]))
    if lost:
        lines += ["", "Answers not served as HITs in the samples (operation, status, x-cache, x-cache-reason): "
                  + "; ".join(lost[:10]) + (" ..." if len(lost) > 10 else "")]
    lines += ["", "Raw numbers: purges.json (every sample, every round, counters of A, B and C, commands by name)."]
    return "\n".join(lines) + "\n"


def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--storm-seconds", type=int, default=int(os.environ.get("STORM_SECONDS", 60)))
    p.add_argument("--rounds", type=int, default=int(os.environ.get("PURGE_ROUNDS", 200)))
    p.add_argument("--connections", type=int, default=8)
    p.add_argument("--threads", type=int, default=2, help="wrk threads")
    p.add_argument("--poll-ms", type=float, default=1.0, help="pause between asks while waiting for a purge")
    p.add_argument("--jitter-ms", type=float, default=100.0, help="random pause (0 to this) before each timed purge")
    p.add_argument("--seed", type=int, default=1)
    p.add_argument("--idle-seconds", type=float, default=3.0, help="Redis's idle rate measured before the storm")
    p.add_argument("--name", default="purges", help="bench/results/<name>.{json,md}")
    args = p.parse_args()
    check_tools()
    if not shutil.which("wrk"):
        sys.exit("purges: wrk is missing (apt-get install wrk)")
    with Processes("PURGES_KEEP") as procs:
        result = run(args, procs)
    RESULTS.mkdir(parents=True, exist_ok=True)
    (RESULTS / (args.name + ".json")).write_text(json.dumps(result, indent=2) + "\n")
    md = report(result)
    (RESULTS / (args.name + ".md")).write_text(md)
    print(md)
    log("wrote bench/results/%s.json and %s.md" % (args.name, args.name))


if __name__ == "__main__":
    main()
