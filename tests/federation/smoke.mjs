// Smoke test of the federation topology, no Envoy: starts subgraphs.mjs, then
// each gateway in turn (apollo, hive) pointed straight at the subgraphs, sends a
// few client queries, asserts the answers, and prints the answers, the subgraph
// counts and every request each gateway sent to each subgraph. The `_entities`
// requests are saved to samples/<gateway>-<subgraph>-<n>.json (the host's port
// replaced by <port>, so a re-run gives the same files).
//
//   node tests/federation/smoke.mjs        (after npm ci --prefix tests/federation)
//
// Everything binds 127.0.0.1 on ports the OS picks; the whole run is bounded at
// 60 s; every child is stopped with SIGTERM (and must exit 0) before the end.
import { spawn } from "node:child_process";
import { existsSync, mkdirSync, readdirSync, rmSync, writeFileSync } from "node:fs";
import { dirname, join } from "node:path";
import { fileURLToPath } from "node:url";
import assert from "node:assert/strict";
import { products, reviews, users, FAILING_PRODUCT_ID } from "./schemas.mjs";

const HERE = dirname(fileURLToPath(import.meta.url));
const SAMPLES = join(HERE, "samples");
const DEADLINE_MS = 60_000;
const READY_MS = 20_000;

if (!existsSync(join(HERE, "node_modules"))) {
  console.error("smoke.mjs: run `npm ci --prefix tests/federation` first");
  process.exit(2);
}

const children = new Set();
process.on("exit", () => {
  for (const c of children) if (c.exitCode === null && c.signalCode === null) c.kill("SIGKILL");
});
const deadline = setTimeout(() => {
  console.error(`smoke.mjs: not done after ${DEADLINE_MS / 1000} s`);
  process.exit(1);
}, DEADLINE_MS);

// Starts `node <script> [args]` with env, resolves with the payload of its
// "<tag> ready <payload>" line.
function start(tag, script, args, env) {
  const child = spawn(process.execPath, [join(HERE, script), ...args], {
    cwd: HERE,
    env: { PATH: process.env.PATH, HOME: process.env.HOME, ...env },
    stdio: ["ignore", "pipe", "pipe"],
  });
  children.add(child);
  let out = "";
  let err = "";
  child.stderr.on("data", (d) => {
    err += d;
  });
  const ready = new Promise((resolve, reject) => {
    const timer = setTimeout(
      () => reject(new Error(`${tag} not ready after ${READY_MS} ms; stderr: ${err}`)),
      READY_MS,
    );
    child.stdout.on("data", (d) => {
      out += d;
      const m = new RegExp(`^${tag} ready (.*)$`, "m").exec(out);
      if (m) {
        clearTimeout(timer);
        resolve(m[1]);
      }
    });
    child.once("exit", (code, sig) => {
      clearTimeout(timer);
      reject(new Error(`${tag} exited (${code ?? sig}) before ready; stderr: ${err}`));
    });
  });
  const stop = () =>
    new Promise((resolve, reject) => {
      if (child.exitCode !== null || child.signalCode !== null) {
        reject(new Error(`${tag} had already exited (${child.exitCode ?? child.signalCode})`));
        return;
      }
      const t = setTimeout(() => reject(new Error(`${tag} did not exit on SIGTERM`)), 5000);
      child.once("exit", (code, sig) => {
        clearTimeout(t);
        children.delete(child);
        if (code === 0) resolve();
        else reject(new Error(`${tag} exited ${code ?? sig} on SIGTERM; stderr: ${err}`));
      });
      child.kill("SIGTERM");
    });
  return { ready, stop, stderr: () => err };
}

async function post(url, body, headers = {}) {
  const res = await fetch(url, {
    method: "POST",
    headers: { "content-type": "application/json", ...headers },
    body: JSON.stringify(body),
    signal: AbortSignal.timeout(10_000),
  });
  const text = await res.text();
  try {
    return { status: res.status, json: JSON.parse(text) };
  } catch {
    throw new Error(`${url} answered ${res.status} with non-JSON: ${text.slice(0, 300)}`);
  }
}
const getJson = async (url) => (await fetch(url, { signal: AbortSignal.timeout(5000) })).json();

// ---- expected answers, computed from the same data the subgraphs serve ----
const userById = new Map(users.map((u) => [u.id, u]));
const productById = new Map(products.map((p) => [p.id, p]));
const reviewById = new Map(reviews.map((r) => [r.id, r]));
const reviewsOf = (pid) => reviews.filter((r) => r.productId === pid);

