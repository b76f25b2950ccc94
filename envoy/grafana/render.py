#!/usr/bin/env python3
"""Draws a Grafana dashboard JSON to a PNG from a Prometheus: a stand-in for a Grafana screenshot
where no Grafana can run.

It lays the panels out by their gridPos, evaluates each target's expr through Prometheus's HTTP
API (query_range for time series, query for stat, bar gauge and table panels, and instant
targets), with Grafana's variables replaced the way Grafana does ($__rate_interval from the scrape
interval, $__range the time range, multi-value variables by their all-value), and draws time
series (stacked when the panel says so), stats, bar gauges and tables with the panels' titles,
units and legends. Other panel types are drawn as their title only. It is not Grafana: fonts,
colours and details differ; the numbers are Prometheus's.

Usage: render.py --prometheus URL --start UNIX --end UNIX [--dashboard FILE] [--out PNG]
"""

import argparse
import json
import math
import os
import re
import sys
import urllib.parse
import urllib.request
from datetime import datetime

HERE = os.path.dirname(os.path.abspath(__file__))

# Grafana's dark theme and classic palette.
BG, PANEL, BORDER, TEXT, DIM, GRID = "#111217", "#181b1f", "#2c3235", "#ccccdc", "#8e8e9e", "#2c3235"
PALETTE = ["#7EB26D", "#EAB839", "#6ED0E0", "#EF843C", "#E24D42", "#1F78C1", "#BA43A9", "#705DA0",
           "#508642", "#CCA300", "#447EBC", "#C15C17", "#890F02", "#0A437C", "#6D1F62", "#584477",
           "#B7DBAB", "#F4D598", "#70DBED", "#F9BA8F", "#F29191", "#82B5D8", "#E5A8E2", "#AEA2E0"]
NAMED = {"green": "#73BF69", "red": "#F2495C", "orange": "#FF9830", "yellow": "#FADE2A", "blue": "#5794F2",
         "purple": "#B877D9", "text": TEXT}

WIDTH_PX, COL = 1800, 1800 / 24
ROW_PX, GAP = 34, 6
HEADER_PX, FOOTER_PX = 78, 34


class Prometheus:
    def __init__(self, url):
        self.url = url.rstrip("/")

    def _get(self, path, params):
        q = urllib.parse.urlencode(params)
        with urllib.request.urlopen(f"{self.url}{path}?{q}", timeout=30) as r:
            body = json.load(r)
        if body.get("status") != "success":
            raise RuntimeError(f"Prometheus: {body.get('error')} for {params.get('query')}")
        return body["data"]["result"]

    def range(self, expr, start, end, step):
        return self._get("/api/v1/query_range", {"query": expr, "start": start, "end": end, "step": step})

    def instant(self, expr, at):
        return self._get("/api/v1/query", {"query": expr, "time": at})


def grafana_duration(seconds):
    seconds = int(round(seconds))
    for unit, n in (("h", 3600), ("m", 60)):
        if seconds % n == 0 and seconds >= n:
            return f"{seconds // n}{unit}"
    return f"{seconds}s"


def substitute(expr, variables):
    def one(m):
        name = m.group(1) or m.group(2)
        if name not in variables:
            raise KeyError(f"${name} is not a variable")
        return variables[name]

    return re.sub(r"\$\{(\w+)(?::\w+)?\}|\$(\w+)", one, expr)


def legend_of(fmt, labels, fallback):
    if not fmt:
        return ", ".join(f"{k}={v}" for k, v in sorted(labels.items()) if k != "__name__") or fallback
    return re.sub(r"\{\{\s*(\w+)\s*\}\}", lambda m: labels.get(m.group(1), ""), fmt)


