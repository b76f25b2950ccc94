// Three federation subgraphs (products, reviews, users), each its own HTTP
// server on 127.0.0.1, built with @apollo/subgraph's buildSubgraphSchema and
// served by a small node:http handler (graphql-js execute, no framework).
//
//   node subgraphs.mjs --port-products P1 --port-reviews P2 --port-users P3
//
// A port of 0 picks a free one. When all three listen, prints ONE line:
//   subgraphs ready {"products":"http://127.0.0.1:P1/graphql","reviews":...,"users":...}
// and runs until SIGTERM/SIGINT (then closes and exits 0).
//
// Endpoints of each subgraph:
//   POST /graphql (or /, or <any prefix>/graphql)   GraphQL over HTTP (JSON body; an array body is a batch);
//                          GET /graphql?query=... works too
//   GET  /counts           {"subgraph","requests","entitiesRequests","entitiesFields",
//                           "representations","resolved":{"<Type>":n},"serviceRequests"}
//   POST /counts/reset     zero the counts
//   GET  /requests[?since=seq]  the last 200 GraphQL requests: {seq,subgraph,method,path,
//                           headers:{authorization,content-type},otherHeaders,body}
//   POST /requests/reset   empty that ring
//
// Behaviour the cache tests rely on:
//   - users: User.email is private, returned only when the request's
//     authorization header is exactly "Bearer <that user's id>", else null.
//   - products: __resolveReference of Product "13" throws, so _entities answers
//     null at that index with an error whose path is ["_entities", i].
//   - products: Mutation.updateProduct(id, name) renames a product for the rest
//     of this process's life (nothing else changes state).
import http from "node:http";
import zlib from "node:zlib";
import { parse, graphql, GraphQLError, Kind } from "graphql";
import { buildSubgraphSchema } from "@apollo/subgraph";
import {
  SDL,
  SUBGRAPHS,
  FAILING_PRODUCT_ID,
  products,
  reviews,
  users,
  searchResults,
} from "./schemas.mjs";

const RING = 200;

function parseArgs(argv) {
  const ports = {};
  for (let i = 0; i < argv.length; i += 2) {
    const m = /^--port-(products|reviews|users)$/.exec(argv[i]);
    const v = Number(argv[i + 1]);
    if (!m || !Number.isInteger(v) || v < 0 || v > 65535) {
      process.stderr.write(
        "usage: node subgraphs.mjs --port-products P1 --port-reviews P2 --port-users P3\n",
      );
      process.exit(2);
    }
    ports[m[1]] = v;
  }
  for (const name of SUBGRAPHS) {
    if (ports[name] === undefined) {
      process.stderr.write(`subgraphs.mjs: missing --port-${name}\n`);
      process.exit(2);
    }
  }
  return ports;
}

function newCounts(name) {
  return {
    subgraph: name,
    requests: 0,
    entitiesRequests: 0,
    entitiesFields: 0,
    representations: 0,
    resolved: {},
    serviceRequests: 0,
  };
}

const byId = (list) => new Map(list.map((x) => [x.id, x]));
const productsById = byId(products);
const usersById = byId(users);
const reviewsById = byId(reviews);
const reviewsByProduct = new Map();
for (const r of reviews) {
  if (!reviewsByProduct.has(r.productId)) reviewsByProduct.set(r.productId, []);
  reviewsByProduct.get(r.productId).push(r);
}
const page = (list, first, offset) =>
  list.slice(Math.max(0, offset ?? 0), Math.max(0, offset ?? 0) + Math.max(0, first ?? 10));

