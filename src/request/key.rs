//! The cache key: a SHA-256 digest over everything that can change the origin's answer.
//!
//! Each dimension is written with a tag and a length prefix, so no two different sets of
//! dimensions can produce the same byte stream (no "ab"+"c" == "a"+"bc" ambiguity).

use crate::request::canonical::CanonicalOperation;
use crate::request::http::GraphQlRequest;
use sha2::{Digest, Sha256};
use std::fmt::Write;
use std::hash::Hasher;

/// Bumped whenever the meaning of the key changes, so old entries stop matching (v3: JSON
/// numbers keyed by their text; a v2 entry stored for `0.10` must not answer `0.1`).
const KEY_FORMAT: &[u8] = b"graphql-cache/key/v3";

/// The request-side dimensions of the key that are not part of the GraphQL request itself.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct KeyContext<'a> {
    pub method: &'a [u8],
    pub authority: &'a [u8],
    /// The path without the query string.
    pub path: &'a [u8],
    /// `accept` shapes the response's media type.
    pub accept: Option<&'a [u8]>,
    /// The upstream cluster the route chose.
    pub cluster: Option<&'a [u8]>,
    /// `(name, value)` for each configured vary header, in configuration order; `None` = absent.
    pub vary: Vec<(&'a str, Option<&'a [u8]>)>,
}

#[derive(Clone, Copy, PartialEq, Eq, Hash)]
pub struct CacheKey {
    pub digest: [u8; 32],
}

impl std::fmt::Debug for CacheKey {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.hex())
    }
}

impl CacheKey {
    pub fn hex(&self) -> String {
        let mut s = String::with_capacity(64);
        for b in self.digest {
            let _ = write!(s, "{b:02x}");
        }
        s
    }

    /// The key of the same request made private to one caller.
    pub fn scoped(&self, identity: &[u8]) -> CacheKey {
        let mut w = KeyWriter::new();
        w.field(1, b"graphql-cache/scoped/v1");
        w.field(2, &self.digest);
        w.field(3, identity);
        CacheKey {
            digest: w.0.finalize().into(),
        }
    }

    /// The flight key of an `_entities` batch: each field's response key, then the key of the
    /// entity at each position in order. Those keys hold all that shapes an entity's answer (the
    /// subgraph, the selection, the other variables, the key's headers, the representation), so
    /// equal batch keys mean equal answers. Never the key of an entry (entity mode stores the
    /// batch's entities, not the batch).
    pub fn entity_batch<'a>(
        fields: impl IntoIterator<Item = (&'a str, Vec<&'a CacheKey>)>,
    ) -> CacheKey {
        let mut w = KeyWriter::new();
        w.field(1, b"graphql-cache/entity-batch/v2");
        for (response_key, entities) in fields {
            w.field(2, response_key.as_bytes());
            w.field(3, &(entities.len() as u64).to_le_bytes());
            for key in entities {
                w.update(&key.digest);
            }
        }
        CacheKey {
            digest: w.0.finalize().into(),
        }
    }

    /// Which of `slots` slots this key lives in, under the deployment's secret `slot_key`: a
    /// client can compute a key's digest, but not which other requests share its slot, so it
    /// cannot aim requests at a hot key's slot to evict it or break its coalescing.
    pub fn slot(&self, slots: u32, slot_key: &SlotKey) -> u32 {
        (self.placement_hash(slot_key) % u64::from(slots.max(1))) as u32
    }

    /// A keyed hash of the digest: where the key goes can only be computed with the deployment's
    /// secret, so a client cannot pick requests that all land in one place.
    pub fn placement_hash(&self, slot_key: &SlotKey) -> u64 {
        #[allow(deprecated)] // SipHash-2-4 with keys: stable, and a PRF, which is what is needed.
        let mut h = std::hash::SipHasher::new_with_keys(slot_key.0, slot_key.1);
        h.write(&self.digest);
        h.finish()
    }
}

/// The secret that places keys in slots; one per deployment, kept in shared data (see
/// `worker::root::configure`).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct SlotKey(pub u64, pub u64);

/// SHA-256 hashes in blocks of this many bytes.
const BLOCK: u64 = 64;

/// SHA-256 over tagged, length-framed fields, counting what it was given.
#[derive(Clone)]
struct KeyWriter(Sha256, u64);

impl KeyWriter {
    fn new() -> KeyWriter {
        KeyWriter(Sha256::new(), 0)
    }

    fn update(&mut self, bytes: &[u8]) {
        self.0.update(bytes);
        self.1 = self.1.wrapping_add(bytes.len() as u64);
    }

