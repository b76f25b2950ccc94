#!/usr/bin/env python3
"""Checks envoy/grafana/graphql-cache.json: `make dashboard-check` (part of `make lint`).

1. Schema: the dashboard, written into a TypeScript object literal (gen.mjs), type-checked by tsc
   against Grafana's dashboard schema and each panel plugin's options (@grafana/schema, pinned in
   package.json; see schema.ts).
2. Layout and wiring, which the schema leaves open: every panel has a gridPos inside the 24
   columns and overlaps no other, ids are unique, every query uses the `datasource` variable,
   every variable a query names is defined, units are ones Grafana knows.
3. Queries: every PromQL expression (and every variable's label_values query) parsed by
   Prometheus's own promtool (`promtool check rules`, with Grafana's variables replaced by values),
   and every metric and label it names is one the filter or the L2 service exports: the filter's
   counters read from src/effects/counters.rs, the L2's from l2/src/metrics.rs, the per-operation
   counters from PER_OPERATION below. Counters are read through rate()/increase() (a range), gauges
   never; a legend's {{label}} must be a label the query keeps; every filter counter is on the
   dashboard (or in NOT_ON_DASHBOARD).
4. Meaning: the ratio and sum panels evaluated by `promtool test rules` over synthetic counters
   (SYNTHETIC) must give the values EXPECTED says (e.g. a hit ratio of 0.5, an operation that only
   missed at 0, not absent); this also runs every one of them, so a query Prometheus refuses at
   evaluation (not at parsing) fails here.

Usage: check.py [--dashboard FILE] [--promtool PATH] [--skip-schema]
"""

import argparse
import json
import os
import re
import subprocess
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(os.path.dirname(HERE)))
DASHBOARD = os.path.join(ROOT, "envoy", "grafana", "graphql-cache.json")
COUNTERS_RS = os.path.join(ROOT, "src", "effects", "counters.rs")
L2_METRICS_RS = os.path.join(ROOT, "l2", "src", "metrics.rs")

OPERATION_STATS_RS = os.path.join(ROOT, "src", "effects", "operation_stats.rs")


def per_operation(root=ROOT):
    """The filter's per-operation counters and their labels, read from the source
    (src/effects/operation_stats.rs): Envoy's stats_tags turn the operation into the
    graphql_operation label, and the reason of a counter by reason into graphql_cache_reason."""
    with open(os.path.join(root, "src", "effects", "operation_stats.rs")) as f:
        text = f.read()
    names = dict(re.findall(r'OpCounter::(\w+) => "([a-z_]+)"', text))
    plain_block = re.search(r"const PLAIN: \[OpCounter; \d+\] = \[(.*?)\];", text, re.S)
    if len(names) < 5 or not plain_block:
        raise SystemExit(f"{OPERATION_STATS_RS}: counter names not found; has the file changed?")
    plain = set(re.findall(r"OpCounter::(\w+)", plain_block.group(1)))
    return {
        f"graphql_cache_op_{name}": {"graphql_operation"} | (set() if variant in plain else {"graphql_cache_reason"})
        for variant, name in names.items()
    }


PER_OPERATION = per_operation()
# Filter counters deliberately left off the dashboard.
NOT_ON_DASHBOARD = {
    "graphql_cache_shadow_hits": "shadow mode is a trial before turning the cache on",
    "graphql_cache_shadow_misses": "shadow mode is a trial before turning the cache on",
    "graphql_cache_shadow_mismatches": "shadow mode is a trial before turning the cache on",
}
# Labels Prometheus adds to every scraped series.
TARGET_LABELS = {"instance", "job"}
GRID_COLUMNS = 24
# Grafana unit ids the dashboard may use (a typo would silently show raw numbers).
UNITS = {"short", "none", "reqps", "ops", "percentunit", "percent", "s", "ms", "bytes"}
# Grafana's own variables, and the values they stand for when promtool parses a query.
BUILTIN_VARIABLES = {"__rate_interval": "1m", "__interval": "1m", "__range": "1h"}
PROMQL_KEYWORDS = {"and", "or", "unless", "bool", "offset"}
GROUPING = {"by", "without", "on", "ignoring", "group_left", "group_right"}
AGGREGATIONS = {"sum", "min", "max", "avg", "group", "stddev", "stdvar", "count", "count_values",
                "bottomk", "topk", "quantile", "limitk", "limit_ratio"}


