//! Why a key's last origin answer was not stored, for the explain endpoint: a fixed number of
//! slots in shared data (one per first byte of the key's digest, the last refusal wins), so any
//! worker can tell what another one refused, in bounded memory whatever the traffic.

use crate::effects::store::SharedStore;
use crate::request::key::CacheKey;

const PREFIX: &str = "graphql-cache/v2/refused/";
/// A reason is one of the filter's own short labels; anything longer is not ours.
const MAX_REASON: usize = 64;

/// A refusal as remembered: why, and when (ms since the epoch).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Remembered {
    pub reason: String,
    pub at_ms: u64,
}

fn slot(key: &CacheKey) -> String {
    format!("{PREFIX}{:02x}", key.digest[0])
}

/// Remembers that the answer for `key` was not stored, `why`. A failed write loses a hint only.
pub fn remember(store: &impl SharedStore, key: &CacheKey, why: &str, now_ms: u64) {
    let why = &why.as_bytes()[..why.len().min(MAX_REASON)];
    let mut value = Vec::with_capacity(32 + 8 + why.len());
    value.extend_from_slice(&key.digest);
    value.extend_from_slice(&now_ms.to_le_bytes());
    value.extend_from_slice(why);
    let _ = store.set(&slot(key), &value);
}

/// The last refusal remembered for `key`, if its slot still holds it.
pub fn recall(store: &impl SharedStore, key: &CacheKey) -> Option<Remembered> {
    let value = store.get(&slot(key))?;
    let (digest, rest) = value.split_at_checked(32)?;
    if digest != key.digest {
        return None;
    }
    let (at, reason) = rest.split_at_checked(8)?;
    let at_ms = u64::from_le_bytes(at.try_into().ok()?);
    let reason = std::str::from_utf8(reason).ok()?;
    if reason.len() > MAX_REASON {
        return None;
    }
    Some(Remembered {
        reason: reason.to_string(),
        at_ms,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::effects::fake::MapStore;

    #[test]
    fn the_last_refusal_of_a_key_is_recalled_and_another_key_s_is_not() {
        let store = MapStore::default();
        let a = CacheKey { digest: [1; 32] };
        let mut b = CacheKey { digest: [1; 32] };
        b.digest[31] = 2;
        assert_eq!(recall(&store, &a), None);
        remember(&store, &a, "graphql-errors", 5);
        remember(&store, &a, "too-large", 7);
        assert_eq!(
            recall(&store, &a),
            Some(Remembered {
                reason: "too-large".into(),
                at_ms: 7
            })
        );
        assert_eq!(recall(&store, &b), None, "same slot, another key");
        store.set(&slot(&a), b"short").unwrap();
        assert_eq!(recall(&store, &a), None);
    }
}
