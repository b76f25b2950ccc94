//! What the what-if route keeps of a key so that a candidate dropping some of `vary_headers` can
//! be replayed: the key with no vary header at all (its shape), and a short hash of each
//! configured vary header's value. Dropping headers then merges exactly the keys that differed
//! only in them. Computed only while the what-if ring records and `vary_headers` is not empty,
//! and memoized with the rest of the classification.

use crate::request::canonical::CanonicalOperation;
use crate::request::http::GraphQlRequest;
use crate::request::key::{build_key, KeyContext};
use std::hash::Hasher;

/// The vary headers whose values a variant keeps (the first ones configured, in order).
pub const MAX_VARY: usize = 4;

/// Fixed keys: a variant must read the same in every worker (the what-if replays them all), and
/// its shape is already a slice of a SHA-256 digest. A client that aimed two values of one header
/// at one hash would only move a what-if estimate, never an answer.
const KEYS: (u64, u64) = (0x7768_6174_2d69_6621, 0x7661_7279_2d76_3031);

#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Variant {
    /// The key's digest without the vary headers (and their names), 64 bits of it.
    pub shape: u64,
    /// Per configured vary header (the first [`MAX_VARY`]): its value's hash, 0 if absent.
    pub vary: [u32; MAX_VARY],
}

impl Variant {
    /// The variant of the key `build_key(ctx, req, op)` builds.
    pub fn of(ctx: &KeyContext, req: &GraphQlRequest, op: &CanonicalOperation) -> Variant {
        let bare = KeyContext {
            vary: Vec::new(),
            ..ctx.clone()
        };
        let digest = build_key(&bare, req, op).digest;
        let mut first = [0u8; 8];
        first.copy_from_slice(&digest[..8]);
        let mut vary = [0; MAX_VARY];
        for (slot, (_, value)) in vary.iter_mut().zip(&ctx.vary) {
            *slot = value.map_or(0, value_hash);
        }
        Variant {
            shape: u64::from_le_bytes(first).max(1),
            vary,
        }
    }

    /// The variant of the same key made private to one caller (`CacheKey::scoped`).
    pub fn scoped(self, identity: &[u8]) -> Variant {
        let mut h = hasher();
        h.write_u64(self.shape);
        h.write(identity);
        Variant {
            shape: h.finish().max(1),
            ..self
        }
    }

    /// The key's identity under a configuration that keeps only the vary headers whose bit is
    /// set in `kept` (bit i: the i-th configured); never 0.
    pub fn key(&self, kept: u8) -> u64 {
        let mut h = hasher();
        h.write_u64(self.shape);
        for (i, v) in self.vary.iter().enumerate() {
            let on = kept & (1 << i) != 0;
            // A dropped header writes the same marker for every value, so those keys merge.
            h.write_u64(if on { u64::from(*v) } else { u64::MAX });
        }
        h.finish().max(1)
    }
}

#[allow(deprecated)] // SipHash-2-4: stable across builds and workers, which is what is needed.
fn hasher() -> std::hash::SipHasher {
    std::hash::SipHasher::new_with_keys(KEYS.0, KEYS.1)
}

/// A present value's hash: never 0, which marks an absent header.
fn value_hash(value: &[u8]) -> u32 {
    let mut h = hasher();
    h.write(value);
    (h.finish() as u32).max(1)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::request::canonical::canonicalize;
    use crate::request::http::parse_post_body;

    fn variant(vary: Vec<(&'static str, Option<&'static [u8]>)>, query: &str) -> Variant {
        let ctx = KeyContext {
            method: b"POST",
            authority: b"api",
            path: b"/graphql",
            vary,
            ..KeyContext::default()
        };
        let body = format!(r#"{{"query":"{query}"}}"#);
        let req = parse_post_body(body.as_bytes()).unwrap();
        let limits = crate::request::canonical::Limits {
            max_depth: 50,
            max_fields: 1000,
        };
        let op = canonicalize(&req.query, None, limits).unwrap();
        Variant::of(&ctx, &req, &op)
    }

    #[test]
    fn dropping_a_header_merges_exactly_the_keys_that_differed_only_in_it() {
        let a = variant(
            vec![("accept-language", Some(b"en")), ("x-tenant", Some(b"1"))],
            "{ a }",
        );
        let b = variant(
            vec![("accept-language", Some(b"fr")), ("x-tenant", Some(b"1"))],
            "{ a }",
        );
        let c = variant(
            vec![("accept-language", Some(b"en")), ("x-tenant", Some(b"2"))],
            "{ a }",
        );
        let d = variant(
            vec![("accept-language", Some(b"en")), ("x-tenant", Some(b"1"))],
            "{ b }",
        );
        let all = 0b11;
        assert_eq!(a.key(all), a.key(all), "stable");
        assert_ne!(a.key(all), b.key(all));
        let no_language = 0b10;
        assert_eq!(a.key(no_language), b.key(no_language), "merged");
        assert_ne!(a.key(no_language), c.key(no_language), "still by tenant");
        assert_ne!(a.key(0), d.key(0), "another query never merges");
        assert_eq!(a.key(0), c.key(0));
    }

    #[test]
    fn absent_and_empty_differ_and_a_caller_scope_separates() {
        let absent = variant(vec![("x-tenant", None)], "{ a }");
        let empty = variant(vec![("x-tenant", Some(b""))], "{ a }");
        assert_ne!(absent.key(1), empty.key(1));
        assert_eq!(absent.key(0), empty.key(0));
        assert_ne!(absent.scoped(b"u1").key(0), absent.scoped(b"u2").key(0));
        assert_eq!(absent.scoped(b"u1"), absent.scoped(b"u1"));
    }
}