class Metric:
    def __init__(self, kind, labels):
        self.kind = kind  # "counter" or "gauge"
        self.labels = set(labels)


def exported_metrics(root=ROOT):
    """Every metric name Envoy's /stats/prometheus (the filter) and the L2's /metrics export."""
    metrics = {}
    with open(os.path.join(root, "src", "effects", "counters.rs")) as f:
        names = re.findall(r'"graphql_cache\.([a-z0-9_]+)"', f.read())
    if len(names) < 10:
        raise SystemExit(f"{COUNTERS_RS}: found only {len(names)} counter names; has the file changed?")
    for n in names:
        # Envoy's Prometheus output: `wasmcustom.graphql_cache.hits` -> graphql_cache_hits
        # (the custom-stat namespace dropped, no _total suffix).
        metrics[f"graphql_cache_{n}"] = Metric("counter", ())
    for name, labels in PER_OPERATION.items():
        metrics[name] = Metric("counter", labels)
    with open(os.path.join(root, "l2", "src", "metrics.rs")) as f:
        text = f.read()
    l2 = re.findall(r"# TYPE (l2_[a-z0-9_]+) (counter|gauge)", text)
    if len(l2) < 5:
        raise SystemExit(f"{L2_METRICS_RS}: found only {len(l2)} metrics; has the file changed?")
    for name, kind in l2:
        labels = set()
        for body in re.findall(re.escape(name) + r"\{\{(.*?)\}\}", text):
            labels |= set(re.findall(r'([a-z_]+)=\\"', body))
        metrics[name] = Metric(kind, labels)
    return metrics


# --- PromQL, as far as the checks need it --------------------------------------------------------

TOKEN = re.compile(
    r'\s+|(?P<str>"(?:[^"\\]|\\.)*")|(?P<braces>\{[^}]*\})|(?P<range>\[[^\]]*\])'
    r"|(?P<num>\d+(?:\.\d+)?(?:[eE][-+]?\d+)?)|(?P<ident>[a-zA-Z_:][a-zA-Z0-9_:]*)|(?P<punct>[()=!<>+\-*/%^,~]+)"
)
MATCHER = re.compile(r'\s*([a-zA-Z_][a-zA-Z0-9_]*)\s*(=~|!~|!=|=)\s*"((?:[^"\\]|\\.)*)"\s*(?:,|$)')


def tokens(expr):
    pos, out = 0, []
    while pos < len(expr):
        m = TOKEN.match(expr, pos)
        if not m:
            raise ValueError(f"cannot read the query at {expr[pos:pos + 20]!r}")
        pos = m.end()
        if m.lastgroup:
            out.append((m.lastgroup, m.group(m.lastgroup)))
    return out


def matchers(braces):
    body, out, pos = braces[1:-1].strip(), [], 0
    while pos < len(body):
        m = MATCHER.match(body, pos)
        if not m:
            raise ValueError(f"cannot read the label matchers {braces!r}")
        out.append((m.group(1), m.group(2), m.group(3)))
        pos = m.end()
    return out


def expand_name_regex(regex):
    """`prefix(a|b)suffix` (or a plain name) -> the names it stands for; anything else is refused."""
    m = re.fullmatch(r"([a-z0-9_:]*)(?:\(([a-z0-9_|]+)\))?([a-z0-9_:]*)", regex)
    if not m:
        raise ValueError(f"__name__ regex {regex!r}: only `prefix(a|b|c)suffix` is supported")
    alts = m.group(2).split("|") if m.group(2) else [""]
    return [m.group(1) + a + m.group(3) for a in alts]


class Selector:
    def __init__(self, names, matchers, ranged):
        self.names, self.matchers, self.ranged = names, matchers, ranged


