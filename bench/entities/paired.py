#!/usr/bin/env python3
"""`make bench-entities-paired`: only bench-entities' side-by-side phase, client latency below
saturation of (c) entity caching on the subgraph hop against (a) no cache (main.paired_light:
both stacks up, loaded in alternating slices, every latency kept, each stack's CPU in its own
slices). Writes bench/results/entities-paired.{json,md}. ENTITIES_PAIRED_SLICES (32) and
ENTITIES_PAIRED_SLICE_S (10) as in bench-entities; about 2 x slices x slice seconds, plus two
minutes of warm-up.

ENTITIES_PAIRED_STACKS=a,e (`make bench-entities-hop-floor`) measures (e), the same Envoy hop with
no filter, against (a) the same way: what the hop alone does to the client's latency and to the
machine's CPU, the floor under any filter on that hop. Writes entities-paired-a-e.{json,md}.
"""
import atexit
import json
import os
import pathlib
import sys
import tempfile

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parent))
import main as bench_entities  # noqa: E402


def main():
    atexit.register(bench_entities.remove_dirs)
    atexit.register(bench_entities.cleanup)
    _, bodies = bench_entities.workload()
    work = pathlib.Path(tempfile.mkdtemp(prefix="graphql-cache-paired-"))
    bench_entities.DIRS.append(work)
    bodies_file = work / "bodies.jsonl"
    bodies_file.write_text("\n".join(bodies) + "\n")
    stacks = tuple(os.environ.get("ENTITIES_PAIRED_STACKS", "a,c").split(","))
    known = {n for n, *_ in bench_entities.CONFIGS} - {"b", "d"}
    if len(stacks) != 2 or not set(stacks) <= known or stacks[0] == stacks[1]:
        sys.exit(f"ENTITIES_PAIRED_STACKS: two different names of {sorted(known)}, e.g. a,c (got {stacks})")
    result = bench_entities.paired_light(str(bodies_file), stacks=stacks)
    result["settings"].update(source_ms=bench_entities.SOURCE_MS, entity_config=bench_entities.ENTITY_CONFIG,
                              cache_bytes=bench_entities.CACHE_BYTES)
    name = "entities-paired" if stacks == ("a", "c") else f"entities-paired-{stacks[0]}-{stacks[1]}"
    verdict = (f"- {bench_entities.paired_verdict(result)} (c) client p99 no higher than (a)" if stacks == ("a", "c")
               else f"- (not a target) ({stacks[1]}) over ({stacks[0]}): the lines above")
    text = "\n".join([f"# make bench-entities-paired ({stacks[0]} against {stacks[1]})", "",
                      f"{os.cpu_count()} CPUs; data source {bench_entities.SOURCE_MS} ms; the (a)-(c) phase also ends "
                      "`make bench-entities`.", ""]
                     + bench_entities.paired_lines(result) + [verdict])
    bench_entities.RESULTS.mkdir(exist_ok=True)
    (bench_entities.RESULTS / f"{name}.json").write_text(json.dumps(result, indent=1) + "\n")
    (bench_entities.RESULTS / f"{name}.md").write_text(text + "\n")
    print(text)


if __name__ == "__main__":
    main()