    fn field(&mut self, tag: u8, value: &[u8]) {
        self.update(&[tag]);
        self.update(&(value.len() as u64).to_le_bytes());
        self.update(value);
    }

    /// Zeros up to the next block: a copy then starts on an empty block, so a short last field
    /// (an entity's representation) costs one compression instead of two.
    fn align(&mut self) {
        let partial = self.1 % BLOCK;
        if partial != 0 {
            let zeros = [0u8; BLOCK as usize];
            self.update(&zeros[..(BLOCK - partial) as usize]);
        }
    }

    /// The HTTP dimensions but the method: authority, path, cluster, accept, the vary headers.
    /// Not `accept-encoding`: the filter asks the origin for `identity` on every request it may
    /// store or coalesce, and Envoy's compressor encodes hits and misses alike per client.
    fn http(&mut self, ctx: &KeyContext) {
        self.field(3, ctx.authority);
        self.field(4, ctx.path);
        self.optional(14, ctx.cluster);
        self.optional(5, ctx.accept.map(trim));
        for (name, value) in &ctx.vary {
            self.field(7, name.as_bytes());
            self.optional(8, *value);
        }
    }

    fn optional(&mut self, tag: u8, value: Option<&[u8]>) {
        match value {
            // Absent and empty must differ: tag 0 marks absence.
            None => self.update(&[0u8, tag]),
            Some(v) => self.field(tag, v),
        }
    }
}

/// What the entities of one `_entities` field are keyed by, beside their representation.
#[derive(Debug, Clone, Copy)]
pub struct EntityAsk<'a> {
    /// The selection the field asks, printed.
    pub selection: &'a str,
    /// The request's other variables, canonical JSON.
    pub other_variables: &'a str,
    pub extensions: Option<&'a str>,
}

/// The part of an entity's key its field's entities share (the subgraph, the selection, the
/// other variables, the key's headers; never the batch), hashed once: each entity then adds only
/// its representation.
#[derive(Clone)]
pub struct EntityKeys(KeyWriter);

impl EntityKeys {
    pub fn new(ctx: &KeyContext, ask: &EntityAsk) -> EntityKeys {
        let mut w = KeyWriter::new();
        w.field(1, b"graphql-cache/entity/v2");
        w.http(ctx);
        w.field(15, ask.selection.as_bytes());
        w.field(11, ask.other_variables.as_bytes());
        w.optional(12, ask.extensions.map(str::as_bytes));
        w.align();
        EntityKeys(w)
    }

    /// The key of the entity `representation` (canonical JSON) names.
    pub fn key(&self, representation: &str) -> CacheKey {
        let mut w = self.0.clone();
        w.field(16, representation.as_bytes());
        CacheKey {
            digest: w.0.finalize().into(),
        }
    }
}

/// Builds the key for a parsed, canonicalized request in its HTTP context.
pub fn build_key(ctx: &KeyContext, req: &GraphQlRequest, op: &CanonicalOperation) -> CacheKey {
    let mut w = KeyWriter::new();
    w.field(1, KEY_FORMAT);
    w.field(2, ctx.method);
    w.http(ctx);
    w.field(10, op.text.as_bytes());
    w.optional(11, req.variables.as_deref().map(str::as_bytes));
    w.optional(12, req.extensions.as_deref().map(str::as_bytes));
    w.optional(13, req.extra.as_deref().map(str::as_bytes));
    CacheKey {
        digest: w.0.finalize().into(),
    }
}

