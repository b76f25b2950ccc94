//! [`SharedStore`] over Envoy's shared data.

use crate::store::{SharedStore, StoreError};
use proxy_wasm::hostcalls;
use proxy_wasm::types::Status;

pub struct EnvoySharedData;

impl SharedStore for EnvoySharedData {
    fn get_cas(&self, key: &str) -> (Option<Vec<u8>>, Option<u32>) {
        hostcalls::get_shared_data(key).unwrap_or((None, None))
    }

    fn set_cas(&self, key: &str, value: &[u8], cas: Option<u32>) -> Result<(), StoreError> {
        hostcalls::set_shared_data(key, Some(value), cas).map_err(|status| match status {
            Status::CasMismatch => StoreError::CasMismatch,
            _ => StoreError::Failed,
        })
    }
}
