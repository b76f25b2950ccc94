// Hive Gateway (its runtime, @graphql-hive/gateway-runtime, the engine the
// @graphql-hive/gateway CLI wraps) in front of the three subgraphs.
//
//   PRODUCTS_URL=http://127.0.0.1:P1/graphql REVIEWS_URL=... USERS_URL=... PORT=N \
//     node hive-gateway.mjs
//
// Loads a supergraph composed at start from schemas.mjs (supergraph.mjs), with
// the subgraph URLs from the env: no introspection requests at start. Listens on
// 127.0.0.1:PORT (0 picks a free port), GraphQL at /graphql, and prints ONE line:
//   hive-gateway ready http://127.0.0.1:N/graphql
// The client's authorization header is forwarded to every subgraph request.
// SIGTERM/SIGINT: stops the server and exits 0.

// No phoning home. The runtime reports usage (to Hive or to Apollo GraphOS) only
// when given a `reporting` option, fetches a supergraph from a registry only
// when `supergraph` says so (GraphOS uplink reads APOLLO_KEY/APOLLO_GRAPH_REF),
// sends traces only with the OpenTelemetry plugin, and has no update check; the
// landing page and GraphiQL (which load assets from a CDN in the browser) are
// switched off below. None of those options is given here; the variables are
// dropped anyway, and APOLLO_TELEMETRY_DISABLED is set as in every launcher.
process.env.APOLLO_TELEMETRY_DISABLED = "1";
for (const k of [
  "APOLLO_KEY",
  "APOLLO_GRAPH_REF",
  "APOLLO_SCHEMA_CONFIG_DELIVERY_ENDPOINT",
  "HIVE_REGISTRY_TOKEN",
  "HIVE_USAGE_ACCESS_TOKEN",
  "HIVE_USAGE_TARGET",
  "HIVE_TRACING_ACCESS_TOKEN",
  "HIVE_CDN_ENDPOINT",
  "HIVE_CDN_KEY",
  "OTEL_EXPORTER_OTLP_ENDPOINT",
  "OPENTELEMETRY_COLLECTOR_ENDPOINT",
  "HTTP_PROXY",
  "HTTPS_PROXY",
  "ALL_PROXY",
  "http_proxy",
  "https_proxy",
  "all_proxy",
]) {
  delete process.env[k];
}

const http = await import("node:http");
const { createGatewayRuntime } = await import("@graphql-hive/gateway-runtime");
const { default: httpTransport } = await import("@graphql-mesh/transport-http");
const { composeSupergraph, subgraphUrlsFromEnv } = await import("./supergraph.mjs");

function die(msg) {
  process.stderr.write(`hive-gateway.mjs: ${msg}\n`);
  process.exit(1);
}

let supergraphSdl;
try {
  supergraphSdl = composeSupergraph(subgraphUrlsFromEnv());
} catch (e) {
  die(e.message);
}
const port = Number(process.env.PORT ?? "0");
if (!Number.isInteger(port) || port < 0 || port > 65535) die(`bad PORT ${process.env.PORT}`);

const gateway = createGatewayRuntime({
  supergraph: supergraphSdl,
  transports: { http: httpTransport },
  propagateHeaders: {
    fromClientToSubgraphs: ({ request }) => ({
      authorization: request.headers.get("authorization") ?? undefined,
    }),
  },
  landingPage: false,
  graphiql: false,
  logging: "warn",
});

const server = http.createServer(gateway);
try {
  await new Promise((resolve, reject) => {
    server.once("error", reject);
    server.listen(port, "127.0.0.1", resolve);
  });
} catch (e) {
  die(e.message);
}
process.stdout.write(`hive-gateway ready http://127.0.0.1:${server.address().port}/graphql\n`);

let stopping = false;
async function stop() {
  if (stopping) return;
  stopping = true;
  const force = setTimeout(() => process.exit(0), 3000);
  force.unref();
  server.close();
  server.closeAllConnections();
  try {
    await gateway.dispose();
  } finally {
    process.exit(0);
  }
}
process.on("SIGTERM", stop);
process.on("SIGINT", stop);
