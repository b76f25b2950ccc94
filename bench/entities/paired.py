#!/usr/bin/env python3
"""`make bench-entities-paired`: only bench-entities' side-by-side phase, client latency below
saturation of (c) entity caching on the subgraph hop against (a) no cache (main.paired_light:
both stacks up, loaded in alternating slices, every latency kept). Writes
bench/results/entities-paired.{json,md}. ENTITIES_PAIRED_SLICES (32) and ENTITIES_PAIRED_SLICE_S
(10) as in bench-entities; about 2 x slices x slice seconds, plus two minutes of warm-up.
"""
import atexit
import json
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
    result = bench_entities.paired_light(str(bodies_file))
    result["settings"].update(source_ms=bench_entities.SOURCE_MS, entity_config=bench_entities.ENTITY_CONFIG,
                              cache_bytes=bench_entities.CACHE_BYTES)
    text = "\n".join(["# make bench-entities-paired", "",
                      f"Data source {bench_entities.SOURCE_MS} ms; the same phase ends `make bench-entities`.", ""]
                     + bench_entities.paired_lines(result)
                     + [f"- {bench_entities.paired_verdict(result)} (c) client p99 no higher than (a)"])
    bench_entities.RESULTS.mkdir(exist_ok=True)
    (bench_entities.RESULTS / "entities-paired.json").write_text(json.dumps(result, indent=1) + "\n")
    (bench_entities.RESULTS / "entities-paired.md").write_text(text + "\n")
    print(text)


if __name__ == "__main__":
    main()