fn trim(v: &[u8]) -> &[u8] {
    v.trim_ascii()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::request::canonical::canonicalize;
    use crate::request::http::parse_post_body;

    fn ctx() -> KeyContext<'static> {
        KeyContext {
            method: b"POST",
            authority: b"api.example.com",
            path: b"/graphql",
            accept: Some(b"application/json"),
            cluster: Some(b"origin"),
            vary: vec![("authorization", Some(b"Bearer a"))],
        }
    }

    fn key_with(ctx: &KeyContext, body: &str) -> CacheKey {
        let req = parse_post_body(body.as_bytes()).unwrap();
        let limits = crate::request::canonical::Limits {
            max_depth: 50,
            max_fields: 1000,
        };
        let op = canonicalize(&req.query, req.operation_name.as_deref(), limits).unwrap();
        build_key(ctx, &req, &op)
    }

    fn key(body: &str) -> CacheKey {
        key_with(&ctx(), body)
    }

    #[test]
    fn same_request_same_key() {
        assert_eq!(key(r#"{"query":"{a}"}"#), key(r#"{"query":"{a}"}"#));
        assert_eq!(
            key(r#"{"query":"{a}"}"#),
            key(r#"{"query":"query { a }","variables":{}}"#)
        );
        assert_eq!(
            key(r#"{"query":"query($x:Int){f(x:$x)}","variables":{"x":1,"y":{"b":1,"a":2}}}"#),
            key(r#"{"variables":{"y":{"a":2,"b":1},"x":1},"query":"query($x:Int){f(x:$x)}"}"#)
        );
        assert_eq!(
            key(r#"{"query":"query A { a } query B { b }","operationName":"A"}"#),
            key(r#"{"query":"query A { a }","operationName":"A"}"#)
        );
    }

    #[test]
    fn different_requests_different_keys() {
        let base = key(r#"{"query":"query($x:Int){f(x:$x)}","variables":{"x":1}}"#);
        for other in [
            r#"{"query":"query($x:Int){f(x:$x)}","variables":{"x":2}}"#,
            r#"{"query":"query($x:Int){f(x:$x)}","variables":{"x":"1"}}"#,
            r#"{"query":"query($x:Int){f(x:$x)}","variables":{"x":null}}"#,
            r#"{"query":"query($x:Int){f(x:$x)}"}"#,
            r#"{"query":"query($x:Int){f(x:$x)}","variables":{"x":1},"extensions":{"e":1}}"#,
            r#"{"query":"query($x:Int){g(x:$x)}","variables":{"x":1}}"#,
        ] {
            assert_ne!(key(other), base, "{other}");
        }
        let doc = r#""query A { a } query B { b }""#;
        assert_ne!(
            key(&format!(r#"{{"query":{doc},"operationName":"A"}}"#)),
            key(&format!(r#"{{"query":{doc},"operationName":"B"}}"#))
        );
    }

    #[test]
    fn http_dimensions_change_the_key() {
        let body = r#"{"query":"{a}"}"#;
        let base = key(body);
        let mut c = ctx();
        c.authority = b"other.example.com";
        assert_ne!(key_with(&c, body), base);
        let mut c = ctx();
        c.path = b"/v2/graphql";
        assert_ne!(key_with(&c, body), base);
        let mut c = ctx();
        c.method = b"GET";
        assert_ne!(key_with(&c, body), base);
        let mut c = ctx();
        c.vary = vec![("authorization", Some(b"Bearer b"))];
        assert_ne!(key_with(&c, body), base);
        let mut c = ctx();
        c.vary = vec![("authorization", None)];
        assert_ne!(key_with(&c, body), base);
        let mut c = ctx();
        c.vary = vec![("authorization", Some(b""))];
        assert_ne!(key_with(&c, body), base);
        assert_ne!(base.scoped(b"user-1"), base);
        assert_ne!(base.scoped(b"user-1"), base.scoped(b"user-2"));
        assert_eq!(base.scoped(b"user-1"), base.scoped(b"user-1"));
    }

    #[test]
    fn slot_is_in_range_and_stable() {
        let k = key(r#"{"query":"{a}"}"#);
        let secret = SlotKey(1, 2);
        assert!(k.slot(7, &secret) < 7);
        assert_eq!(k.slot(7, &secret), k.slot(7, &secret));
        assert_eq!(k.slot(1, &secret), 0);
        let spread: std::collections::HashSet<u32> = (0..64u64)
            .map(|n| k.slot(1 << 20, &SlotKey(n, 0)))
            .collect();
        assert!(spread.len() > 60, "the secret decides the slot");
        assert_eq!(k.hex().len(), 64);
    }

    #[test]
    fn a_batch_key_is_its_response_keys_and_its_entities_in_order() {
        let ctx = ctx();
        let ask = EntityAsk {
            selection: "{...on Product{name}}",
            other_variables: "{}",
            extensions: None,
        };
        let keys = EntityKeys::new(&ctx, &ask);
        let (one, two) = (keys.key(r#"{"id":"1"}"#), keys.key(r#"{"id":"2"}"#));
        let batch = |name: &'static str, list: &[&CacheKey]| {
            CacheKey::entity_batch([(name, list.to_vec())])
        };
        let base = batch("_entities", &[&one, &two]);
        assert_eq!(base, batch("_entities", &[&one, &two]));
        assert_ne!(base, batch("_entities", &[&two, &one]), "order");
        assert_ne!(base, batch("_v0__entities", &[&one, &two]), "response key");
        assert_ne!(base, batch("_entities", &[&one, &two, &two]), "positions");
        let split = CacheKey::entity_batch([("_entities", vec![&one]), ("_entities", vec![&two])]);
        assert_ne!(base, split, "fields");
        assert_ne!(base, one, "never an entry's key");
    }
}
