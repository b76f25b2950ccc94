//! Root: a callout came back; who sent it decides who reads it (the origin fetch, an L2 lookup,
//! an L2 write, the purge feed). Nothing is read after a reset: that would trap the VM.

use crate::effects::host::Host;
use crate::fleet::calls::Call;
use crate::worker::l2::ask::{on_answer, Answered};
use crate::worker::l2::feed::on_page;
use crate::worker::l2::write::on_written;
use crate::worker::root::shared_fetch::on_fetch_callout;
use crate::worker::state::{Plugin, Worker};
use std::cell::RefCell;

pub fn on_callout(
    plugin: &Plugin,
    worker: &RefCell<Worker>,
    host: &impl Host,
    token: u32,
    num_headers: usize,
    body_size: usize,
) {
    let call = worker.borrow_mut().l2.take(token);
    let Some(call) = call else {
        return on_fetch_callout(plugin, worker, host, token, num_headers, body_size);
    };
    let headers = (num_headers > 0).then(|| host.callout_headers());
    match call {
        Call::Lookup(fetch) => on_answer(
            plugin,
            worker,
            host,
            fetch,
            false,
            Answered { headers, body_size },
        ),
        Call::Wait(fetch) => on_answer(
            plugin,
            worker,
            host,
            fetch,
            true,
            Answered { headers, body_size },
        ),
        Call::Write | Call::Purge(_) => on_written(plugin, worker, host, call, headers.as_deref()),
        Call::Feed => on_page(plugin, worker, host, headers.as_deref(), body_size),
    }
}
