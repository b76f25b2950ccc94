// The three subgraphs' SDL and their deterministic data, shared by subgraphs.mjs
// (which serves them) and supergraph.mjs (which composes the supergraph the
// gateways load, so neither gateway introspects the subgraphs at start).

const LINK =
  'extend schema @link(url: "https://specs.apollo.dev/federation/v2.3", import: ["@key"])';

export const SDL = {
  products: `${LINK}
type Query {
  products(first: Int = 10, offset: Int = 0): [Product!]!
  product(id: ID!): Product
  "A page of a search's results (bench/entities): see searchResults below."
  search(term: String!, first: Int = 10, offset: Int = 0): [Product!]!
}
type Mutation {
  "Renames a product in this process's data (the tests that call it start their own subgraphs)."
  updateProduct(id: ID!, name: String!): Product
}
type Product @key(fields: "id") {
  id: ID!
  name: String!
  price: Int!
}
`,
  reviews: `${LINK}
type Query {
  reviews(first: Int = 10, offset: Int = 0): [Review!]!
  review(id: ID!): Review
}
type Review @key(fields: "id") {
  id: ID!
  body: String!
  rating: Int!
  author: User!
  product: Product!
}
type Product @key(fields: "id") {
  id: ID!
  "At most \`first\` of them (all without it): tests/federation.rs pages them by a client's default."
  reviews(first: Int): [Review!]!
}
type User @key(fields: "id", resolvable: false) {
  id: ID!
}
`,
  users: `${LINK}
type Query {
  users(first: Int = 10, offset: Int = 0): [User!]!
  user(id: ID!): User
}
type User @key(fields: "id") {
  id: ID!
  name: String!
  "Private: only returned when the request carries authorization: Bearer <this user's id>, else null."
  email: String
}
`,
};

export const SUBGRAPHS = ["products", "reviews", "users"];

// Products "1".."200"; product i has i % 4 reviews (0..3). FEDERATION_PRODUCTS and
// FEDERATION_USERS (unset: 200 and 50, what the tests expect) make a bigger catalogue for
// bench/entities; the rules below stay the same.
const count = (name, fallback) => {
  const n = Number(process.env[name] ?? fallback);
  if (!Number.isInteger(n) || n < 20 || n > 1_000_000) throw new Error(`bad ${name}`);
  return n;
};
export const PRODUCT_COUNT = count("FEDERATION_PRODUCTS", 200);
export const USER_COUNT = count("FEDERATION_USERS", 50);
// Resolving this Product in the products subgraph's __resolveReference throws.
export const FAILING_PRODUCT_ID = "13";

export const products = Array.from({ length: PRODUCT_COUNT }, (_, n) => {
  const i = n + 1;
  return { id: String(i), name: `Product ${i}`, price: ((i * 37) % 997) + 1 };
});

export const users = Array.from({ length: USER_COUNT }, (_, n) => {
  const i = n + 1;
  return { id: String(i), name: `User ${i}`, email: `user${i}@example.com` };
});

// Review ids are "<product id>-<k>" (k = 0..2); author = ((product + k) % USER_COUNT) + 1,
// so neighbouring products share authors (product 2's second review and product
// 3's first are both by user 4): a page's authors hold duplicate User references.
export const reviews = products.flatMap((p) => {
  const i = Number(p.id);
  return Array.from({ length: i % 4 }, (_, k) => ({
    id: `${i}-${k}`,
    body: `Review ${k + 1} of product ${i}`,
    rating: ((i * 7 + k * 3) % 5) + 1,
    authorId: String(((i + k) % USER_COUNT) + 1),
    productId: p.id,
  }));
});

// Query.search (bench/entities): a term's results are SEARCH_DEPTH distinct products drawn, by a
// PRNG seeded from the term (FNV-1a, mulberry32), from a Zipf(1) popularity over the catalogue
// (the popularity ranks a fixed shuffle of the ids), so any two searches share their popular
// products but rarely a whole page. Deterministic: the same term always gives the same list.
export const SEARCH_DEPTH = 50;

function fnv1a(text) {
  let h = 0x811c9dc5;
  for (const byte of Buffer.from(text, "utf8")) {
    h ^= byte;
    h = Math.imul(h, 0x01000193) >>> 0;
  }
  return h;
}

function mulberry32(seed) {
  let a = seed >>> 0;
  return () => {
    a = (a + 0x6d2b79f5) >>> 0;
    let t = a;
    t = Math.imul(t ^ (t >>> 15), t | 1);
    t ^= t + Math.imul(t ^ (t >>> 7), t | 61);
    return ((t ^ (t >>> 14)) >>> 0) / 4294967296;
  };
}

// Cumulative Zipf(1) weights of the popularity ranks, and the product id of each rank.
const POPULARITY = (() => {
  let total = 0;
  const cumulative = [];
  for (let r = 1; r <= PRODUCT_COUNT; r++) {
    total += 1 / r;
    cumulative.push(total);
  }
  return cumulative.map((c) => c / total);
})();
const BY_RANK = (() => {
  const ids = products.map((p) => p.id);
  const random = mulberry32(fnv1a("popularity"));
  for (let i = ids.length - 1; i > 0; i--) {
    const j = Math.floor(random() * (i + 1));
    [ids[i], ids[j]] = [ids[j], ids[i]];
  }
  return ids;
})();

/** The ids of a term's results, best first (SEARCH_DEPTH of them, or the whole catalogue). */
export function searchResults(term) {
  const random = mulberry32(fnv1a(term));
  const seen = new Set();
  const ids = [];
  while (ids.length < Math.min(SEARCH_DEPTH, PRODUCT_COUNT)) {
    const u = random();
    let lo = 0;
    let hi = POPULARITY.length - 1;
    while (lo < hi) {
      const mid = (lo + hi) >> 1;
      if (POPULARITY[mid] < u) lo = mid + 1;
      else hi = mid;
    }
    const id = BY_RANK[lo];
    if (!seen.has(id)) {
      seen.add(id);
      ids.push(id);
    }
  }
  return ids;
}