def parse(expr):
    """Selectors (metric names, matchers, whether a range follows) and grouping labels."""
    toks = tokens(expr)
    selectors, grouping = [], set()
    i = 0
    while i < len(toks):
        kind, text = toks[i]
        nxt = toks[i + 1] if i + 1 < len(toks) else (None, None)
        if kind == "ident" and text in GROUPING:
            if nxt != ("punct", "("):
                if text in ("group_left", "group_right"):
                    i += 1
                    continue
                raise ValueError(f"`{text}` without its label list")
            j = i + 2
            while j < len(toks) and toks[j] != ("punct", ")"):
                if toks[j][0] == "ident":
                    grouping.add(toks[j][1])
                j += 1
            i = j + 1
            continue
        if kind == "ident" and (nxt[0] == "punct" and nxt[1].startswith("(") or text in AGGREGATIONS):
            i += 1  # a function or an aggregation (`sum by (x) (...)`)
            continue
        if kind == "ident" and text in PROMQL_KEYWORDS:
            i += 1
            continue
        if kind in ("ident", "braces"):
            names, ms = ([text], []) if kind == "ident" else ([], None)
            j = i + 1
            if kind == "braces":
                ms = matchers(text)
            elif j < len(toks) and toks[j][0] == "braces":
                ms = matchers(toks[j][1])
                j += 1
            for label, op, value in ms:
                if label == "__name__":
                    if op == "=":
                        names.append(value)
                    elif op == "=~":
                        names += expand_name_regex(value)
                    else:
                        raise ValueError(f"__name__{op}: only = and =~ are supported")
            if not names:
                raise ValueError(f"a selector without a metric name: {text}")
            ranged = j < len(toks) and toks[j][0] == "range"
            selectors.append(Selector(names, [m for m in ms if m[0] != "__name__"], ranged))
            i = j + (1 if ranged else 0)
            continue
        i += 1
    return selectors, grouping


# --- the dashboard ---------------------------------------------------------------------------------

def load(path):
    with open(path) as f:
        return json.load(f)


def all_panels(dash):
    for p in dash.get("panels", []):
        yield p
        yield from p.get("panels", [])


def queries(dash):
    """(where, expr, legendFormat or None) of every panel target and query variable."""
    for p in all_panels(dash):
        for t in p.get("targets", []):
            yield f"panel {p.get('id')} {p.get('title')!r} query {t.get('refId')}", t.get("expr"), t.get("legendFormat")
    for v in dash.get("templating", {}).get("list", []):
        if v.get("type") == "query":
            q = v.get("query")
            yield f"variable {v.get('name')!r}", q.get("query") if isinstance(q, dict) else q, None


def substitute(expr, variables):
    """Grafana's variables replaced by values promtool can parse (multi-value ones by their
    all-value regex)."""

    def one(m):
        name = m.group(1) or m.group(2)
        if name in BUILTIN_VARIABLES:
            return BUILTIN_VARIABLES[name]
        if name in variables:
            return variables[name]
        raise ValueError(f"${name} is not a variable of the dashboard")

    return re.sub(r"\$\{(\w+)(?::\w+)?\}|\$(\w+)", one, expr)


def variable_values(dash):
    out = {}
    for v in dash.get("templating", {}).get("list", []):
        out[v["name"]] = v.get("allValue") or ".*"
    return out