// `resolved(type)` counts one representation resolved by __resolveReference.
function resolversFor(name, resolved) {
  const reviewOut = (r) => r && { ...r, author: { id: r.authorId }, product: { id: r.productId } };
  switch (name) {
    case "products":
      return {
        Query: {
          products: (_, { first, offset }) => page(products, first, offset),
          product: (_, { id }) => productsById.get(id) ?? null,
          search: (_, { term, first, offset }) =>
            page(searchResults(term), first, offset).map((id) => productsById.get(id)),
        },
        Mutation: {
          // In place: every query of this process (pages, product, _entities) sees the new name.
          updateProduct: (_, { id, name }) => {
            const p = productsById.get(id);
            if (p) p.name = name;
            return p ?? null;
          },
        },
        Product: {
          // async: @apollo/subgraph maps representations to results, so a
          // synchronous throw would fail the whole _entities field; a rejected
          // promise fails only its index (null there, error path ["_entities", i]).
          async __resolveReference(ref) {
            resolved("Product");
            if (ref.id === FAILING_PRODUCT_ID) {
              throw new GraphQLError(`Product ${ref.id} cannot be resolved (test fault)`, {
                extensions: { code: "TEST_ENTITY_FAILURE" },
              });
            }
            return productsById.get(ref.id) ?? null;
          },
        },
      };
    case "reviews":
      return {
        Query: {
          reviews: (_, { first, offset }) => page(reviews, first, offset).map(reviewOut),
          review: (_, { id }) => reviewOut(reviewsById.get(id)) ?? null,
        },
        Review: {
          __resolveReference(ref) {
            resolved("Review");
            return reviewOut(reviewsById.get(ref.id)) ?? null;
          },
        },
        Product: {
          __resolveReference(ref) {
            resolved("Product");
            return { id: ref.id };
          },
          reviews: (p, { first }) =>
            (reviewsByProduct.get(p.id) ?? [])
              .slice(0, first ?? undefined)
              .map(reviewOut),
        },
      };
    case "users":
      return {
        Query: {
          users: (_, { first, offset }) => page(users, first, offset),
          user: (_, { id }) => usersById.get(id) ?? null,
        },
        User: {
          __resolveReference(ref) {
            resolved("User");
            return usersById.get(ref.id) ?? null;
          },
          email: (u, _, ctx) => (ctx.authorization === `Bearer ${u.id}` ? u.email : null),
        },
      };
    default:
      throw new Error(name);
  }
}

// Top-level fields named _entities / _service in the selected operation.
function rootFieldNames(document, operationName) {
  const ops = document.definitions.filter((d) => d.kind === Kind.OPERATION_DEFINITION);
  const op = operationName ? ops.find((o) => o.name?.value === operationName) : ops[0];
  const names = [];
  const walk = (sel) => {
    for (const s of sel.selections) {
      if (s.kind === Kind.FIELD) names.push(s.name.value);
      else if (s.kind === Kind.INLINE_FRAGMENT) walk(s.selectionSet);
    }
  };
  if (op) walk(op.selectionSet);
  return names;
}

function readBody(req) {
  return new Promise((resolve, reject) => {
    const chunks = [];
    req.on("data", (c) => chunks.push(c));
    req.on("end", () => {
      let buf = Buffer.concat(chunks);
      const enc = (req.headers["content-encoding"] ?? "").toLowerCase();
      try {
        if (enc === "gzip") buf = zlib.gunzipSync(buf);
        else if (enc === "deflate") buf = zlib.inflateSync(buf);
        else if (enc === "br") buf = zlib.brotliDecompressSync(buf);
      } catch (e) {
        reject(e);
        return;
      }
      resolve(buf.toString("utf8"));
    });
    req.on("error", reject);
  });
}

// SUBGRAPHS_CACHE_CONTROL (unset by default): a cache-control header on every GraphQL answer, as a
// subgraph turning @cacheControl hints into headers sends (bench/entities sets "public, max-age=60",
// from which Apollo Gateway computes a cacheable answer instead of no-store).
const CACHE_CONTROL = process.env.SUBGRAPHS_CACHE_CONTROL || null;

// SUBGRAPHS_DELAY_MS (0 by default): every GraphQL answer waits this long, so that requests a test
// sends at once are all in flight together (tests/federation.rs, coalescing of `_entities` batches),
// and as a subgraph reading its database once per request (one batched query) does
// (bench/entities: ENTITIES_SOURCE_MS). The data stays in memory: the wait is latency, not CPU.
const DELAY_MS = Number(process.env.SUBGRAPHS_DELAY_MS || 0);
const delay = () => (DELAY_MS > 0 ? new Promise((r) => setTimeout(r, DELAY_MS)) : null);

function send(res, status, value, graphqlAnswer = false) {
  const body = JSON.stringify(value);
  const headers = {
    "content-type": "application/json; charset=utf-8",
    "content-length": Buffer.byteLength(body),
  };
  if (graphqlAnswer && CACHE_CONTROL && status === 200) headers["cache-control"] = CACHE_CONTROL;
  res.writeHead(status, headers);
  res.end(body);
}

