// The GraphQL-over-HTTP audits of graphql-http (its `auditServer`), sent to the URL given, once:
// prints how many passed, warned and failed. Conformance is the origin's business here; the
// caller (tests/ceilings/conformance.py) runs this twice through the filter and reads why each
// miss missed.
import { auditServer } from 'graphql-http';

const url = process.argv[2];
if (!url) {
  console.error('usage: node audit.mjs <url>');
  process.exit(2);
}
const results = await auditServer({ url });
const counts = { ok: 0, warn: 0, error: 0 };
for (const r of results) counts[r.status] = (counts[r.status] || 0) + 1;
console.log(JSON.stringify({ audits: results.length, ...counts }));
