//! Loading a configuration into a worker: parse and validate it (a bad one is refused with a log
//! line naming the field), reset what was derived from the old one, and prepare coalescing.

use crate::config::{Config, ConfigError};
use crate::effects::host::{Host, LogLevel};
use crate::worker::state::{Plugin, Worker};
use crate::worker::tick::heartbeat;
use std::cell::RefCell;

pub const NO_QUEUE_LOG: &str = "graphql-cache: no wake-up queue; coalescing off";

/// The wake-up queue name of the VM with id `id` (unique per VM, so each gets its own).
pub fn queue_name(id: u64) -> String {
    format!("graphql-cache/wake/{id:016x}")
}

pub fn configure(
    bytes: &[u8],
    worker: &RefCell<Worker>,
    host: &impl Host,
) -> Result<Plugin, ConfigError> {
    let config = Config::parse(bytes).inspect_err(|e| {
        host.log(LogLevel::Error, &format!("graphql-cache: {e}"));
    })?;
    worker.borrow_mut().reconfigure(&config);
    let plugin = Plugin::new(config);
    if plugin.config.coalesce {
        ensure_queue(worker, host);
        plugin.flights.precreate(host);
        // Alive from the start: a flight led before the first tick is followed, not taken over.
        heartbeat(&plugin, worker, host, host.now_ms());
    }
    if plugin.config.invalidation_on() {
        plugin.purges.precreate(host);
    }
    Ok(plugin)
}

fn ensure_queue(worker: &RefCell<Worker>, host: &impl Host) {
    let (queue, id) = {
        let w = worker.borrow();
        (w.queue, w.id)
    };
    if queue.is_some() {
        return;
    }
    match host.register_queue(&queue_name(id)) {
        Some(token) => worker.borrow_mut().queue = Some(token),
        None => host.log(LogLevel::Warn, NO_QUEUE_LOG),
    }
}