def check_layout(dash, errors):
    seen_ids, boxes = {}, []
    for p in all_panels(dash):
        where = f"panel {p.get('id')} {p.get('title')!r}"
        pid = p.get("id")
        if not isinstance(pid, int):
            errors.append(f"{where}: no numeric id")
        elif pid in seen_ids:
            errors.append(f"{where}: id {pid} also used by {seen_ids[pid]!r}")
        else:
            seen_ids[pid] = p.get("title")
        gp = p.get("gridPos")
        if not isinstance(gp, dict) or not all(isinstance(gp.get(k), int) for k in "xywh"):
            errors.append(f"{where}: gridPos must have integer x, y, w and h")
            continue
        if gp["w"] < 1 or gp["h"] < 1 or gp["x"] < 0 or gp["y"] < 0 or gp["x"] + gp["w"] > GRID_COLUMNS:
            errors.append(f"{where}: gridPos {gp} is outside the {GRID_COLUMNS}-column grid")
        for other, ogp in boxes:
            if (gp["x"] < ogp["x"] + ogp["w"] and ogp["x"] < gp["x"] + gp["w"]
                    and gp["y"] < ogp["y"] + ogp["h"] and ogp["y"] < gp["y"] + gp["h"]):
                errors.append(f"{where}: gridPos {gp} overlaps {other!r} {ogp}")
        boxes.append((p.get("title"), gp))
        if p.get("type") == "row":
            continue
        if not p.get("title"):
            errors.append(f"{where}: no title")
        if not p.get("description"):
            errors.append(f"{where}: no description (say what the panel counts)")
        unit = p.get("fieldConfig", {}).get("defaults", {}).get("unit")
        if unit not in UNITS:
            errors.append(f"{where}: unit {unit!r} is not one of {sorted(UNITS)}")
        if p.get("datasource") != {"type": "prometheus", "uid": "${datasource}"}:
            errors.append(f"{where}: datasource must be the $datasource variable")
        targets = p.get("targets") or []
        if not targets:
            errors.append(f"{where}: no queries")
        refs = [t.get("refId") for t in targets]
        if len(set(refs)) != len(refs):
            errors.append(f"{where}: refIds repeat: {refs}")
        for t in targets:
            if t.get("datasource") != {"type": "prometheus", "uid": "${datasource}"}:
                errors.append(f"{where} query {t.get('refId')}: datasource must be the $datasource variable")
            if not (t.get("expr") or "").strip():
                errors.append(f"{where} query {t.get('refId')}: empty expr")
        for tr in p.get("transformations", []):
            if tr.get("id") == "organize":
                known = {f"Value #{r}" for r in refs} | {"Time"}
                for t in targets:
                    try:
                        known |= parse(substitute(t.get("expr", ""), variable_values(dash)))[1]
                    except ValueError:
                        pass
                for field in tr.get("options", {}).get("renameByName", {}):
                    if field not in known:
                        errors.append(f"{where}: organize renames {field!r}, which no query returns")


def check_variables(dash, errors):
    variables = dash.get("templating", {}).get("list", [])
    ds = [v for v in variables if v.get("name") == "datasource"]
    if not ds or ds[0].get("type") != "datasource" or ds[0].get("query") != "prometheus":
        errors.append("templating: needs a `datasource` variable of type datasource, query prometheus")
    names = {v.get("name") for v in variables}
    for required in ("operation",):
        if required not in names:
            errors.append(f"templating: no `{required}` variable")
    for v in variables:
        if v.get("type") == "query" and v.get("datasource") != {"type": "prometheus", "uid": "${datasource}"}:
            errors.append(f"variable {v.get('name')!r}: datasource must be the $datasource variable")
    texts = [p.get("title", "") for p in all_panels(dash)] + [e or "" for _, e, _ in queries(dash)]
    for text in texts:
        for m in re.finditer(r"\$\{(\w+)(?::\w+)?\}|\$(\w+)", text):
            name = m.group(1) or m.group(2)
            if name not in names and name not in BUILTIN_VARIABLES:
                errors.append(f"${name} (in {text[:60]!r}) is not a variable of the dashboard")


