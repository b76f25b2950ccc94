//! Loading a configuration into a worker: parse and validate it (a bad one is refused with a log
//! line naming the field), reset what was derived from the old one, and prepare coalescing.

use crate::config::{Config, ConfigError};
use crate::effects::host::{LogLevel, RootHost};
use crate::request::key::SlotKey;
use crate::worker::ctx::Ctx;
use crate::worker::root::tick::heartbeat;
use crate::worker::state::{Plugin, Worker};
use std::cell::RefCell;

pub const NO_QUEUE_LOG: &str = "graphql-cache: no wake-up queue; coalescing off";
pub const ADOPT_FAILED_LOG: &str =
    "graphql-cache: could not record the cache's layout in shared data; an older table may keep its memory";

/// The wake-up queue name of the VM with id `id` (unique per VM, so each gets its own).
pub fn queue_name(id: u64) -> String {
    format!("graphql-cache/wake/{id:016x}")
}

/// The plugin a configuration makes, with what `worker` derived from the old one reset. Given the
/// worker and the host apart, not a `Ctx`: the plugin a `Ctx` holds is made here.
pub fn configure(
    bytes: &[u8],
    worker: &RefCell<Worker>,
    host: &impl RootHost,
) -> Result<Plugin, ConfigError> {
    let config = Config::parse_with_env(bytes, &|name| host.env(name)).inspect_err(|e| {
        host.log(LogLevel::Error, &format!("graphql-cache: {e}"));
    })?;
    let plugin = Plugin::new(config, slot_key(host));
    let mut cx = Ctx::new(&plugin, worker, host);
    cx.worker(|w| w.reconfigure(&plugin.config));
    if plugin.table.adopt(host).is_err() {
        // Only the old table's memory stays taken; lookups and stores are checked as always.
        host.log(LogLevel::Warn, ADOPT_FAILED_LOG);
    }
    if plugin.config.coalesce {
        ensure_queue(&mut cx);
        plugin.flights.precreate(cx.host());
        // Alive from the start: a flight led before the first tick is followed, not taken over.
        let now_ms = cx.host().now_ms();
        heartbeat(&mut cx, now_ms);
    }
    if plugin.config.invalidation_on() {
        plugin.purges.precreate(cx.host());
    }
    Ok(plugin)
}

const SECRET_KEY: &str = "graphql-cache/v1/slot-secret";
/// See `coalesce::flights`: creating a key with this token never overwrites one just created.
const CREATE_CAS: u32 = u32::MAX;

/// The deployment's slot secret: made once, by the first VM that looks, from WASI's randomness,
/// and shared by every worker (they must agree on where a key lives). If shared data cannot
/// hold it, slots are still addressed, only guessably.
pub fn slot_key(host: &impl RootHost) -> SlotKey {
    let read = || {
        let bytes = host.get(SECRET_KEY)?;
        let k0 = u64::from_le_bytes(bytes.get(..8)?.try_into().ok()?);
        let k1 = u64::from_le_bytes(bytes.get(8..16)?.try_into().ok()?);
        Some(SlotKey(k0, k1))
    };
    if let Some(key) = read() {
        return key;
    }
    let mut fresh = host.random_u64().to_le_bytes().to_vec();
    fresh.extend_from_slice(&host.random_u64().to_le_bytes());
    // A mismatch: another VM made it first; use theirs.
    let _ = host.set_cas(SECRET_KEY, &fresh, Some(CREATE_CAS));
    read().unwrap_or_default()
}

fn ensure_queue(cx: &mut Ctx<'_, impl RootHost>) {
    let (queue, id) = cx.worker(|w| (w.queue, w.id));
    if queue.is_some() {
        return;
    }
    match cx.host().register_queue(&queue_name(id)) {
        Some(token) => cx.worker(|w| w.queue = Some(token)),
        None => cx.host().log(LogLevel::Warn, NO_QUEUE_LOG),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::effects::fake::FakeHost;

    #[test]
    fn every_worker_of_an_envoy_agrees_on_one_random_secret() {
        let a = FakeHost::new();
        let b = FakeHost::sibling(&a);
        let ka = slot_key(&a);
        assert_ne!(ka, SlotKey::default());
        assert_eq!(slot_key(&b), ka, "the second VM reads the first one's");
        assert_ne!(
            slot_key(&FakeHost::new()),
            ka,
            "another Envoy, another secret"
        );
    }
}
