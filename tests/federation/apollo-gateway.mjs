// Apollo Gateway 2 (on Apollo Server 5) in front of the three subgraphs.
//
//   PRODUCTS_URL=http://127.0.0.1:P1/graphql REVIEWS_URL=... USERS_URL=... PORT=N \
//     node apollo-gateway.mjs
//
// Loads a supergraph composed at start from schemas.mjs (supergraph.mjs), with
// the subgraph URLs from the env: no introspection requests at start. Listens on
// 127.0.0.1:PORT (0 picks a free port), GraphQL at /, and prints ONE line:
//   apollo-gateway ready http://127.0.0.1:N/
// The client's authorization header is forwarded to every subgraph request.
// SIGTERM/SIGINT: stops the server and exits 0.

// No phoning home. @apollo/gateway 2.x starts an OpenTelemetry metrics exporter
// (to Apollo, with AWS/GCP/Azure/Alibaba resource detectors that probe cloud
// metadata addresses) unless APOLLO_TELEMETRY_DISABLED is "1" or "true"; Apollo
// Server turns on usage and schema reporting when APOLLO_KEY/APOLLO_GRAPH_REF are
// set; the subgraph fetcher (make-fetch-happen) honours proxy variables. So: set
// the one, drop the others, before the packages are loaded (dynamic imports).
process.env.APOLLO_TELEMETRY_DISABLED = "1";
for (const k of [
  "APOLLO_KEY",
  "APOLLO_GRAPH_REF",
  "APOLLO_GRAPH_ID",
  "APOLLO_GRAPH_VARIANT",
  "APOLLO_SCHEMA_REPORTING",
  "HTTP_PROXY",
  "HTTPS_PROXY",
  "ALL_PROXY",
  "http_proxy",
  "https_proxy",
  "all_proxy",
]) {
  delete process.env[k];
}

const { ApolloGateway, RemoteGraphQLDataSource } = await import("@apollo/gateway");
const { ApolloServer } = await import("@apollo/server");
const { startStandaloneServer } = await import("@apollo/server/standalone");
const {
  ApolloServerPluginLandingPageDisabled,
  ApolloServerPluginUsageReportingDisabled,
  ApolloServerPluginSchemaReportingDisabled,
} = await import("@apollo/server/plugin/disabled");
const { composeSupergraph, subgraphUrlsFromEnv } = await import("./supergraph.mjs");

function die(msg) {
  process.stderr.write(`apollo-gateway.mjs: ${msg}\n`);
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

class ForwardingDataSource extends RemoteGraphQLDataSource {
  willSendRequest({ request, context }) {
    if (context?.authorization) request.http.headers.set("authorization", context.authorization);
  }
}

const gateway = new ApolloGateway({
  supergraphSdl,
  buildService: ({ url }) => new ForwardingDataSource({ url }),
  logger: {
    debug() {},
    info() {},
    warn: (m) => process.stderr.write(`apollo-gateway warn: ${m}\n`),
    error: (m) => process.stderr.write(`apollo-gateway error: ${m}\n`),
  },
});

const server = new ApolloServer({
  gateway,
  stopOnTerminationSignals: false,
  includeStacktraceInErrorResponses: false,
  plugins: [
    ApolloServerPluginLandingPageDisabled(),
    ApolloServerPluginUsageReportingDisabled(),
    ApolloServerPluginSchemaReportingDisabled(),
  ],
});

let url;
try {
  ({ url } = await startStandaloneServer(server, {
    listen: { host: "127.0.0.1", port },
    context: async ({ req }) => ({ authorization: req.headers.authorization }),
  }));
} catch (e) {
  die(e.message);
}
process.stdout.write(`apollo-gateway ready ${url}\n`);

let stopping = false;
async function stop() {
  if (stopping) return;
  stopping = true;
  const force = setTimeout(() => process.exit(0), 3000);
  force.unref();
  try {
    await server.stop();
  } finally {
    process.exit(0);
  }
}
process.on("SIGTERM", stop);
process.on("SIGINT", stop);