def check_metrics(dash, metrics, errors):
    values = variable_values(dash)
    used = set()
    for where, expr, legend in queries(dash):
        if not expr:
            continue
        try:
            sub = substitute(expr, values)
            lv = re.fullmatch(r"\s*label_values\(\s*([a-zA-Z_:][a-zA-Z0-9_:]*)\s*,\s*(\w+)\s*\)\s*", sub)
            if lv:
                name, label = lv.groups()
                if name not in metrics:
                    errors.append(f"{where}: {name} is not a metric the filter or the L2 exports")
                elif label not in metrics[name].labels | TARGET_LABELS:
                    errors.append(f"{where}: {name} has no label {label!r}")
                used.add(name)
                continue
            selectors, grouping = parse(sub)
        except ValueError as e:
            errors.append(f"{where}: {e}")
            continue
        labels_here = set(TARGET_LABELS)
        if not selectors:
            errors.append(f"{where}: reads no metric")
        for s in selectors:
            for name in s.names:
                m = metrics.get(name)
                if m is None:
                    errors.append(f"{where}: {name} is not a metric the filter or the L2 exports")
                    continue
                used.add(name)
                labels_here |= m.labels
                for label, _, _ in s.matchers:
                    if label not in m.labels | TARGET_LABELS:
                        errors.append(f"{where}: {name} has no label {label!r}")
                if m.kind == "counter" and not s.ranged:
                    errors.append(f"{where}: counter {name} read without rate()/increase() over a range")
                if m.kind == "gauge" and s.ranged:
                    errors.append(f"{where}: gauge {name} read over a range (rate of a gauge?)")
            if s.ranged and len(s.names) > 1:
                errors.append(f"{where}: rate()/increase() over several metrics at once ({'|'.join(s.names)}): "
                              "Prometheus 2 refuses it (one label set once the names are dropped)")
        for label in grouping:
            if label not in labels_here:
                errors.append(f"{where}: groups by {label!r}, a label none of its metrics has")
        if legend:
            kept = grouping if grouping else labels_here
            for label in re.findall(r"\{\{\s*(\w+)\s*\}\}", legend):
                if label not in kept:
                    errors.append(f"{where}: legend {{{{{label}}}}} is not a label the query keeps")
    for name in sorted(metrics):
        if name.startswith("graphql_cache_") and name not in used and name not in NOT_ON_DASHBOARD:
            errors.append(f"{name} (exported by the filter) is on no panel: add it, or to NOT_ON_DASHBOARD")
    return used


def check_promql(dash, promtool, errors):
    values = variable_values(dash)
    rules, where_of = [], {}
    for i, (where, expr, _) in enumerate(queries(dash)):
        if not expr:
            continue
        try:
            sub = substitute(expr, values)
        except ValueError as e:
            errors.append(f"{where}: {e}")
            continue
        lv = re.fullmatch(r"\s*label_values\(\s*([a-zA-Z_:][a-zA-Z0-9_:]*)\s*,\s*\w+\s*\)\s*", sub)
        if lv:
            sub = lv.group(1)  # Grafana's own function: the series selector inside is PromQL
        record = f"dashboard:query_{i}"
        where_of[record] = where
        rules.append({"record": record, "expr": sub})
    with tempfile.TemporaryDirectory() as tmp:
        path = os.path.join(tmp, "dashboard-rules.yml")
        with open(path, "w") as f:
            # JSON is YAML: one recording rule per query, parsed by Prometheus's own parser.
            json.dump({"groups": [{"name": "dashboard", "rules": rules}]}, f, indent=1)
        run = subprocess.run([promtool, "check", "rules", path], capture_output=True, text=True)
        if run.returncode != 0:
            exprs = {r["record"]: r["expr"] for r in rules}
            for line in (run.stdout + run.stderr).splitlines():
                line = line.strip()
                if not line or line.startswith("Checking ") or line == "FAILED:":
                    continue
                for record, where in where_of.items():
                    if f'"{record}"' in line:
                        line = f"{where}: {line.split(': ', 1)[-1]}\n    {exprs[record]}"
                errors.append(f"promtool: {line}")
            if not any(e.startswith("promtool: ") for e in errors):
                errors.append(f"promtool exited {run.returncode}")
    return len(rules)


# --- what the key panels compute -----------------------------------------------------------------