def fmt_value(v, unit, decimals=None, axis=False):
    if v is None or (isinstance(v, float) and math.isnan(v)):
        return "No data"
    d = decimals
    if unit == "percentunit":
        v, suffix = v * 100, "%"
        d = 0 if axis else (1 if d is None else d)
        return f"{v:.{d}f}{suffix}"
    if unit == "s":
        if abs(v) < 1 and v != 0:
            return f"{v * 1000:.0f} ms"
        if abs(v) >= 3600:
            return f"{v / 3600:.1f} h"
        if abs(v) >= 60:
            return f"{v / 60:.1f} min"
        return f"{v:.{1 if d is None else d}f} s"
    suffix = {"reqps": " req/s", "ops": " ops/s"}.get(unit, "")
    for div, p in ((1e9, "G"), (1e6, "M"), (1e3, "K")):
        if abs(v) >= div:
            return f"{v / div:.1f}{p}{suffix}"
    if d is None:
        d = 0 if float(v).is_integer() else (1 if abs(v) >= 10 else 2)
    return f"{v:.{d}f}{suffix}"


def color_for(value, thresholds):
    steps = (thresholds or {}).get("steps") or [{"color": "text", "value": None}]
    color = steps[0]["color"]
    for s in steps[1:]:
        if value is not None and s.get("value") is not None and value >= s["value"]:
            color = s["color"]
    return NAMED.get(color, color)


def ryg(frac):
    """Grafana's continuous red-yellow-green, 0..1."""
    frac = min(max(frac, 0.0), 1.0)
    stops = [(0.0, (0xF2, 0x49, 0x5C)), (0.5, (0xFA, 0xDE, 0x2A)), (1.0, (0x73, 0xBF, 0x69))]
    for (a, ca), (b, cb) in zip(stops, stops[1:]):
        if frac <= b:
            t = (frac - a) / (b - a)
            return "#" + "".join(f"{int(x + (y - x) * t):02x}" for x, y in zip(ca, cb))
    return "#73BF69"


def render(dashboard, prometheus_url, start, end, out, scrape_seconds=15, variables=None, footer=None):
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    from matplotlib.patches import FancyBboxPatch, Rectangle
    from matplotlib.ticker import FuncFormatter, MaxNLocator
    from matplotlib.dates import DateFormatter

    prom = Prometheus(prometheus_url)
    span = end - start
    # Grafana: $__interval from the range over ~ the panel's pixel width (at least the data
    # source's scrape interval); $__rate_interval = max($__interval + scrape, 4 x scrape).
    interval = max(scrape_seconds, span / 600)
    step = interval
    values = {"__interval": grafana_duration(interval),
              "__rate_interval": grafana_duration(max(interval + scrape_seconds, 4 * scrape_seconds)),
              "__range": grafana_duration(span)}
    for v in dashboard.get("templating", {}).get("list", []):
        if v["name"] not in values:
            values[v["name"]] = (variables or {}).get(v["name"], v.get("allValue") or ".*")

    panels = [p for p in dashboard.get("panels", []) if "gridPos" in p]
    errors = []
    rows = max(p["gridPos"]["y"] + p["gridPos"]["h"] for p in panels)
    height = HEADER_PX + rows * ROW_PX + FOOTER_PX
    dpi = 100
    fig = plt.figure(figsize=(WIDTH_PX / dpi, height / dpi), dpi=dpi, facecolor=BG)
    plt.rcParams.update({"font.size": 9, "text.color": TEXT, "axes.labelcolor": TEXT,
                         "xtick.color": DIM, "ytick.color": DIM, "font.family": "DejaVu Sans"})

    def box(gp):
        """gridPos -> figure fraction (left, bottom, width, height), with the gap between panels."""
        x0 = gp["x"] * COL + GAP / 2
        y0 = HEADER_PX + gp["y"] * ROW_PX + GAP / 2
        w, h = gp["w"] * COL - GAP, gp["h"] * ROW_PX - GAP
        return x0 / WIDTH_PX, 1 - (y0 + h) / height, w / WIDTH_PX, h / height

    def px(n, axis="x"):
        return n / (WIDTH_PX if axis == "x" else height)

    fig.text(px(14), 1 - px(26, "y"), dashboard.get("title", ""), fontsize=17, weight="bold", va="center")
    chips = [f"{v.get('label') or v['name']}: {'Prometheus' if v['type'] == 'datasource' else 'All'}"
             for v in dashboard.get("templating", {}).get("list", [])]
    when = f"{datetime.fromtimestamp(start):%Y-%m-%d %H:%M:%S} to {datetime.fromtimestamp(end):%H:%M:%S}"
    fig.text(px(14), 1 - px(56, "y"), "     ".join(chips) + f"     Time: {when}", fontsize=10, color=DIM, va="center")

    for p in panels:
        l, b, w, h = box(p["gridPos"])
        kind = p.get("type")
        if kind == "row":
            fig.text(l + px(4), b + h / 2, p.get("title", ""), fontsize=12.5, weight="bold", va="center")
            fig.add_artist(Rectangle((l, b), w, px(1, "y"), transform=fig.transFigure, color=BORDER))
            continue
        fig.add_artist(FancyBboxPatch((l, b), w, h, boxstyle="round,pad=0,rounding_size=0.002", zorder=-10,
                                      transform=fig.transFigure, facecolor=PANEL, edgecolor=BORDER, linewidth=0.8))
        fig.text(l + px(8), b + h - px(14, "y"), p.get("title", ""), fontsize=10.5, weight="bold", va="center")
        defaults = p.get("fieldConfig", {}).get("defaults", {})
        unit, decimals = defaults.get("unit", "short"), defaults.get("decimals")
        inner = (l + px(8), b + px(8, "y"), w - px(16), h - px(34, "y"))
        try:
            if kind == "timeseries":
                draw_timeseries(fig, p, inner, prom, values, start, end, step, unit, FuncFormatter,
                                MaxNLocator, DateFormatter, px)
            elif kind == "stat":
                draw_stat(fig, p, inner, prom, values, end, unit, decimals, defaults)
            elif kind == "bargauge":
                draw_bargauge(fig, p, inner, prom, values, end, unit, decimals, defaults, px)
            elif kind == "table":
                draw_table(fig, p, inner, prom, values, end, decimals, px)
        except (RuntimeError, OSError, KeyError) as e:
            errors.append(f"panel {p.get('id')} {p.get('title')!r}: {e}")
            fig.text(inner[0] + inner[2] / 2, inner[1] + inner[3] / 2, f"error: {e}"[:90], ha="center",
                     va="center", color=NAMED["red"], fontsize=8)
    if footer:
        fig.text(px(14), px(FOOTER_PX / 2, "y"), footer, fontsize=9, color=DIM, va="center", style="italic")
    os.makedirs(os.path.dirname(os.path.abspath(out)), exist_ok=True)
    fig.savefig(out, dpi=dpi, facecolor=BG)
    plt.close(fig)
    try:  # 256 colours: a third of the bytes, no visible difference (Pillow comes with matplotlib)
        from PIL import Image

        with Image.open(out) as im:
            small = im.convert("RGB").quantize(colors=256, method=Image.Quantize.MEDIANCUT)
        small.save(out, optimize=True)
    except ImportError:
        pass
    return errors


