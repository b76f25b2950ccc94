#!/usr/bin/env python3
"""Package the filter's .wasm as an OCI image that Istio's and Envoy Gateway's fetchers accept.

The image is the "compat" variant of the Wasm image specification (solo-io/wasm spec-compat.md), the
one format both fetchers read from an ordinary registry:

  - exactly one layer, media type application/vnd.oci.image.layer.v1.tar+gzip, a tar holding one
    file named plugin.wasm;
  - the manifest annotation module.wasm.image/variant=compat.

Written twice, from the same bytes: an OCI image layout directory (oci-layout, index.json,
blobs/sha256/...) and an oci-archive tar of that directory, both for `skopeo copy`. Everything is
deterministic: tar entries sorted, mtime 0, uid/gid 0, no user or group names, fixed modes; gzip
with mtime 0 and no file name; JSON with a fixed key order. The same .wasm gives the same manifest
digest on every run (with the same zlib: the compressed bytes depend on it; the uncompressed
layer digest, the config's diff_id, does not).

Standard library only. Usage:
  oci.py --wasm target/wasm32-wasip1/release/graphql_cache.wasm --out target/oci --tag 0.1.0
"""

import argparse
import gzip
import hashlib
import io
import json
import os
import shutil
import sys
import tarfile

LAYER_MEDIA_TYPE = "application/vnd.oci.image.layer.v1.tar+gzip"
CONFIG_MEDIA_TYPE = "application/vnd.oci.image.config.v1+json"
MANIFEST_MEDIA_TYPE = "application/vnd.oci.image.manifest.v1+json"
INDEX_MEDIA_TYPE = "application/vnd.oci.image.index.v1+json"
VARIANT_ANNOTATION = "module.wasm.image/variant"
REF_NAME_ANNOTATION = "org.opencontainers.image.ref.name"
PLUGIN_FILE = "plugin.wasm"
NAME = "graphql-cache"


def sha256_hex(data):
    return hashlib.sha256(data).hexdigest()


def canonical_json(obj):
    # Key order is the insertion order of the dicts below (fixed); no whitespace.
    return json.dumps(obj, separators=(",", ":"), ensure_ascii=True).encode()


def _tar_info(name, size=0, is_dir=False):
    info = tarfile.TarInfo(name)
    info.size = size
    info.mtime = 0
    info.uid = info.gid = 0
    info.uname = info.gname = ""
    if is_dir:
        info.type = tarfile.DIRTYPE
        info.mode = 0o755
    else:
        info.type = tarfile.REGTYPE
        info.mode = 0o644
    return info


def deterministic_tar(entries):
    """entries: list of (name, bytes or None for a directory); written sorted by name."""
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w", format=tarfile.USTAR_FORMAT) as tar:
        for name, data in sorted(entries, key=lambda e: e[0]):
            if data is None:
                tar.addfile(_tar_info(name, is_dir=True))
            else:
                tar.addfile(_tar_info(name, len(data)), io.BytesIO(data))
    return buf.getvalue()


def deterministic_gzip(data):
    buf = io.BytesIO()
    # filename="" and mtime=0: no name and no time in the header; level 9 fixed.
    with gzip.GzipFile(filename="", mode="wb", fileobj=buf, compresslevel=9, mtime=0) as gz:
        gz.write(data)
    return buf.getvalue()


def build(wasm, tag):
    """Returns (blobs {hex: bytes}, index bytes, summary dict)."""
    if not wasm.startswith(b"\0asm"):
        raise ValueError("not a WebAssembly binary (no \\0asm magic)")
    layer_tar = deterministic_tar([(PLUGIN_FILE, wasm)])
    layer = deterministic_gzip(layer_tar)
    config = canonical_json(
        {
            "architecture": "wasm",
            "os": "wasip1",
            "rootfs": {"type": "layers", "diff_ids": ["sha256:" + sha256_hex(layer_tar)]},
        }
    )
    manifest = canonical_json(
        {
            "schemaVersion": 2,
            "mediaType": MANIFEST_MEDIA_TYPE,
            "config": {
                "mediaType": CONFIG_MEDIA_TYPE,
                "digest": "sha256:" + sha256_hex(config),
                "size": len(config),
            },
            "layers": [
                {
                    "mediaType": LAYER_MEDIA_TYPE,
                    "digest": "sha256:" + sha256_hex(layer),
                    "size": len(layer),
                }
            ],
            "annotations": {VARIANT_ANNOTATION: "compat"},
        }
    )
    index = canonical_json(
        {
            "schemaVersion": 2,
            "mediaType": INDEX_MEDIA_TYPE,
            "manifests": [
                {
                    "mediaType": MANIFEST_MEDIA_TYPE,
                    "digest": "sha256:" + sha256_hex(manifest),
                    "size": len(manifest),
                    "annotations": {REF_NAME_ANNOTATION: tag},
                }
            ],
        }
    )
    blobs = {sha256_hex(b): b for b in (layer, config, manifest)}
    summary = {
        "wasm_sha256": sha256_hex(wasm),
        "manifest_digest": "sha256:" + sha256_hex(manifest),
        "layer_digest": "sha256:" + sha256_hex(layer),
        "tag": tag,
    }
    return blobs, index, summary


def layout_entries(blobs, index):
    entries = [
        ("oci-layout", canonical_json({"imageLayoutVersion": "1.0.0"})),
        ("index.json", index),
        ("blobs", None),
        ("blobs/sha256", None),
    ]
    entries += [("blobs/sha256/" + h, b) for h, b in blobs.items()]
    return entries


def write(out, wasm_path, tag):
    with open(wasm_path, "rb") as f:
        wasm = f.read()
    blobs, index, summary = build(wasm, tag)
    entries = layout_entries(blobs, index)
    layout = os.path.join(out, NAME)
    archive = os.path.join(out, NAME + ".oci.tar")
    # Start from an empty directory: a blob of an older build must not linger in the layout.
    shutil.rmtree(layout, ignore_errors=True)
    os.makedirs(layout)
    for name, data in entries:
        path = os.path.join(layout, name)
        if data is None:
            os.makedirs(path, exist_ok=True)
        else:
            with open(path, "wb") as f:
                f.write(data)
    with open(archive, "wb") as f:
        f.write(deterministic_tar(entries))
    summary["layout"] = layout
    summary["archive"] = archive
    return summary


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--wasm", required=True)
    p.add_argument("--out", required=True, help="directory for the layout and the archive")
    p.add_argument("--tag", required=True, help="tag recorded in index.json (skopeo's oci:DIR:TAG)")
    args = p.parse_args(argv)
    os.makedirs(args.out, exist_ok=True)
    s = write(args.out, args.wasm, args.tag)
    print("OCI image layout: %s (tag %s)" % (s["layout"], s["tag"]))
    print("oci-archive:      %s" % s["archive"])
    print("wasm sha256:      %s" % s["wasm_sha256"])
    print("manifest digest:  %s" % s["manifest_digest"])
    with open(os.path.join(args.out, NAME + ".digests.json"), "w") as f:
        json.dump(s, f, indent=2, sort_keys=True)
        f.write("\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
