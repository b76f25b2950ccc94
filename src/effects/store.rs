//! Envoy's shared data, as the core needs it: one process-wide map with compare-and-swap.

/// Envoy's shared data as the filter needs it; the host adapter implements it over proxy-wasm and
/// tests implement it over a map with the same semantics (see `effects::fake::MapStore`).
pub trait SharedStore {
    /// The value under `key` (`None` when absent or emptied) and its CAS token (`None` when the
    /// key was never written).
    fn get_cas(&self, key: &str) -> (Option<Vec<u8>>, Option<u32>);

    /// Writes `value`; with `cas`, only if the key still has that token. Envoy checks CAS only on
    /// keys that exist, so a write to a missing key always succeeds.
    fn set_cas(&self, key: &str, value: &[u8], cas: Option<u32>) -> Result<(), StoreError>;

    fn get(&self, key: &str) -> Option<Vec<u8>> {
        self.get_cas(key).0.filter(|v| !v.is_empty())
    }

    fn set(&self, key: &str, value: &[u8]) -> Result<(), StoreError> {
        self.set_cas(key, value, None)
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum StoreError {
    /// Someone else wrote the key since it was read.
    CasMismatch,
    Failed,
}

/// A key is created with this CAS token: Envoy ignores the token for a missing key, and a key
/// just created by another worker has a lower one, so creating never overwrites it.
pub const CREATE_CAS: u32 = u32::MAX;
/// Read-modify-write tries before giving up to contention.
const CAS_ATTEMPTS: usize = 64;

/// Read-modify-write of one key under CAS; `next` returns `None` to leave it as it is.
/// `Ok(true)` when written.
pub fn update(
    store: &impl SharedStore,
    key: &str,
    next: impl FnMut(Option<&[u8]>) -> Option<Vec<u8>>,
) -> Result<bool, StoreError> {
    update_from(store, key, None, next)
}

/// A value with its CAS, as read.
pub type Snapshot = (Option<Vec<u8>>, Option<u32>);

/// [`update`], starting from `first` (a read of `key` made just before, for a decision): one
/// shared-data read less when nothing changed since, a retry from a fresh read when it did.
pub fn update_from(
    store: &impl SharedStore,
    key: &str,
    mut first: Option<Snapshot>,
    mut next: impl FnMut(Option<&[u8]>) -> Option<Vec<u8>>,
) -> Result<bool, StoreError> {
    for _ in 0..CAS_ATTEMPTS {
        let (value, cas) = first.take().unwrap_or_else(|| store.get_cas(key));
        let Some(cas) = cas else {
            // Never created: create it empty (unless another worker just did), then retry.
            if let Err(StoreError::Failed) = store.set_cas(key, b"", Some(CREATE_CAS)) {
                return Err(StoreError::Failed);
            }
            continue;
        };
        let Some(new) = next(value.as_deref()) else {
            return Ok(false);
        };
        match store.set_cas(key, &new, Some(cas)) {
            Ok(()) => return Ok(true),
            Err(StoreError::CasMismatch) => continue,
            Err(e) => return Err(e),
        }
    }
    Err(StoreError::CasMismatch)
}
