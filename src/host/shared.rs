//! [`SharedStore`] over Envoy's shared data.

use crate::store::{SharedStore, StoreError};
use proxy_wasm::hostcalls;

pub struct EnvoySharedData;

impl SharedStore for EnvoySharedData {
    fn get(&self, key: &str) -> Option<Vec<u8>> {
        match hostcalls::get_shared_data(key) {
            Ok((Some(bytes), _)) if !bytes.is_empty() => Some(bytes),
            _ => None,
        }
    }

    fn set(&self, key: &str, value: &[u8]) -> Result<(), StoreError> {
        hostcalls::set_shared_data(key, Some(value), None).map_err(|_| StoreError)
    }
}
