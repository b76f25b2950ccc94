"""Tests of check.py: the shipped dashboard passes, and deliberately broken copies fail, each for
the reason it was broken.

Run: PROMTOOL=path/to/promtool python3 -m unittest discover -s envoy/grafana/check -p 'test_*.py'
(`make dashboard-check` does, after `npm ci` here).
"""

import copy
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import unittest

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)

import check  # noqa: E402

PROMTOOL = os.environ.get("PROMTOOL", "promtool")
DASH = check.load(check.DASHBOARD)
METRICS = check.exported_metrics()


def panel(d, title):
    return next(p for p in check.all_panels(d) if p.get("title") == title)


def problems(d):
    """Every problem check.py finds in d, the schema check aside (see SchemaTest)."""
    errors = []
    check.check_layout(d, errors)
    check.check_variables(d, errors)
    check.check_metrics(d, METRICS, errors)
    check.check_promql(d, PROMTOOL, errors)
    check.check_semantics(d, PROMTOOL, errors)
    return errors


# Each: (name, how to break a copy of the dashboard, a pattern one of the problems must match).
def _set(path, value):
    def f(d):
        obj = d
        for k in path[:-1]:
            obj = obj[k]
        obj[path[-1]] = value
    return f


def _expr(title, ref, fn):
    def f(d):
        t = next(t for t in panel(d, title)["targets"] if t["refId"] == ref)
        t["expr"] = fn(t["expr"])
    return f


def _drop_gridpos(d):
    del panel(d, "Coalescing")["gridPos"]


def _move_onto(d):
    panel(d, "Stale serving")["gridPos"] = dict(panel(d, "Coalescing")["gridPos"])


def _too_wide(d):
    panel(d, "Stale serves per operation")["gridPos"]["w"] = 10


def _same_id(d):
    panel(d, "Coalescing")["id"] = panel(d, "Stale serving")["id"]


def _no_l2_rejected(d):
    p = panel(d, "L2 from the filter")
    p["targets"] = [t for t in p["targets"] if "l2_rejected" not in t["expr"]]


def _fixed_datasource(d):
    panel(d, "Coalescing")["datasource"] = {"type": "prometheus", "uid": "prometheus-prod"}


def _no_operation_variable(d):
    d["templating"]["list"] = [v for v in d["templating"]["list"] if v["name"] != "operation"]


def _bad_variable_query(d):
    v = next(v for v in d["templating"]["list"] if v["name"] == "operation")
    v["query"] = "label_values(graphql_cache_op_hits, operation)"


def _bad_rename(d):
    org = next(t for t in panel(d, "Requests per operation by cache status")["transformations"] if t["id"] == "organize")
    org["options"]["renameByName"]["Value #F"] = "PURGED"


def _legend_label_dropped(d):
    t = panel(d, "Hit ratio per operation")["targets"][0]
    t["legendFormat"] = "{{graphql_cache_reason}}"


