// Composes the supergraph SDL from the three subgraphs' SDL (schemas.mjs) with
// @apollo/composition, with each subgraph's routing URL taken from
// PRODUCTS_URL / REVIEWS_URL / USERS_URL (or the urls argument). Both gateway
// launchers load this static supergraph, so neither sends an introspection or
// `_service { sdl }` request at start: every request a subgraph sees comes from
// a client query.
//
//   node supergraph.mjs > supergraph.graphql   (prints it, URLs from the env)
import { parse } from "graphql";
import { composeServices } from "@apollo/composition";
import { SDL, SUBGRAPHS } from "./schemas.mjs";

export function subgraphUrlsFromEnv(env = process.env) {
  const urls = {};
  for (const name of SUBGRAPHS) {
    const v = env[`${name.toUpperCase()}_URL`];
    if (!v) throw new Error(`${name.toUpperCase()}_URL is not set`);
    urls[name] = v;
  }
  return urls;
}

export function composeSupergraph(urls) {
  const result = composeServices(
    SUBGRAPHS.map((name) => ({ name, url: urls[name], typeDefs: parse(SDL[name]) })),
  );
  if (result.errors?.length) {
    throw new Error(`composition failed:\n${result.errors.map((e) => e.message).join("\n")}`);
  }
  return result.supergraphSdl;
}

if (import.meta.url === `file://${process.argv[1]}`) {
  process.stdout.write(composeSupergraph(subgraphUrlsFromEnv()));
}