# Synthetic counters, one sample a minute for ten minutes (promtool's `a+bxn`: from a, b more each
# minute): per second, globally 1 hit, 0.5 stale, 1.5 misses (of them 0.5 coalesced, 0.25 from the
# L2), 1/3 bypass; per operation: Home 1 hit, 1 stale, 0.5 coalesced, 1.5 misses (0.5 cold,
# 1 expired), 1 bypass; Search only misses (1 cold, 1 evicted, of them 0.5 would have hit at 2x
# memory, 1 at 4x); Cached only hits (1).
SYNTHETIC = {
    'graphql_cache_hits{instance="envoy-a"}': "0+60x10",
    'graphql_cache_stale_served{instance="envoy-a"}': "0+30x10",
    'graphql_cache_misses{instance="envoy-a"}': "0+90x10",
    'graphql_cache_coalesced{instance="envoy-a"}': "0+30x10",
    'graphql_cache_l2_hits{instance="envoy-a"}': "0+15x10",
    'graphql_cache_bypasses{instance="envoy-a"}': "0+20x10",
    'graphql_cache_would_hit_2x{instance="envoy-a"}': "0+30x10",
    'graphql_cache_would_hit_4x{instance="envoy-a"}': "0+45x10",
    'graphql_cache_op_hits{instance="envoy-a",graphql_operation="Home"}': "0+60x10",
    'graphql_cache_op_stale{instance="envoy-a",graphql_operation="Home"}': "0+60x10",
    'graphql_cache_op_coalesced{instance="envoy-a",graphql_operation="Home"}': "0+30x10",
    'graphql_cache_op_misses{instance="envoy-a",graphql_operation="Home",graphql_cache_reason="cold"}': "0+30x10",
    'graphql_cache_op_misses{instance="envoy-a",graphql_operation="Home",graphql_cache_reason="expired"}': "0+60x10",
    'graphql_cache_op_bypasses{instance="envoy-a",graphql_operation="Home",graphql_cache_reason="mutation"}': "0+60x10",
    'graphql_cache_op_misses{instance="envoy-a",graphql_operation="Search",graphql_cache_reason="cold"}': "0+60x10",
    'graphql_cache_op_misses{instance="envoy-a",graphql_operation="Search",graphql_cache_reason="evicted"}': "0+60x10",
    'graphql_cache_op_would_hit{instance="envoy-a",graphql_operation="Search",graphql_cache_reason="2x"}': "0+30x10",
    'graphql_cache_op_would_hit{instance="envoy-a",graphql_operation="Search",graphql_cache_reason="4x"}': "0+60x10",
    'graphql_cache_op_hits{instance="envoy-a",graphql_operation="Cached"}': "0+60x10",
}
PER_OP = lambda home, search, cached: [  # noqa: E731
    ('{graphql_operation="Home"}', home), ('{graphql_operation="Search"}', search),
    ('{graphql_operation="Cached"}', cached)]
# (panel type, panel title, refId) -> the samples its query must give at the end of SYNTHETIC.
EXPECTED = {
    ("stat", "Hit ratio", "A"): [("{}", 0.5)],
    ("stat", "Served without an origin trip", "A"): [("{}", 0.75)],
    ("stat", "Lookups per second", "A"): [("{}", 3)],
    ("stat", "Bypassed share", "A"): [("{}", 0.1)],
    ("timeseries", "Hit ratio", "A"): [("{}", 0.5)],
    ("timeseries", "Hit ratio", "B"): [("{}", 0.75)],
    # 0.5 of the 1.5 misses a second would have hit at 2x memory, 0.75 at 4x.
    ("timeseries", "Hit ratio", "C"): [("{}", 2 / 3)],
    ("timeseries", "Hit ratio", "D"): [("{}", 0.75)],
    ("timeseries", "Hit ratio per operation", "A"): PER_OP(0.5, 0, 1),
    ("bargauge", "Hit ratio per operation, time range", "A"): PER_OP(0.5, 0, 1),
    ("timeseries", "Served without an origin trip per operation", "A"): PER_OP(0.625, 0, 1),
    ("timeseries", "Requests per operation", "A"): PER_OP(5, 2, 1),
    ("timeseries", "Miss reasons", "A"): [('{graphql_cache_reason="cold"}', 1.5),
                                          ('{graphql_cache_reason="evicted"}', 1),
                                          ('{graphql_cache_reason="expired"}', 1)],
    # Search's evicted misses are the store's to win: its ceiling is half its requests.
    ("bargauge", "Hit ratio and cacheable ceiling per operation, time range", "A"): PER_OP(0.5, 0, 1),
    ("bargauge", "Hit ratio and cacheable ceiling per operation, time range", "B"):
        PER_OP(0.5, 0.5, 1),
    # Half of Search's evicted misses would have hit with twice the memory.
    ("bargauge", "Hit ratio and cacheable ceiling per operation, time range", "C"):
        PER_OP(0.5, 0.25, 1),
}