BROKEN = [
    ("metric name typo", _expr("Coalescing", "A", lambda e: e.replace("graphql_cache_leaders", "graphql_cache_leader")),
     r"graphql_cache_leader is not a metric"),
    ("metric name typo in a sum",
     _expr("Hit ratio", "A", lambda e: e.replace("graphql_cache_stale_served", "graphql_cache_stale_serves")),
     r"graphql_cache_stale_serves is not a metric"),
    ("per-operation metric typo", _expr("Coalesced per operation", "A", lambda e: e.replace("op_coalesced", "op_coalesce")),
     r"graphql_cache_op_coalesce is not a metric"),
    ("L2 metric typo", _expr("L2 service requests", "A", lambda e: e.replace("l2_requests_total", "l2_request_total")),
     r"l2_request_total is not a metric"),
    ("label matcher typo", _expr("Coalesced per operation", "A", lambda e: e.replace("graphql_operation=~", "graphql_op=~")),
     r"has no label 'graphql_op'"),
    ("grouping label typo", _expr("Miss reasons", "A", lambda e: e.replace("by (graphql_cache_reason)", "by (reason)")),
     r"groups by 'reason'"),
    ("legend names a label the query drops", _legend_label_dropped, r"legend \{\{graphql_cache_reason\}\}"),
    ("counter without rate()", _expr("Coalescing", "A", lambda e: "sum(graphql_cache_leaders)"),
     r"counter graphql_cache_leaders read without rate"),
    ("rate() of a gauge", _expr("L2 connections", "A", lambda e: "sum(rate(l2_pubsub_connected[$__rate_interval]))"),
     r"gauge l2_pubsub_connected read over a range"),
    ("unbalanced parenthesis (promtool)", _expr("Hit ratio", "A", lambda e: e.replace(")) /", ") /", 1)),
     r"promtool: panel \d+ 'Hit ratio' query A: .*parse error"),
    ("unknown function (promtool)", _expr("Coalescing", "A", lambda e: e.replace("rate(", "rates(")),
     r"promtool: panel \d+ 'Coalescing' query A: .*unknown function"),
    ("several metrics in one rate() (Prometheus 2 refuses it)",
     _expr("Requests per operation", "A",
           lambda e: 'sum by (graphql_operation) (rate({__name__=~"graphql_cache_op_(hits|stale)"}[$__rate_interval]))'),
     r"over several metrics at once"),
    ("the same, caught when evaluated",
     _expr("Requests per operation", "A",
           lambda e: 'sum by (graphql_operation) (rate({__name__=~"graphql_cache_op_(hits|stale)"}[$__rate_interval]))'),
     r"meaning .*'Requests per operation' query A: .*same labelset"),
    ("per-operation hit ratio counting misses as served",
     _expr("Hit ratio per operation", "A", lambda e: e.replace(" * 0", "")),
     r"meaning .*timeseries panel 'Hit ratio per operation' query A"),
    ("an operation that only missed left out of its hit ratio",
     _expr("Served without an origin trip per operation", "A",
           lambda e: e.replace(' or label_replace(rate(graphql_cache_op_misses{instance=~"$instance", '
                               'graphql_operation=~"$operation"}[$__rate_interval]) * 0, "counter", "misses", "", "")', "")),
     r"meaning .*'Served without an origin trip per operation'"),
    ("overall hit ratio over bypasses instead of misses",
     _expr("Hit ratio", "A", lambda e: e.replace("graphql_cache_misses", "graphql_cache_bypasses")),
     r"meaning .*panel 'Hit ratio' query A"),
    ("undefined variable", _expr("Coalescing", "A", lambda e: e.replace("$instance", "$instanse")),
     r"\$instanse .*is not a variable"),
    ("gridPos missing", _drop_gridpos, r"'Coalescing': gridPos must have"),
    ("panels overlap", _move_onto, r"'Stale serving': gridPos .* overlaps 'Coalescing'"),
    ("panel wider than the grid", _too_wide, r"outside the 24-column grid"),
    ("duplicate panel id", _same_id, r"id \d+ also used by"),
    ("unit typo", _set(["panels", 2, "fieldConfig", "defaults", "unit"], "percentunits"), r"unit 'percentunits'"),
    ("a filter counter on no panel", _no_l2_rejected, r"graphql_cache_l2_rejected .* is on no panel"),
    ("datasource not the variable", _fixed_datasource, r"'Coalescing': datasource must be the \$datasource"),
    ("no operation variable", _no_operation_variable, r"no `operation` variable"),
    ("variable's label_values label typo", _bad_variable_query, r"variable 'operation': graphql_cache_op_hits has no label 'operation'"),
    ("table renames a field no query returns", _bad_rename, r"organize renames 'Value #F'"),
]


class MetricsTest(unittest.TestCase):
    def test_exported_metrics_are_read_from_the_sources(self):
        self.assertIn("graphql_cache_hits", METRICS)
        self.assertIn("graphql_cache_l2_feed_failsafe", METRICS)
        self.assertEqual(METRICS["l2_requests_total"].labels, {"verb", "outcome"})
        self.assertEqual(METRICS["l2_shed_total"].labels, {"what"})
        self.assertEqual(METRICS["l2_pubsub_connected"].kind, "gauge")
        self.assertEqual(METRICS["l2_purge_follower_connected"].kind, "gauge")
        self.assertEqual(METRICS["graphql_cache_op_misses"].labels, {"graphql_operation", "graphql_cache_reason"})

    def test_parse(self):
        sels, grouping = check.parse(
            'sum by (a, b) (rate({__name__=~"x_(y|z)", i=~".*"}[1m])) / on (a) group_left max(g) + 2')
        self.assertEqual([s.names for s in sels], [["x_y", "x_z"], ["g"]])
        self.assertEqual([s.ranged for s in sels], [True, False])
        self.assertEqual(grouping, {"a", "b"})