def no_data(fig, inner):
    fig.text(inner[0] + inner[2] / 2, inner[1] + inner[3] / 2, "No data", ha="center", va="center",
             color=DIM, fontsize=12)


def draw_timeseries(fig, p, inner, prom, values, start, end, step, unit, FuncFormatter, MaxNLocator,
                    DateFormatter, px):
    series = []
    for t in p.get("targets", []):
        if t.get("hide"):
            continue
        for r in prom.range(substitute(t["expr"], values), start, end, step):
            pts = [(float(ts), float(v)) for ts, v in r["values"]]
            pts = [(ts, v) for ts, v in pts if math.isfinite(v)]
            if pts:
                series.append((legend_of(t.get("legendFormat"), r["metric"], t["refId"]), pts))
    if not series:
        return no_data(fig, inner)
    series.sort(key=lambda s: s[0])
    custom = p.get("fieldConfig", {}).get("defaults", {}).get("custom", {})
    stacked = custom.get("stacking", {}).get("mode") == "normal"
    fill = custom.get("fillOpacity", 0) / 100
    ncol = max(1, int(inner[2] * 1800 / 150))
    shown = series[:3 * ncol]
    legend_rows = math.ceil(len(shown) / ncol)
    legend_h = px(15 * legend_rows + 4, "y")
    ax = fig.add_axes((inner[0] + px(50), inner[1] + legend_h + px(16, "y"), inner[2] - px(58),
                       inner[3] - legend_h - px(18, "y")))
    ax.set_facecolor(PANEL)
    for s in ax.spines.values():
        s.set_visible(False)
    ax.grid(True, color=GRID, linewidth=0.6)
    ax.tick_params(labelsize=8, length=0)
    # Every series on the same time grid (Prometheus's steps), missing points as 0 when stacking.
    grid = sorted({ts for _, pts in series for ts, _ in pts})
    base = [0.0] * len(grid)
    times = [datetime.fromtimestamp(ts) for ts in grid]
    for i, (name, pts) in enumerate(series):
        color = PALETTE[i % len(PALETTE)]
        d = dict(pts)
        if stacked:
            top = [b + d.get(ts, 0.0) for b, ts in zip(base, grid)]
            ax.fill_between(times, base, top, color=color, alpha=max(fill, 0.15), linewidth=0)
            ax.plot(times, top, color=color, linewidth=1.4, label=name)
            base = top
        else:
            xs = [datetime.fromtimestamp(ts) for ts, _ in pts]
            ys = [v for _, v in pts]
            ax.plot(xs, ys, color=color, linewidth=1.6, label=name)
            if fill:
                ax.fill_between(xs, 0, ys, color=color, alpha=fill, linewidth=0)
    defaults = p.get("fieldConfig", {}).get("defaults", {})
    lo, hi = ax.get_ylim()
    soft_min = custom.get("axisSoftMin")
    lo = defaults.get("min", min(soft_min, lo) if soft_min is not None else lo)
    hi = defaults.get("max", max(hi, lo + 1e-9))
    if all(v == 0 for _, pts in series for _, v in pts):
        hi = lo + 1
    ax.set_ylim(lo, hi)
    ax.yaxis.set_major_locator(MaxNLocator(4))
    ax.yaxis.set_major_formatter(FuncFormatter(lambda v, _: fmt_value(v, unit, axis=True)))
    ax.xaxis.set_major_formatter(DateFormatter("%H:%M:%S"))
    ax.xaxis.set_major_locator(MaxNLocator(5))
    ax.set_xlim(times[0], times[-1])
    handles, labels = ax.get_legend_handles_labels()
    order = {n: k for k, (n, _) in enumerate(shown)}
    pairs = [(h, lab) for h, lab in zip(handles, labels) if lab in order]
    more = len(series) - len(shown)
    fig.legend([h for h, _ in pairs], [lab[:34] for _, lab in pairs], loc="lower left",
               bbox_to_anchor=(inner[0], inner[1]), ncol=ncol, frameon=False, fontsize=8,
               handlelength=1.2, columnspacing=1.0, labelcolor=TEXT, borderaxespad=0, borderpad=0)
    if more > 0:
        fig.text(inner[0] + inner[2], inner[1], f"+{more} more", ha="right", va="bottom", fontsize=8, color=DIM)


