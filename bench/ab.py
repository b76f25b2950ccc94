#!/usr/bin/env python3
"""`make bench-ab`: where a hit's time goes, by the A/B method. Each patch in bench/ab/ removes one
step of the hit path (a host call, or a piece of the filter's own work); the filter is built with
it (a git worktree of HEAD, under target/ab/) and measured against HEAD's build in the same
rounds (bench.py with BENCH_COMPARE, scenario ttl10). The patches exist only to be measured: none
is correct as a filter (no counter, a stale clock, no memo, no per-worker copy, no cluster in the
key; `no-body-work` and `floor-work-only` answer a canned hit once 1000 requests warmed the
cache, the second doing exactly wasm-floor's work in this module: what the module itself costs).

A patch that no longer applies to HEAD fails with its name: refresh it from the code it removes.
"""
import os
import pathlib
import re
import subprocess
import sys
import tempfile

ROOT = pathlib.Path(__file__).resolve().parent.parent
PATCHES = ROOT / "bench/ab"
TARGET = ROOT / "target/ab"
SCENARIO = os.environ.get("AB_SCENARIO", "ttl10")


def build_variant(patch):
    work = pathlib.Path(tempfile.mkdtemp(prefix="graphql-cache-ab-"))
    tree = work / "tree"
    subprocess.run(["git", "worktree", "add", "-q", "--detach", str(tree), "HEAD"], cwd=ROOT, check=True)
    try:
        applied = subprocess.run(["git", "apply", str(patch)], cwd=tree, capture_output=True, text=True)
        if applied.returncode != 0:
            sys.exit(f"{patch.name} no longer applies to HEAD: {applied.stderr.strip()}")
        env = dict(os.environ, CARGO_TARGET_DIR=str(TARGET))
        subprocess.run(["cargo", "build", "--quiet", "--release", "--target", "wasm32-wasip1", "-p", "graphql-cache"],
                       cwd=tree, env=env, check=True)
        out = work / f"{patch.stem}.wasm"
        out.write_bytes((TARGET / "wasm32-wasip1/release/graphql_cache.wasm").read_bytes())
        return out
    finally:
        subprocess.run(["git", "worktree", "remove", "--force", str(tree)], cwd=ROOT, check=False)


def measure(variant):
    # An even number of rounds: bench.py alternates the order, so each build goes first as often.
    env = dict(os.environ, BENCH_ONLY=SCENARIO, BENCH_COMPARE=str(variant))
    env.setdefault("BENCH_ROUNDS", "4")
    out = subprocess.run([str(ROOT / "bench/run.sh")], cwd=ROOT, env=env, capture_output=True, text=True, check=True).stdout
    # compare_report: "<scenario> <HEAD req/s> <variant req/s> <ratio>"
    line = next(l for l in out.splitlines() if re.match(rf"^{re.escape(SCENARIO)}\s+\d+\s+\d+\s+[\d.]+$", l))
    _, head, other, ratio = line.split()
    return float(head), float(other), float(ratio)


def main():
    names = sys.argv[1:]
    patches = [PATCHES / f"{n}.patch" for n in names] if names else sorted(PATCHES.glob("*.patch"))
    rows = []
    for patch in patches:
        print(f"building without: {patch.stem}", flush=True)
        variant = build_variant(patch)
        head, other, ratio = measure(variant)
        rows.append((patch.stem, head, other, ratio))
        print(f"  {SCENARIO}: HEAD {head:.0f} req/s, without {patch.stem} {other:.0f} req/s", flush=True)
    print()
    print(f"{'step removed':16s} {'HEAD':>8s} {'without':>8s} {'HEAD/without':>13s}  (below 1: the step costs that share)")
    # The ratio is the median of the rounds' paired ratios (both builds loaded at once).
    for name, head, other, ratio in rows:
        print(f"{name:16s} {head:8.0f} {other:8.0f} {ratio:13.2f}")


if __name__ == "__main__":
    main()
