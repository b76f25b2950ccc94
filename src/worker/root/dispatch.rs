//! Root: sends what this worker's requests queued (a callout made by a request dies with that
//! request): claimed fetches, to L2 first when there is one, else to the origin; and L2 writes.
//! Everything is sent before anyone is answered: answering switches the effective context.

use crate::coalesce::upstream::L2Role;
use crate::effects::host::RootHost;
use crate::worker::admin::mutation_purge;
use crate::worker::admin::purge;
use crate::worker::ctx::Ctx;
use crate::worker::entities::plug::Entities;
use crate::worker::fleet::ask::ask;
use crate::worker::fleet::write::flush;
use crate::worker::flights::shared_fetch::{refused, to_origin};

pub fn dispatch_pending(cx: &mut Ctx<'_, impl RootHost>) {
    let pending = cx.worker(|w| w.flights.take_queued());
    let mut refusals = Vec::new();
    for fetch in pending {
        let fetch = match (&cx.config().l2, fetch.l2) {
            (Some(l2), L2Role::Ask) => match ask(cx, l2, fetch, false) {
                Ok(()) => continue,
                Err(fetch) => *fetch,
            },
            _ => fetch,
        };
        if let Err(fetch) = to_origin(cx, fetch) {
            refusals.push(fetch);
        }
    }
    flush(cx);
    let now_ms = cx.host().now_ms();
    mutation_purge::apply_owed(cx);
    purge::answer_held(cx, now_ms);
    for fetch in refusals {
        refused(cx, &Entities, &fetch);
    }
}
