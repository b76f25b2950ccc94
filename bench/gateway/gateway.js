'use strict'
// The origin of `make bench-gateway` (and of bench.py's `-gw` scenarios): a Mercurius federation
// gateway in front of two subgraphs, all three in this one process (pinned by the caller).
//
//   node gateway.js --port 18081 --subgraphs 18085
//
// The gateway listens on --port, the subgraphs on --subgraphs and the port after it. Besides
// POST /graphql it answers GET /_origin/health and GET /_origin/count (requests the gateway
// answered on /graphql), as graphql-origin does, so bench.py counts origin requests the same way.

const Fastify = require('fastify')
const { mercuriusFederationPlugin } = require('@mercuriusjs/federation')
const mercuriusGateway = require('@mercuriusjs/gateway')

const arg = (name, fallback) => {
  const i = process.argv.indexOf(`--${name}`)
  return i > 0 ? process.argv[i + 1] : fallback
}
const port = Number(arg('port', '18081'))
const subgraphs = Number(arg('subgraphs', String(port + 1)))
const host = '127.0.0.1'

// Accounts: who is signed in.
const users = {
  u1: { id: 'u1', name: 'Ada Lovelace', email: 'ada@analytical.example', plan: 'PRO' },
  u2: { id: 'u2', name: 'Grace Hopper', email: 'grace@cobol.example', plan: 'FREE' }
}
const accounts = `
  extend type Query {
    me: User
  }
  type User @key(fields: "id") {
    id: ID!
    name: String
    email: String
    plan: String
  }
`
const accountResolvers = {
  Query: { me: () => users.u1 },
  User: { __resolveReference: (ref) => users[ref.id] }
}

// Catalog: what is on sale, and its departments.
const products = [
  { upc: 'p-1001', name: 'Mechanical keyboard', price: 129, inStock: true },
  { upc: 'p-1002', name: 'USB-C dock', price: 89, inStock: false },
  { upc: 'p-1003', name: 'Noise-cancelling headphones', price: 249, inStock: true }
]
const departments = [
  { id: 'd-1', name: 'Peripherals' },
  { id: 'd-2', name: 'Audio' },
  { id: 'd-3', name: 'Networking, storage & cabling kit' }
]
const catalog = `
  extend type Query {
    topProducts(first: Int = 3): [Product]
  }
  type Product @key(fields: "upc") {
    upc: ID!
    name: String
    price: Int
    inStock: Boolean
  }
  type Department {
    id: ID!
    name: String
  }
  extend type Query {
    departments: [Department]
  }
`
const catalogResolvers = {
  Query: {
    topProducts: (_, { first }) => products.slice(0, first),
    departments: () => departments
  },
  Product: { __resolveReference: (ref) => products.find((p) => p.upc === ref.upc) },
}

async function subgraph (schema, resolvers, at) {
  const app = Fastify()
  app.register(mercuriusFederationPlugin, { schema, resolvers })
  await app.listen({ port: at, host })
  return app
}

async function main () {
  await subgraph(accounts, accountResolvers, subgraphs)
  await subgraph(catalog, catalogResolvers, subgraphs + 1)
  const gateway = Fastify()
  let count = 0
  gateway.addHook('onRequest', async (req) => {
    if (req.url.startsWith('/graphql')) count++
  })
  gateway.register(mercuriusGateway, {
    gateway: {
      services: [
        { name: 'accounts', url: `http://${host}:${subgraphs}/graphql`, mandatory: true },
        { name: 'catalog', url: `http://${host}:${subgraphs + 1}/graphql`, mandatory: true }
      ]
    }
  })
  gateway.get('/_origin/health', async () => ({ ok: true }))
  gateway.get('/_origin/count', async () => ({ requests: count }))
  await gateway.listen({ port, host })
  process.stdout.write(`gateway on ${host}:${port}, subgraphs on ${subgraphs} and ${subgraphs + 1}\n`)
}

for (const signal of ['SIGTERM', 'SIGINT']) process.on(signal, () => process.exit(0))
main().catch((e) => {
  process.stderr.write(`gateway: ${e.stack || e}\n`)
  process.exit(1)
})
