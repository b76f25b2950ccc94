#!/usr/bin/env python3
"""`make what-if`: asks a running filter's what-if route what a candidate configuration would have
done with its recent traffic, and prints a table per operation.

  make what-if CANDIDATE='{"ttl_seconds": 60}'
  make what-if CANDIDATE='{"cache_bytes": 268435456}' WHAT_IF_URL=http://envoy:8082/graphql-cache/what-if
  make what-if CANDIDATE='{"vary_headers": ["authorization"]}'

WHAT_IF_URL defaults to the demo's internal listener; the token is PURGE_TOKEN (the purge API's),
the demo's by default. Standard library only.
"""
import json
import os
import sys
import urllib.error
import urllib.request

URL = os.environ.get("WHAT_IF_URL") or "http://127.0.0.1:8082/graphql-cache/what-if"
TOKEN = os.environ.get("PURGE_TOKEN") or "demo-purge-token-change-me"


def table(answer):
    rows = answer["operations"] + [answer["total"]]
    merges = "merged_keys" in answer["total"]
    head = "| operation | lookups | hit ratio now | hit ratio candidate | origin requests now | origin requests candidate |"
    out = [f"{answer['records']} records over {answer['seconds']} s; now {json.dumps(answer['now'])}, "
           f"candidate {json.dumps(answer['candidate'])}", "",
           head + (" keys merged | answering differently |" if merges else ""),
           "|---|---|---|---|---|---|" + ("---|---|" if merges else "")]
    for r in rows:
        h, o = r["hit_ratio"], r["origin_requests"]
        line = f"| {r['operation']} | {r['lookups']} | {h['now']:.3f} | {h['candidate']:.3f} | {o['now']} | {o['candidate']} |"
        if merges:
            m = r["merged_keys"]
            line += f" {m['keys']} | {m['answering_differently']} |"
        out.append(line)
    for label in ("becomes_cacheable", "stops_cacheable"):
        if answer[label]:
            out.append(f"\n{label.replace('_', ' ')}: {', '.join(answer[label])}")
    out += [""] + [f"note: {n}" for n in answer["notes"]]
    return "\n".join(out)


def main():
    candidate = os.environ.get("CANDIDATE") or (sys.argv[1] if len(sys.argv) > 1 else "")
    if not candidate:
        sys.exit("give CANDIDATE, a JSON object of cache_bytes, ttl_seconds, rules, vary_headers and/or entities")
    req = urllib.request.Request(URL, data=candidate.encode(), method="POST", headers={
        "authorization": f"Bearer {TOKEN}", "content-type": "application/json"})
    try:
        with urllib.request.urlopen(req, timeout=30) as r:
            answer = json.loads(r.read())
    except urllib.error.HTTPError as e:
        sys.exit(f"{URL} answered {e.code}: {e.read().decode(errors='replace')}")
    except OSError as e:
        sys.exit(f"{URL}: {e}")
    print(table(answer))


if __name__ == "__main__":
    main()