function startSubgraph(name, port) {
  let counts = newCounts(name);
  const resolved = (type) => {
    counts.resolved[type] = (counts.resolved[type] ?? 0) + 1;
    counts.representations += 1;
  };
  const schema = buildSubgraphSchema({
    typeDefs: parse(SDL[name]),
    resolvers: resolversFor(name, resolved),
  });
  let ring = [];
  let seq = 0;

  async function executeOne(payload, req) {
    if (!payload || typeof payload.query !== "string") {
      return { errors: [{ message: "request has no query" }] };
    }
    counts.requests += 1;
    try {
      const names = rootFieldNames(parse(payload.query), payload.operationName);
      const entities = names.filter((n) => n === "_entities").length;
      if (entities > 0) {
        counts.entitiesRequests += 1;
        counts.entitiesFields += entities;
      }
      if (names.includes("_service")) counts.serviceRequests += 1;
    } catch {
      // graphql() below reports the syntax error
    }
    return graphql({
      schema,
      source: payload.query,
      variableValues: payload.variables ?? undefined,
      operationName: payload.operationName ?? undefined,
      contextValue: { authorization: req.headers.authorization ?? null },
    });
  }

  const server = http.createServer(async (req, res) => {
    try {
      const url = new URL(req.url, "http://127.0.0.1");
      const path = url.pathname;
      if (path === "/counts" && req.method === "GET") return send(res, 200, counts);
      if (path === "/counts/reset" && req.method === "POST") {
        counts = newCounts(name);
        return send(res, 200, counts);
      }
      if (path === "/requests" && req.method === "GET") {
        const since = Number(url.searchParams.get("since") ?? 0);
        return send(res, 200, ring.filter((e) => e.seq > since));
      }
      if (path === "/requests/reset" && req.method === "POST") {
        ring = [];
        return send(res, 200, { ok: true, seq });
      }
      // Any prefix before /graphql: one Envoy listener routes to each subgraph by path prefix.
      if (!path.endsWith("/graphql") && path !== "/") return send(res, 404, { error: "not found" });

      let payload;
      let raw = null;
      if (req.method === "POST") {
        raw = await readBody(req);
        try {
          payload = JSON.parse(raw);
        } catch {
          payload = undefined;
        }
      } else if (req.method === "GET") {
        const p = url.searchParams;
        let variables = null;
        try {
          variables = p.get("variables") ? JSON.parse(p.get("variables")) : null;
        } catch {
          variables = null;
        }
        payload = {
          query: p.get("query"),
          operationName: p.get("operationName"),
          variables,
        };
      } else {
        return send(res, 405, { error: "method not allowed" });
      }

      const { authorization, "content-type": contentType, ...otherHeaders } = req.headers;
      seq += 1;
      ring.push({
        seq,
        subgraph: name,
        method: req.method,
        path: req.url,
        headers: { authorization: authorization ?? null, "content-type": contentType ?? null },
        otherHeaders,
        body: payload === undefined ? raw : payload,
      });
      if (ring.length > RING) ring.shift();

      if (payload === undefined || payload === null || typeof payload !== "object") {
        return send(res, 400, { errors: [{ message: "body is not a JSON object" }] });
      }
      await delay();
      if (Array.isArray(payload)) {
        const out = [];
        for (const p of payload) out.push(await executeOne(p, req));
        return send(res, 200, out, true);
      }
      return send(res, 200, await executeOne(payload, req), true);
    } catch (e) {
      if (!res.headersSent) send(res, 500, { errors: [{ message: String(e?.message ?? e) }] });
      else res.destroy();
    }
  });
  server.keepAliveTimeout = 5000;
  return new Promise((resolve, reject) => {
    server.once("error", reject);
    server.listen(port, "127.0.0.1", () => resolve(server));
  });
}

const ports = parseArgs(process.argv.slice(2));
const servers = {};
try {
  for (const name of SUBGRAPHS) servers[name] = await startSubgraph(name, ports[name]);
} catch (e) {
  process.stderr.write(`subgraphs.mjs: ${e.message}\n`);
  process.exit(1);
}
const urls = Object.fromEntries(
  SUBGRAPHS.map((n) => [n, `http://127.0.0.1:${servers[n].address().port}/graphql`]),
);
process.stdout.write(`subgraphs ready ${JSON.stringify(urls)}\n`);

let stopping = false;
function stop() {
  if (stopping) return;
  stopping = true;
  for (const s of Object.values(servers)) {
    s.close();
    s.closeAllConnections();
  }
  setTimeout(() => process.exit(0), 50).unref();
}
process.on("SIGTERM", stop);
process.on("SIGINT", stop);
