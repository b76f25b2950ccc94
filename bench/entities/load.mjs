// The client load of `make bench-entities`: autocannon (pinned in bench/gateway/package-lock.json)
// driven through its API, every request taking the next body of one shared list, so the gateway
// sees the list's sequence whatever the connection count (autocannon's own `requests` list would
// send each connection through the same bodies in step, which a whole-response cache would mostly
// answer from what the neighbouring connection just fetched).
//
//   node load.mjs --url http://127.0.0.1:N/ --bodies FILE --start I (--amount N | --duration S)
//                 --connections C [--raw OUT]
//
// With --raw, every answered request's latency (ms) is also written to OUT, a JSON array.
// FILE holds one JSON request body a line. Prints one JSON line: requests, non-2xx, errors, the
// duration, the index of the next unsent body, and latency percentiles (ms, from every response's
// own time, not autocannon's whole-millisecond histogram).
import { createRequire } from "node:module";
import { readFileSync, writeFileSync } from "node:fs";
import { fileURLToPath } from "node:url";
import path from "node:path";

const here = path.dirname(fileURLToPath(import.meta.url));
const require = createRequire(path.join(here, "../gateway/package.json"));
const autocannon = require("autocannon");

const args = {};
for (let i = 2; i < process.argv.length; i += 2) args[process.argv[i].replace(/^--/, "")] = process.argv[i + 1];
const bodies = readFileSync(args.bodies, "utf8").split("\n").filter(Boolean);
let next = Number(args.start ?? 0);
const first = next;
const latencies = [];

const opts = {
  url: args.url,
  connections: Number(args.connections ?? 8),
  method: "POST",
  headers: { "content-type": "application/json" },
  timeout: 15,
  requests: [
    {
      setupRequest(req) {
        req.body = bodies[next % bodies.length];
        next += 1;
        return req;
      },
    },
  ],
};
if (args.amount) opts.amount = Number(args.amount);
else opts.duration = Number(args.duration ?? 20);

const instance = autocannon(opts, (err, result) => {
  if (err) {
    process.stderr.write(`load.mjs: ${err.message}\n`);
    process.exit(1);
  }
  if (args.raw) writeFileSync(args.raw, JSON.stringify(latencies));
  latencies.sort((a, b) => a - b);
  const q = (p) => (latencies.length ? latencies[Math.min(latencies.length - 1, Math.floor(p * latencies.length))] : null);
  const mean = latencies.reduce((a, b) => a + b, 0) / Math.max(latencies.length, 1);
  process.stdout.write(
    JSON.stringify({
      requests: latencies.length,
      non2xx: result.non2xx,
      errors: result.errors,
      timeouts: result.timeouts,
      duration_s: result.duration,
      first_index: first,
      next_index: next,
      wrapped: next - first > bodies.length,
      latency_ms: { p50: q(0.5), p90: q(0.9), p99: q(0.99), p999: q(0.999), max: latencies.at(-1) ?? null, mean },
    }) + "\n",
  );
});
instance.on("response", (_client, status, _bytes, responseTime) => {
  if (status >= 200 && status < 300) latencies.push(responseTime);
});