def instant_rows(p, prom, values, at):
    out = []
    for t in p.get("targets", []):
        for r in prom.instant(substitute(t["expr"], values), at):
            v = float(r["value"][1])
            out.append((t, r["metric"], v))
    return out


def draw_stat(fig, p, inner, prom, values, at, unit, decimals, defaults):
    rows = [(t, m, v) for t, m, v in instant_rows(p, prom, values, at) if math.isfinite(v)]
    if not rows:
        return no_data(fig, inner)
    v = rows[0][2]
    fig.text(inner[0] + inner[2] / 2, inner[1] + inner[3] * 0.45, fmt_value(v, unit, decimals), ha="center",
             va="center", fontsize=26, weight="bold", color=color_for(v, defaults.get("thresholds")))


def draw_bargauge(fig, p, inner, prom, values, at, unit, decimals, defaults, px):
    rows = [(legend_of(t.get("legendFormat"), m, t["refId"]), v)
            for t, m, v in instant_rows(p, prom, values, at) if math.isfinite(v)]
    if not rows:
        return no_data(fig, inner)
    rows.sort(key=lambda r: r[0])
    lo, hi = defaults.get("min", 0), defaults.get("max", max(v for _, v in rows) or 1)
    n = len(rows)
    slot = inner[3] / n
    name_w = px(130)
    for i, (name, v) in enumerate(rows):
        y = inner[1] + inner[3] - (i + 1) * slot
        bh = slot * 0.62
        frac = (v - lo) / (hi - lo) if hi > lo else 0
        fig.text(inner[0], y + slot / 2, name[:22], va="center", fontsize=9)
        x0, full = inner[0] + name_w, inner[2] - name_w - px(70)
        fig.add_artist(rect(fig, x0, y + (slot - bh) / 2, full, bh, "#22252b"))
        fig.add_artist(rect(fig, x0, y + (slot - bh) / 2, full * max(0.0, min(frac, 1.0)), bh, ryg(frac)))
        fig.text(inner[0] + inner[2], y + slot / 2, fmt_value(v, unit, decimals), ha="right", va="center",
                 fontsize=11, weight="bold", color=ryg(frac))