class DashboardTest(unittest.TestCase):
    def test_shipped_dashboard_passes(self):
        self.assertEqual(problems(DASH), [])

    def test_broken_dashboards_fail(self):
        for name, breaker, pattern in BROKEN:
            with self.subTest(name):
                d = copy.deepcopy(DASH)
                breaker(d)
                found = problems(d)
                self.assertTrue(any(re.search(pattern, e) for e in found),
                                f"{name}: no problem matches {pattern!r}; found: {found}")


# Broken for Grafana's schema; tsc (one run over all of them) must find each.
SCHEMA_BROKEN = {
    "panel_type_not_a_string": lambda d: _set(["panels", 1, "type"], 5)(d),
    "unknown_panel_type": lambda d: _set(["panels", 1, "type"], "graph")(d),
    "unknown_panel_property": lambda d: _set(["panels", 1, "colour"], "red")(d),
    "unknown_top_level_property": lambda d: _set(["__inputs"], [])(d),
    "gridpos_without_w": lambda d: d["panels"][1]["gridPos"].pop("w"),
    "gridpos_x_a_string": lambda d: _set(["panels", 1, "gridPos", "x"], "0")(d),
    "stat_color_mode_not_an_enum_value": lambda d: _set(["panels", 1, "options", "colorMode"], "colour")(d),
    "stat_without_reduce_options": lambda d: d["panels"][1]["options"].pop("reduceOptions"),
    "timeseries_unknown_legend_option": lambda d: _set(["panels", 7, "options", "legend", "position"], "bottom")(d),
    "timeseries_unknown_custom_field_config": lambda d: _set(["panels", 7, "fieldConfig", "defaults", "custom", "lineWidthPx"], 2)(d),
    "timeseries_bad_stacking_mode": lambda d: _set(["panels", 7, "fieldConfig", "defaults", "custom", "stacking", "mode"], "stacked")(d),
    "color_mode_typo": lambda d: _set(["panels", 7, "fieldConfig", "defaults", "color", "mode"], "palette-clasic")(d),
    "target_without_expr": lambda d: d["panels"][7]["targets"][0].pop("expr"),
    "variable_refresh_out_of_range": lambda d: _set(["templating", "list", 1, "refresh"], 7)(d),
    "schema_version_a_string": lambda d: _set(["schemaVersion"], "39")(d),
}


class SchemaTest(unittest.TestCase):
    def test_schema_check_catches_each_break(self):
        self.assertEqual(DASH["panels"][1]["type"], "stat")
        self.assertEqual(DASH["panels"][7]["type"], "timeseries")
        out_dir = os.path.join(HERE, "gen", "broken")
        shutil.rmtree(out_dir, ignore_errors=True)
        os.makedirs(out_dir)
        files = []
        with tempfile.TemporaryDirectory() as tmp:
            for name, breaker in list(SCHEMA_BROKEN.items()) + [("unbroken", lambda d: None)]:
                d = copy.deepcopy(DASH)
                breaker(d)
                src = os.path.join(tmp, f"{name}.json")
                with open(src, "w") as f:
                    json.dump(d, f)
                subprocess.run(["node", os.path.join(HERE, "gen.mjs"), src, os.path.join(out_dir, f"{name}.ts")], check=True)
                files.append(f"{name}.ts")
        with open(os.path.join(out_dir, "tsconfig.json"), "w") as f:
            json.dump({"extends": "../../tsconfig.json", "files": ["../../schema.ts"] + files}, f)
        tsc = os.path.join(HERE, "node_modules", "typescript", "bin", "tsc")
        run = subprocess.run(["node", tsc, "-p", out_dir], capture_output=True, text=True, cwd=HERE)
        failed = set(re.findall(r"gen/broken/(\w+)\.ts\(", run.stdout + run.stderr))
        self.assertNotIn("unbroken", failed, run.stdout)
        self.assertEqual(failed, set(SCHEMA_BROKEN), run.stdout)
        shutil.rmtree(out_dir, ignore_errors=True)


if __name__ == "__main__":
    unittest.main()
