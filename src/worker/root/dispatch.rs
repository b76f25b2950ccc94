//! Root: sends what this worker's requests queued (a callout made by a request dies with that
//! request): claimed fetches, to L2 first when there is one, else to the origin; and L2 writes.
//! Everything is sent before anyone is answered: answering switches the effective context.

use crate::coalesce::upstream::L2Role;
use crate::effects::host::Host;
use crate::worker::l2::ask::ask;
use crate::worker::l2::write::flush;
use crate::worker::root::shared_fetch::{refused, to_origin};
use crate::worker::state::{Plugin, Worker};
use std::cell::RefCell;

pub fn dispatch_pending(plugin: &Plugin, worker: &RefCell<Worker>, host: &impl Host) {
    let pending = std::mem::take(&mut worker.borrow_mut().pending);
    let mut refusals = Vec::new();
    for fetch in pending {
        let fetch = match (&plugin.config.l2, fetch.l2) {
            (Some(l2), L2Role::Ask) => match ask(plugin, worker, host, l2, fetch, false) {
                Ok(()) => continue,
                Err(fetch) => *fetch,
            },
            _ => fetch,
        };
        if let Err(fetch) = to_origin(plugin, worker, host, fetch) {
            refusals.push(fetch);
        }
    }
    flush(plugin, worker, host);
    for fetch in refusals {
        refused(plugin, worker, host, &fetch);
    }
}
