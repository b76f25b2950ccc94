//! A miss joins the wait for its key: this worker's wait if there is one, else the cross-worker
//! flight (following another worker's fetch, or leading a new one).

use crate::cache::storable::Asked;
use crate::coalesce::flights::Join;
use crate::coalesce::upstream::{upstream_request, SharedFetch};
use crate::coalesce::waiters::LocalJoin;
use crate::effects::counters::Counter;
use crate::effects::host::RequestHost;
use crate::request::classify::RequestHead;
use crate::request::key::CacheKey;
use crate::worker::read::fetch_cluster;
use crate::worker::shared_fetch::{abandon, request_dispatch};
use crate::worker::state::{Plugin, Worker};
use std::cell::RefCell;

/// What a miss that may coalesce does.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Joined {
    /// Paused until the root answers or releases it.
    Waiting,
    /// Go upstream alone.
    Alone,
}

/// The miss of request `context` for `key`.
pub struct Miss<'a> {
    pub context: u32,
    pub key: CacheKey,
    pub head: &'a RequestHead,
    pub body: Option<Vec<u8>>,
    pub asked: Asked,
    pub key_names_caller: bool,
    pub now: u64,
}

pub fn join(
    plugin: &Plugin,
    worker: &RefCell<Worker>,
    host: &impl RequestHost,
    miss: Miss<'_>,
) -> Joined {
    let config = &plugin.config;
    let now = miss.now;
    let key = miss.key;
    let local = worker
        .borrow_mut()
        .waiters
        .join(&key, miss.context, now, config.max_waiters);
    match local {
        LocalJoin::Joined => return Joined::Waiting,
        LocalJoin::Full => return Joined::Alone,
        LocalJoin::NoFlight => {}
    }
    let Some(cluster) = fetch_cluster(config, host, miss.head) else {
        return Joined::Alone;
    };
    let Some(request) = upstream_request(cluster, miss.head, miss.body) else {
        return Joined::Alone;
    };
    let (id, queue) = {
        let w = worker.borrow();
        match w.queue {
            Some(q) => (w.id, q),
            None => return Joined::Alone,
        }
    };
    match plugin
        .flights
        .join(host, &key, id, queue, now, plugin.lease_ms(), true)
    {
        Join::Lead => {
            {
                let mut w = worker.borrow_mut();
                w.waiters.start(key, true, miss.context, now);
                w.pending.push(SharedFetch {
                    key,
                    request,
                    asked: miss.asked,
                    dispatched_ms: 0,
                    key_names_caller: miss.key_names_caller,
                });
            }
            if !request_dispatch(worker, host) {
                {
                    let mut w = worker.borrow_mut();
                    w.waiters.take(&key);
                    w.pending.retain(|f| f.key != key);
                }
                abandon(plugin, worker, host, &key);
                return Joined::Alone;
            }
            host.count(Counter::Leaders);
        }
        Join::Follow => worker
            .borrow_mut()
            .waiters
            .start(key, false, miss.context, now),
        Join::Alone => return Joined::Alone,
    }
    Joined::Waiting
}
