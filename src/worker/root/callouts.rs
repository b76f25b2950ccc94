//! Root: a callout came back; who sent it decides who reads it (the origin fetch, an L2 lookup,
//! an L2 write, the purge feed). Its headers are read here, once, for all of them; nothing is
//! read after a reset: that would trap the VM.

use crate::effects::host::RootHost;
use crate::fleet::calls::Call;
use crate::worker::callout::Returned;
use crate::worker::ctx::Ctx;
use crate::worker::entities::plug::Entities;
use crate::worker::fleet::ask::{on_answer, AfterLookup};
use crate::worker::fleet::feed::{on_page, on_snapshot};
use crate::worker::fleet::write::on_written;
use crate::worker::flights::answer::{Label, Labels};
use crate::worker::flights::shared_fetch::{finish, on_fetch_callout, to_origin_or_refused};

pub fn on_callout(
    cx: &mut Ctx<'_, impl RootHost>,
    token: u32,
    num_headers: usize,
    body_size: usize,
) {
    let call = cx.worker(|w| w.l2.take(token));
    let returned = Returned::read(cx.host(), num_headers, body_size);
    let Some(call) = call else {
        return on_fetch_callout(cx, &Entities, token, returned);
    };
    match call {
        Call::Lookup(fetch) => {
            let next = on_answer(cx, fetch, false, returned);
            after_lookup(cx, next);
        }
        Call::Wait(fetch) => {
            let next = on_answer(cx, fetch, true, returned);
            after_lookup(cx, next);
        }
        Call::Write | Call::Purge(_) => on_written(cx, call, returned.headers.as_deref()),
        Call::Feed => on_page(cx, &returned),
        Call::Snapshot => on_snapshot(cx, &returned),
    }
}

/// What L2's answer to a flight's lookup leaves the root to do.
fn after_lookup(cx: &mut Ctx<'_, impl RootHost>, next: AfterLookup) {
    match next {
        AfterLookup::Waiting => {}
        AfterLookup::Hit {
            fetch,
            response,
            waited,
        } => {
            let label = if waited {
                Label::L2_COALESCED
            } else {
                Label::L2_HIT
            };
            finish(cx, &Entities, &fetch, Ok(response), &Labels::all(label));
        }
        AfterLookup::Origin(fetch) => to_origin_or_refused(cx, &Entities, fetch),
    }
}