def check_semantics(dash, promtool, errors):
    values = variable_values(dash)
    subs = {"__rate_interval": "5m", "__range": "5m", "__interval": "1m"}
    tests, found, keys = [], set(), []
    for p in all_panels(dash):
        for t in p.get("targets", []):
            key = (p.get("type"), p.get("title"), t.get("refId"))
            if key not in EXPECTED:
                continue
            expr = re.sub(r"\$(__\w+)", lambda m: subs.get(m.group(1), m.group(0)), t.get("expr", ""))
            try:
                expr = substitute(expr, values)
            except ValueError as e:
                errors.append(f"{key}: {e}")
                continue
            found.add(key)
            keys.append(key)
            tests.append({"expr": expr, "eval_time": "10m",
                          "exp_samples": [{"labels": lab, "value": v} for lab, v in EXPECTED[key]]})
    for key in sorted(set(EXPECTED) - found):
        errors.append(f"no {key[0]} panel {key[1]!r} with a query {key[2]} (EXPECTED names it)")
    with tempfile.TemporaryDirectory() as tmp:
        path = os.path.join(tmp, "dashboard-test.yml")
        with open(path, "w") as f:
            json.dump({"evaluation_interval": "1m", "tests": [{
                "interval": "1m",
                "input_series": [{"series": k, "values": v} for k, v in SYNTHETIC.items()],
                "promql_expr_test": tests}]}, f, indent=1)
        run = subprocess.run([promtool, "test", "rules", path], capture_output=True, text=True)
        if run.returncode != 0:
            out = (run.stdout + run.stderr).strip()
            for block in re.split(r"\n(?=\s*expr: )", out):
                m = re.search(r'expr: "(.*?)", time', block)
                where = ""
                if m:
                    for k, t in zip(keys, tests):
                        if json.dumps(t["expr"])[1:-1] == m.group(1):
                            where = f"{k[0]} panel {k[1]!r} query {k[2]}: "
                    block = block.replace(m.group(0), "time")
                if "FAILED" in block or "Unit Testing" in block or not block.strip():
                    continue
                errors.append("meaning (promtool test rules): " + where + " ".join(block.split()))
            if not any(e.startswith("meaning") for e in errors):
                errors.append("meaning (promtool test rules): " + " ".join(out.split())[:600])
    return len(tests)


def check_schema(dashboard_path, errors):
    node = "node"
    gen = subprocess.run([node, os.path.join(HERE, "gen.mjs"), dashboard_path], capture_output=True, text=True)
    if gen.returncode != 0:
        errors.append(f"gen.mjs: {gen.stderr.strip()}")
        return
    tsc = os.path.join(HERE, "node_modules", "typescript", "bin", "tsc")
    run = subprocess.run([node, tsc, "-p", HERE], capture_output=True, text=True)
    if run.returncode != 0:
        for line in (run.stdout + run.stderr).strip().splitlines():
            errors.append(f"schema (tsc): {line[:400]}")


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--dashboard", default=DASHBOARD)
    ap.add_argument("--promtool", default="promtool")
    ap.add_argument("--skip-schema", action="store_true", help="leave out the tsc check")
    args = ap.parse_args(argv)
    try:
        dash = load(args.dashboard)
    except (OSError, json.JSONDecodeError) as e:
        print(f"{args.dashboard}: {e}")
        return 1
    errors = []
    if not args.skip_schema:
        check_schema(args.dashboard, errors)
    check_layout(dash, errors)
    check_variables(dash, errors)
    used = check_metrics(dash, exported_metrics(), errors)
    n = check_promql(dash, args.promtool, errors)
    m = check_semantics(dash, args.promtool, errors)
    rel = os.path.relpath(args.dashboard, ROOT)
    if errors:
        for e in errors:
            print(f"{rel}: {e}")
        print(f"{rel}: {len(errors)} problem(s)")
        return 1
    panels = sum(1 for p in all_panels(dash) if p.get("type") != "row")
    print(f"{rel}: {panels} panels, {n} queries parsed by promtool, {m} evaluated on synthetic counters as "
          f"expected, {len(used)} metrics all exported"
          + ("" if args.skip_schema else ", Grafana's schema (@grafana/schema) satisfied"))
    return 0


if __name__ == "__main__":
    sys.exit(main())