const PAGE = `query ProductsPage($first: Int, $offset: Int) {
  products(first: $first, offset: $offset) {
    id name price
    reviews { id body rating author { id name } }
  }
}`;
const expectPage = (first, offset) => ({
  products: products.slice(offset, offset + first).map((p) => ({
    id: p.id,
    name: p.name,
    price: p.price,
    reviews: reviewsOf(p.id).map((r) => ({
      id: r.id,
      body: r.body,
      rating: r.rating,
      author: { id: r.authorId, name: userById.get(r.authorId).name },
    })),
  })),
});

const AUTHORS = `query ReviewAuthors {
  products(first: 6) { id reviews { id author { id name email } } }
}`;
const expectAuthors = (bearer) => ({
  products: products.slice(0, 6).map((p) => ({
    id: p.id,
    reviews: reviewsOf(p.id).map((r) => {
      const u = userById.get(r.authorId);
      return {
        id: r.id,
        author: { id: u.id, name: u.name, email: bearer === u.id ? u.email : null },
      };
    }),
  })),
});

// Reviews of products 11, 13 and 14: the three Products go to the products
// subgraph in one _entities fetch, and the one at index 1 (13) fails there.
const P13_REVIEWS = ["11-0", "13-0", "14-1"];
const P13 = `query ReviewedProducts {
  a: review(id: "${P13_REVIEWS[0]}") { id rating product { id name price } }
  b: review(id: "${P13_REVIEWS[1]}") { id rating product { id name price } }
  c: review(id: "${P13_REVIEWS[2]}") { id rating product { id name price } }
}`;
const reviewWithProduct = (rid) => {
  const r = reviewById.get(rid);
  const p = productById.get(r.productId);
  return { id: r.id, rating: r.rating, product: { id: p.id, name: p.name, price: p.price } };
};

const ALIASES = `query Aliases {
  a: product(id: "2") { name reviews { id } }
  b: product(id: "3") { name reviews { id rating } }
  c: product(id: "2") { price reviews { body } }
}`;
const expectAliases = () => {
  const [p2, p3] = [productById.get("2"), productById.get("3")];
  return {
    a: { name: p2.name, reviews: reviewsOf("2").map((r) => ({ id: r.id })) },
    b: { name: p3.name, reviews: reviewsOf("3").map((r) => ({ id: r.id, rating: r.rating })) },
    c: { price: p2.price, reviews: reviewsOf("2").map((r) => ({ body: r.body })) },
  };
};

const QUERIES = [
  {
    label: "page-0-6",
    what: "a page of products (0..6) with their reviews and the reviews' authors",
    body: { query: PAGE, operationName: "ProductsPage", variables: { first: 6, offset: 0 } },
    check: (r) => assert.deepEqual(r, { data: expectPage(6, 0) }),
  },
  {
    label: "page-3-6",
    what: "an overlapping page (3..9): products 4-6 again",
    body: { query: PAGE, operationName: "ProductsPage", variables: { first: 6, offset: 3 } },
    check: (r) => assert.deepEqual(r, { data: expectPage(6, 3) }),
  },
  {
    label: "product-13",
    what: `reviews of products 11, ${FAILING_PRODUCT_ID}, 14: Product ${FAILING_PRODUCT_ID} fails in the products subgraph`,
    body: { query: P13, operationName: "ReviewedProducts" },
    check: (r) => {
      assert.deepEqual(r.data.a, reviewWithProduct(P13_REVIEWS[0]));
      assert.equal(r.data.b, null, "the review whose product failed is null");
      assert.deepEqual(r.data.c, reviewWithProduct(P13_REVIEWS[2]));
      assert.ok(Array.isArray(r.errors) && r.errors.length >= 1, "errors present");
      assert.ok(
        r.errors.some((e) => /Product 13 cannot be resolved/.test(e.message)),
        `an error names product 13: ${JSON.stringify(r.errors)}`,
      );
    },
  },
  {
    label: "aliases",
    what: "two products under aliases with different selections, and one again: separate entity fetches to reviews",
    body: { query: ALIASES, operationName: "Aliases" },
    check: (r) => assert.deepEqual(r, { data: expectAliases() }),
  },
  {
    label: "authors-bearer-7",
    what: "authors with email, authorization: Bearer 7 (only user 7's email)",
    headers: { authorization: "Bearer 7" },
    body: { query: AUTHORS, operationName: "ReviewAuthors" },
    check: (r) => {
      assert.deepEqual(r, { data: expectAuthors("7") });
      const emails = r.data.products.flatMap((p) => p.reviews.map((x) => x.author.email));
      assert.deepEqual(emails.filter(Boolean), ["user7@example.com"]);
    },
  },
  {
    label: "authors-anonymous",
    what: "the same without authorization (every email null)",
    body: { query: AUTHORS, operationName: "ReviewAuthors" },
    check: (r) => assert.deepEqual(r, { data: expectAuthors(null) }),
  },
];

