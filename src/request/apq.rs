//! Automatic Persisted Queries: a bounded table in shared data from a query's SHA-256 to its
//! text, taught only by requests that carry both and whose hash the filter checked itself, so a
//! hash-only request can be keyed exactly as its full-text twin.
//!
//! `apq_slots` slots addressed by the hash; a slot holds one query (a newer one replaces it, and
//! its hash then passes through until taught again). Each record carries its full hash: a slot
//! never answers for another hash.

use crate::effects::store::SharedStore;
use crate::request::key::SlotKey;
use sha2::{Digest, Sha256};
use std::hash::Hasher;

const SLOT_PREFIX: &str = "graphql-cache/v1/apq/";
const MAGIC: &[u8; 4] = b"GQLA";
const VERSION: u8 = 1;

/// The lower-case hex SHA-256 of a query text, as Apollo's clients compute it.
pub fn sha256_hex(query: &str) -> String {
    Sha256::digest(query.as_bytes())
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect()
}

#[derive(Debug, Clone, Copy)]
pub struct ApqTable {
    slots: u32,
    max_query_bytes: usize,
    secret: SlotKey,
}

impl ApqTable {
    /// `slots` 0 turns persisted queries off (hash-only requests pass through).
    pub fn new(slots: u32, max_query_bytes: usize, secret: SlotKey) -> Self {
        ApqTable {
            slots,
            max_query_bytes,
            secret,
        }
    }

    /// Placed by the deployment's secret, like cache slots: a client cannot aim queries at the
    /// slot of a hot hash to evict it.
    fn slot_name(&self, sha256: &str) -> Option<String> {
        if self.slots == 0 {
            return None;
        }
        #[allow(deprecated)] // SipHash-2-4 with keys: a stable PRF.
        let mut h = std::hash::SipHasher::new_with_keys(self.secret.0, self.secret.1);
        h.write(sha256.as_bytes());
        Some(format!(
            "{SLOT_PREFIX}{}",
            h.finish() % u64::from(self.slots)
        ))
    }

    /// The query text whose SHA-256 is `sha256` (lower-case hex), if it was taught.
    pub fn lookup(&self, store: &impl SharedStore, sha256: &str) -> Option<String> {
        let bytes = store.get(&self.slot_name(sha256)?)?;
        let (hash, query) = decode(&bytes)?;
        // Checked again on the way out: shared data outlives this build and is not ours alone.
        (hash == sha256 && sha256_hex(query) == sha256).then(|| query.to_string())
    }

    /// Teaches `sha256 -> query` if the hash is right and the slot does not hold it already.
    /// Returns whether it wrote.
    pub fn learn(&self, store: &impl SharedStore, sha256: &str, query: &str) -> bool {
        if query.len() > self.max_query_bytes || sha256_hex(query) != sha256 {
            return false;
        }
        let Some(name) = self.slot_name(sha256) else {
            return false;
        };
        if store
            .get(&name)
            .and_then(|b| decode(&b).map(|(h, _)| h == sha256))
            .unwrap_or(false)
        {
            return false;
        }
        store.set(&name, &encode(sha256, query)).is_ok()
    }
}

/// A record as stored in a slot.
pub fn encode(sha256: &str, query: &str) -> Vec<u8> {
    let mut out = Vec::with_capacity(5 + 64 + query.len());
    out.extend_from_slice(MAGIC);
    out.push(VERSION);
    out.extend_from_slice(sha256.as_bytes());
    out.extend_from_slice(query.as_bytes());
    out
}

/// `None` for anything this version did not write.
pub fn decode(bytes: &[u8]) -> Option<(&str, &str)> {
    if bytes.get(..4)? != MAGIC || *bytes.get(4)? != VERSION {
        return None;
    }
    let hash = std::str::from_utf8(bytes.get(5..69)?).ok()?;
    let query = std::str::from_utf8(bytes.get(69..)?).ok()?;
    Some((hash, query))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::effects::fake::MapStore;

    #[test]
    fn only_checked_hashes_are_learned() {
        let store = MapStore::default();
        let t = ApqTable::new(16, 1024, SlotKey(1, 2));
        let q = "{ users { id } }";
        let h = sha256_hex(q);
        assert_eq!(t.lookup(&store, &h), None);
        assert!(
            !t.learn(&store, &sha256_hex("{ other }"), q),
            "a forged hash"
        );
        assert_eq!(t.lookup(&store, &sha256_hex("{ other }")), None);
        assert!(t.learn(&store, &h, q));
        assert!(!t.learn(&store, &h, q), "already there: no write");
        assert_eq!(t.lookup(&store, &h).as_deref(), Some(q));
    }

    #[test]
    fn bounded_by_slots_and_size_and_off_at_zero() {
        let store = MapStore::default();
        let t = ApqTable::new(4, 64, SlotKey(1, 2));
        for i in 0..100 {
            let q = format!("{{ f{i} }}");
            t.learn(&store, &sha256_hex(&q), &q);
        }
        assert!(store.0.borrow().len() <= 4);
        let big = "x".repeat(65);
        assert!(!t.learn(&store, &sha256_hex(&big), &big));
        let off = ApqTable::new(0, 1024, SlotKey(1, 2));
        assert!(!off.learn(&store, &sha256_hex("{ a }"), "{ a }"));
        assert_eq!(off.lookup(&store, &sha256_hex("{ a }")), None);
    }

    #[test]
    fn records_of_other_versions_or_truncated_are_unknown() {
        let bytes = encode(&sha256_hex("{ a }"), "{ a }");
        for len in 0..69 {
            assert_eq!(decode(&bytes[..len]), None, "len {len}");
        }
        let mut other = bytes.clone();
        other[4] = 9;
        assert_eq!(decode(&other), None);
        assert!(decode(&bytes).is_some());
    }

    #[test]
    fn the_hash_is_apollo_s() {
        assert_eq!(
            sha256_hex("{ a }"),
            "1c7e1e347f726166b5b1c55afd61f278cc9b45e00c108ec33d540a566379811b"
        );
    }
}
