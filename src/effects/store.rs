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