// ---- run ----
const t0 = Date.now();
const sg = start("subgraphs", "subgraphs.mjs", [
  "--port-products", "0", "--port-reviews", "0", "--port-users", "0",
]);
const urls = JSON.parse(await sg.ready);
const base = Object.fromEntries(Object.entries(urls).map(([k, u]) => [k, u.replace(/\/graphql$/, "")]));
console.log(`subgraphs: ${JSON.stringify(urls)}`);

mkdirSync(SAMPLES, { recursive: true });
for (const f of readdirSync(SAMPLES)) if (f.endsWith(".json")) rmSync(join(SAMPLES, f));

const hostPort = /^(127\.0\.0\.1|localhost):\d+$/;
const normalise = (entry) => {
  const otherHeaders = { ...entry.otherHeaders };
  if (hostPort.test(otherHeaders.host ?? "")) otherHeaders.host = otherHeaders.host.replace(/\d+$/, "<port>");
  // Hive Gateway sends a fresh x-request-id (a UUID) with every subgraph request.
  if (otherHeaders["x-request-id"]) otherHeaders["x-request-id"] = "<uuid>";
  return { ...entry, otherHeaders };
};
const isEntities = (body) =>
  (Array.isArray(body) ? body : [body]).some((b) => typeof b?.query === "string" && b.query.includes("_entities"));

const GATEWAYS = [
  { name: "apollo", script: "apollo-gateway.mjs" },
  { name: "hive", script: "hive-gateway.mjs" },
];
let failures = 0;
let passes = 0;

for (const gw of GATEWAYS) {
  const g = start(`${gw.name}-gateway`, gw.script, [], {
    PORT: "0",
    PRODUCTS_URL: urls.products,
    REVIEWS_URL: urls.reviews,
    USERS_URL: urls.users,
    APOLLO_TELEMETRY_DISABLED: "1",
  });
  const gwUrl = await g.ready;
  console.log(`\n===== ${gw.name} gateway at ${gwUrl}`);
  for (const name of Object.keys(base)) {
    await post(`${base[name]}/counts/reset`, {});
    await post(`${base[name]}/requests/reset`, {});
  }
  const sampleN = { products: 0, reviews: 0, users: 0 };

  for (const q of QUERIES) {
    const { status, json } = await post(gwUrl, q.body, q.headers);
    // Apollo Server adds stack traces outside production; not part of the answer.
    const shown = JSON.parse(JSON.stringify(json, (k, v) => (k === "stacktrace" ? undefined : v)));
    console.log(`\n-- ${gw.name} ${q.label}: ${q.what}${q.headers ? ` ${JSON.stringify(q.headers)}` : ""}`);
    console.log(`answer (HTTP ${status}): ${JSON.stringify(shown)}`);
    try {
      q.check(json);
      passes += 1;
      console.log("ok");
    } catch (e) {
      failures += 1;
      console.log(`FAIL ${gw.name} ${q.label}: ${e.message}`);
    }
    for (const name of Object.keys(base)) {
      const seen = await getJson(`${base[name]}/requests`);
      await post(`${base[name]}/requests/reset`, {});
      // Parallel fetches arrive in any order: sort by body so the sample files'
      // numbering is the same on every run.
      const entries = seen
        .map(({ seq, ...entry }) => normalise(entry))
        .sort((x, y) => JSON.stringify(x.body).localeCompare(JSON.stringify(y.body)));
      for (const e of entries) {
        const kind = isEntities(e.body) ? "_entities" : "root";
        console.log(
          `  -> ${name} ${e.method} ${kind} auth=${e.headers.authorization ?? "-"} body=${JSON.stringify(e.body)}`,
        );
        if (kind === "_entities") {
          sampleN[name] += 1;
          const file = join(SAMPLES, `${gw.name}-${name}-${sampleN[name]}.json`);
          writeFileSync(
            file,
            JSON.stringify({ gateway: gw.name, subgraph: name, clientQuery: q.label, ...e }, null, 2) + "\n",
          );
        }
      }
    }
  }
  console.log(`\n${gw.name} subgraph counts after ${QUERIES.length} client queries:`);
  for (const name of Object.keys(base)) console.log(`  ${JSON.stringify(await getJson(`${base[name]}/counts`))}`);
  await g.stop();
  console.log(`${gw.name} gateway stopped cleanly`);
}

await sg.stop();
clearTimeout(deadline);
console.log(`\nsamples in ${SAMPLES}; ${((Date.now() - t0) / 1000).toFixed(1)} s`);
console.log(`smoke: ${passes} passed, ${failures} failed`);
process.exit(failures ? 1 : 0);