def rect(fig, x, y, w, h, color):
    from matplotlib.patches import Rectangle

    return Rectangle((x, y), w, h, transform=fig.transFigure, color=color, linewidth=0, zorder=-5)


def draw_table(fig, p, inner, prom, values, at, decimals, px):
    # Grafana's `merge` of instant table queries: one row per label set, a "Value #<refId>" column
    # per query; then `organize` renames and orders the columns.
    rows, label_cols = {}, []
    refs = [t["refId"] for t in p.get("targets", [])]
    for t, m, v in instant_rows(p, prom, values, at):
        labels = {k: val for k, val in m.items() if k != "__name__"}
        for k in labels:
            if k not in label_cols:
                label_cols.append(k)
        key = tuple(sorted(labels.items()))
        rows.setdefault(key, dict(labels))[f"Value #{t['refId']}"] = v
    if not rows:
        return no_data(fig, inner)
    cols = label_cols + [f"Value #{r}" for r in refs]
    names = {c: c for c in cols}
    for tr in p.get("transformations", []):
        if tr.get("id") == "organize":
            o = tr.get("options", {})
            idx = o.get("indexByName", {})
            cols = sorted(cols, key=lambda c: idx.get(c, 99))
            cols = [c for c in cols if not o.get("excludeByName", {}).get(c)]
            names.update(o.get("renameByName", {}))
    sort = (p.get("options", {}).get("sortBy") or [{}])[0]
    table = list(rows.values())
    if sort.get("displayName"):
        col = next((c for c in cols if names[c] == sort["displayName"]), None)
        if col:
            table.sort(key=lambda r: r.get(col, 0), reverse=sort.get("desc", False))
    line = min(px(24, "y"), inner[3] / (len(table) + 1))
    cw = inner[2] / len(cols)
    top = inner[1] + inner[3]
    for j, c in enumerate(cols):
        fig.text(inner[0] + j * cw + (0 if j == 0 else cw - px(6)), top - line / 2, names[c],
                 ha="left" if j == 0 else "right", va="center", fontsize=9, weight="bold", color="#6E9FFF")
    for i, r in enumerate(table):
        y = top - (i + 1.5) * line
        if y < inner[1]:
            break
        if i % 2 == 0:
            fig.add_artist(rect(fig, inner[0], y - line / 2, inner[2], line, "#1e2126"))
        for j, c in enumerate(cols):
            v = r.get(c)
            text = v if isinstance(v, str) else fmt_value(v if v is not None else 0.0, "short", decimals)
            fig.text(inner[0] + j * cw + (px(2) if j == 0 else cw - px(6)), y, text[:24],
                     ha="left" if j == 0 else "right", va="center", fontsize=9)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--dashboard", default=os.path.join(HERE, "graphql-cache.json"))
    ap.add_argument("--prometheus", required=True, help="base URL, e.g. http://127.0.0.1:9090")
    ap.add_argument("--start", type=float, required=True)
    ap.add_argument("--end", type=float, required=True)
    ap.add_argument("--scrape-seconds", type=float, default=15)
    ap.add_argument("--out", default="dashboard.png")
    args = ap.parse_args()
    with open(args.dashboard) as f:
        dashboard = json.load(f)
    errors = render(dashboard, args.prometheus, args.start, args.end, args.out, scrape_seconds=args.scrape_seconds)
    print(f"wrote {args.out}")
    for e in errors:
        print(f"query failed: {e}")
    return 1 if errors else 0


if __name__ == "__main__":
    sys.exit(main())
