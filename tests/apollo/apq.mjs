// Real GraphQL client (Apollo Client 3 + persisted-queries link) for the APQ
// integration test.
//
//   node tests/apollo/apq.mjs <graphql-url> <query-text> <count> [forge]
//
// Prints ONE line of JSON on stdout:
//   {"requests":[{"method","hashOnly","status","xCache","reason"}...],
//    "results":[...]}
// `requests` lists every HTTP request actually sent, in order. `hashOnly` is
// true when neither the URL nor the body carried a `query` text (only the
// persisted-query hash). `xCache` / `reason` are the `x-cache` and
// `x-cache-reason` response headers, or null when absent.
//
// Normal mode: runs the query <count> times, one after another, each with a NEW
// ApolloClient (so every run starts with a hash-only GET) and
// fetchPolicy 'no-cache'; `results` holds the `data` of each run. Exits 1 with
// a message on stderr if any run fails.
//
// forge mode: no Apollo. Sends one GET carrying `query=<query-text>` together
// with a sha256Hash of a DIFFERENT text, then a hash-only GET with that forged
// hash; `results` holds the two parsed JSON bodies (errors are expected there,
// so they do not make the exit status non-zero).
import { createHash } from "node:crypto";
import {
  ApolloClient,
  InMemoryCache,
  HttpLink,
  gql,
} from "@apollo/client/core/index.js";
import { createPersistedQueryLink } from "@apollo/client/link/persisted-queries/index.js";

const [uri, queryText, countArg, mode] = process.argv.slice(2);

function die(msg) {
  process.stderr.write(`apq.mjs: ${msg}\n`);
  process.exit(1);
}

if (!uri || queryText === undefined || countArg === undefined) {
  die("usage: node apq.mjs <graphql-url> <query-text> <count> [forge]");
}
const count = Number.parseInt(countArg, 10);
if (!Number.isInteger(count) || count < 1) die(`bad <count>: ${countArg}`);
if (mode !== undefined && mode !== "forge") die(`unknown mode: ${mode}`);

const sha256 = (q) => createHash("sha256").update(q).digest("hex");

const requests = [];

// Did this request carry a full query text (URL param or JSON body field)?
function carriesQuery(url, init) {
  const u = new URL(String(url));
  if (u.searchParams.has("query")) return true;
  const body = init && init.body;
  if (typeof body === "string" && body.length > 0) {
    try {
      const parsed = JSON.parse(body);
      const ops = Array.isArray(parsed) ? parsed : [parsed];
      return ops.some((op) => op && typeof op.query === "string");
    } catch {
      return /"query"\s*:/.test(body);
    }
  }
  return false;
}

async function recordingFetch(url, init = {}) {
  const method = String(
    init.method || (url instanceof Request ? url.method : "GET"),
  ).toUpperCase();
  const hashOnly = !carriesQuery(url instanceof Request ? url.url : url, init);
  const response = await fetch(url, init);
  requests.push({
    method,
    hashOnly,
    status: response.status,
    xCache: response.headers.get("x-cache"),
    reason: response.headers.get("x-cache-reason"),
  });
  return response;
}

async function runApollo() {
  const query = gql(queryText);
  const results = [];
  for (let i = 0; i < count; i++) {
    const client = new ApolloClient({
      cache: new InMemoryCache(),
      link: createPersistedQueryLink({
        sha256,
        useGETForHashedQueries: true,
      }).concat(new HttpLink({ uri, fetch: recordingFetch })),
    });
    let res;
    try {
      res = await client.query({ query, fetchPolicy: "no-cache" });
    } catch (e) {
      die(
        `run ${i + 1} failed: ${e && e.message ? e.message : e}\n` +
          `requests so far: ${JSON.stringify(requests)}`,
      );
    }
    if (res.errors && res.errors.length) {
      die(`run ${i + 1} returned errors: ${JSON.stringify(res.errors)}`);
    }
    results.push(res.data);
    client.stop();
  }
  return results;
}

async function runForge() {
  const forgedHash = sha256(`${queryText}\n# not the query that was sent`);
  const extensions = JSON.stringify({
    persistedQuery: { version: 1, sha256Hash: forgedHash },
  });
  const withQuery = new URL(uri);
  withQuery.searchParams.set("query", queryText);
  withQuery.searchParams.set("extensions", extensions);
  const hashOnly = new URL(uri);
  hashOnly.searchParams.set("extensions", extensions);

  const results = [];
  for (const url of [withQuery, hashOnly]) {
    const response = await recordingFetch(url.toString(), {
      method: "GET",
      headers: { accept: "application/json" },
    });
    const text = await response.text();
    try {
      results.push(JSON.parse(text));
    } catch {
      die(`non-JSON body (status ${response.status}): ${text.slice(0, 500)}`);
    }
  }
  return results;
}

try {
  const results = mode === "forge" ? await runForge() : await runApollo();
  process.stdout.write(JSON.stringify({ requests, results }) + "\n");
} catch (e) {
  die(e && e.stack ? e.stack : String(e));
}
