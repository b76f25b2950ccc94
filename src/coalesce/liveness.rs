//! Which workers are alive: each VM writes a heartbeat into one shared-data record, so a flight
//! whose leader stopped beating (its VM was reloaded or crashed) is taken over at once instead of
//! being followed until its lease runs out (`fetch_timeout_ms` + 2 s).
//!
//! One key, at most `MAX_WORKERS` entries; entries silent for `FORGET_MS` are dropped on the next
//! write, so VM reloads never grow it.

use crate::effects::store::{SharedStore, StoreError};

const KEY: &str = "graphql-cache/v1/workers";
const MAGIC: &[u8; 4] = b"GQLW";
const VERSION: u8 = 1;
const MAX_WORKERS: usize = 256;
const CAS_ATTEMPTS: usize = 8;
const CREATE_CAS: u32 = u32::MAX;
/// How often a worker beats.
pub const HEARTBEAT_MS: u64 = 500;
/// A leader silent this long is gone (several missed beats: a blocked event loop is not death).
pub const SILENT_MS: u64 = 2000;
/// Entries silent this long are dropped from the record.
const FORGET_MS: u64 = 10_000;

/// The record as stored in shared data.
pub fn encode(entries: &[(u64, u64)]) -> Vec<u8> {
    let mut out = Vec::with_capacity(5 + entries.len() * 16);
    out.extend_from_slice(MAGIC);
    out.push(VERSION);
    for (id, at) in entries {
        out.extend_from_slice(&id.to_le_bytes());
        out.extend_from_slice(&at.to_le_bytes());
    }
    out
}

/// `(worker id, last heartbeat ms)`; empty for anything this version did not write.
pub fn decode(bytes: &[u8]) -> Vec<(u64, u64)> {
    if bytes.len() < 5
        || &bytes[..4] != MAGIC
        || bytes[4] != VERSION
        || !(bytes.len() - 5).is_multiple_of(16)
    {
        return Vec::new();
    }
    bytes[5..]
        .chunks_exact(16)
        .filter_map(|c| {
            let id = u64::from_le_bytes(c[..8].try_into().ok()?);
            let at = u64::from_le_bytes(c[8..].try_into().ok()?);
            Some((id, at))
        })
        .take(MAX_WORKERS)
        .collect()
}

/// Records that worker `me` is alive at `now_ms`.
pub fn beat(store: &impl SharedStore, me: u64, now_ms: u64) -> Result<(), StoreError> {
    for _ in 0..CAS_ATTEMPTS {
        let (value, cas) = store.get_cas(KEY);
        let Some(cas) = cas else {
            if let Err(StoreError::Failed) = store.set_cas(KEY, b"", Some(CREATE_CAS)) {
                return Err(StoreError::Failed);
            }
            continue;
        };
        let mut entries: Vec<(u64, u64)> = value
            .as_deref()
            .map(decode)
            .unwrap_or_default()
            .into_iter()
            .filter(|(id, at)| *id != me && now_ms.saturating_sub(*at) < FORGET_MS)
            .collect();
        entries.push((me, now_ms));
        if entries.len() > MAX_WORKERS {
            entries.sort_unstable_by_key(|(_, at)| std::cmp::Reverse(*at));
            entries.truncate(MAX_WORKERS);
        }
        match store.set_cas(KEY, &encode(&entries), Some(cas)) {
            Ok(()) => return Ok(()),
            Err(StoreError::CasMismatch) => continue,
            Err(e) => return Err(e),
        }
    }
    Err(StoreError::CasMismatch)
}

/// The workers that beat within `SILENT_MS` of `now_ms`, read once for a decision.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Alive {
    /// For callers that cannot tell (and tests of other things).
    Everyone,
    These(Vec<u64>),
}

impl Alive {
    pub fn read(store: &impl SharedStore, now_ms: u64) -> Alive {
        let entries = store.get(KEY).map(|b| decode(&b)).unwrap_or_default();
        Alive::These(
            entries
                .into_iter()
                .filter(|(_, at)| now_ms.saturating_sub(*at) < SILENT_MS)
                .map(|(id, _)| id)
                .collect(),
        )
    }

    pub fn everyone() -> Alive {
        Alive::Everyone
    }

    pub fn contains(&self, id: u64) -> bool {
        match self {
            Alive::Everyone => true,
            Alive::These(ids) => ids.contains(&id),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::effects::fake::MapStore;

    #[test]
    fn silent_workers_are_gone_and_forgotten() {
        let store = MapStore::default();
        beat(&store, 1, 1000).unwrap();
        beat(&store, 2, 1000).unwrap();
        beat(&store, 1, 2500).unwrap();
        let alive = Alive::read(&store, 3100);
        assert!(alive.contains(1));
        assert!(!alive.contains(2), "silent for 2.1 s");
        beat(&store, 1, 20_000).unwrap();
        let raw = store.get(KEY).unwrap();
        assert_eq!(decode(&raw), vec![(1, 20_000)], "forgotten after 10 s");
    }

    #[test]
    fn the_record_is_bounded_and_foreign_bytes_read_as_nobody() {
        let store = MapStore::default();
        for id in 0..1000 {
            beat(&store, id, 5000).unwrap();
        }
        assert!(decode(&store.get(KEY).unwrap()).len() <= MAX_WORKERS);
        assert!(decode(b"GQLW\x01short").is_empty());
        assert!(decode(b"nope").is_empty());
        assert!(Alive::everyone().contains(42));
    }
}
