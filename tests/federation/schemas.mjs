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
  reviews: [Review!]!
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

// Products "1".."200"; product i has i % 4 reviews (0..3).
export const PRODUCT_COUNT = 200;
export const USER_COUNT = 50;
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

// Review ids are "<product id>-<k>" (k = 0..2); author = ((product + k) % 50) + 1,
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
