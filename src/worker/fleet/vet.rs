//! What any value read from the fleet's L2 must pass before this Envoy looks at it: sealed by the
//! fleet for exactly this key, and what this Envoy would have stored itself (its times brought
//! within this Envoy's limits for the request that found it). Shared by whole answers and
//! entities: one gate for everything that comes from Redis.

use crate::cache::peer::{vetted, Bounds};
use crate::config::Lifetimes;
use crate::effects::counters::Counter;
use crate::effects::host::Host;
use crate::request::key::CacheKey;
use crate::worker::ctx::Ctx;

/// The entry `sealed` holds for `key` (an entity's when `entity`), re-encoded within
/// `lifetimes`; `None` (counted as rejected) when the seal or the entry does not pass.
pub fn open(
    cx: &mut Ctx<'_, impl Host>,
    key: &CacheKey,
    (lifetimes, entity): (&Lifetimes, bool),
    sealed: &[u8],
) -> Option<Vec<u8>> {
    let (config, host) = (cx.config(), cx.host());
    let l2 = config.l2.as_ref()?;
    let bounds = Bounds {
        key,
        lifetimes,
        vary_headers: &config.vary_headers,
        max_entry_bytes: config.max_entry_bytes,
        now_ms: host.now_ms(),
        now_us: host.now_us(),
        skew_us: l2.purge_skew_ms.saturating_mul(1000),
        entity,
    };
    let opened = l2
        .fleet_key
        .open_entry(key, sealed)
        .and_then(|bytes| vetted(bytes, &bounds).ok());
    if opened.is_none() {
        host.count(Counter::L2Rejected);
    }
    opened
}
