//! Letting a paused request go, from the root context: answered with a local reply, or resumed to
//! go upstream on its own. The outcome is recorded first, because Envoy runs the request's own
//! response callbacks inside the host call, and they read it.

use crate::cache::not_stored::NotStored;
use crate::cache::status::CacheStatus;
use crate::coalesce::relay::Response;
use crate::coalesce::release::Release;
use crate::effects::counters::Counter;
use crate::effects::host::RootHost;
use crate::request::key::CacheKey;
use crate::worker::ctx::Ctx;
use crate::worker::flights::Outcome;
use crate::worker::serving::labels::{
    cdn_headers, CACHE_HEADER, KEY_HEADER, REASON_HEADER, TAGS_HEADER,
};
use crate::worker::serving::store::Stored;

/// How an answer is labelled: the `x-cache` value, and for debugging the reason and the tags.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Label<'a> {
    pub cache: CacheStatus,
    pub reason: Option<&'static str>,
    pub tags: &'a str,
}

impl Label<'_> {
    pub const COALESCED: Label<'static> = Label {
        cache: CacheStatus::Coalesced,
        reason: None,
        tags: "",
    };

    pub const STALE: Label<'static> = Label {
        cache: CacheStatus::Stale,
        reason: None,
        tags: "",
    };

    /// An entity batch answered from the entries of the prefetch it waited for.
    pub const PREFETCHED: Label<'static> = Label {
        cache: CacheStatus::Coalesced,
        reason: Some("prefetch"),
        tags: "",
    };

    /// Another Envoy's answer, found in the fleet's L2.
    pub const L2_HIT: Label<'static> = Label {
        cache: CacheStatus::Hit,
        reason: Some("l2"),
        tags: "",
    };

    /// Another Envoy's fetch, waited for through the fleet's L2.
    pub const L2_COALESCED: Label<'static> = Label {
        cache: CacheStatus::Coalesced,
        reason: Some("l2"),
        tags: "",
    };

    pub fn miss(stored: &Stored) -> Label<'_> {
        Label {
            cache: CacheStatus::Miss,
            reason: stored.not_stored.map(NotStored::as_str),
            tags: &stored.tags,
        }
    }
}

/// The labels of a flight's waiters: its leader's, and its followers'.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Labels<'a> {
    pub leader: Label<'a>,
    pub followers: Label<'a>,
    /// A purge overtook the fetch (see `Stored::overtaken`): only its leader, who asked before
    /// the purge, is answered with it.
    pub overtaken: bool,
}

impl Labels<'_> {
    /// Fetched from the origin: `MISS` (with what storing did) and `COALESCED`.
    pub fn fetched(stored: &Stored) -> Labels<'_> {
        Labels {
            leader: Label::miss(stored),
            followers: Label::COALESCED,
            overtaken: stored.overtaken,
        }
    }

    /// The same label for everyone.
    pub fn all(label: Label<'_>) -> Labels<'_> {
        Labels {
            leader: label,
            followers: label,
            overtaken: false,
        }
    }
}

/// What a paused request is answered with: a response, and how it is labelled.
#[derive(Debug, Clone, Copy)]
pub struct Labelled<'a> {
    pub response: &'a Response,
    pub label: Label<'a>,
}

impl<'a> Labelled<'a> {
    pub fn new(response: &'a Response, label: Label<'a>) -> Self {
        Labelled { response, label }
    }
}

/// Answers the paused request `context`, waiting for `key`, with `reply`.
pub fn answer(cx: &mut Ctx<'_, impl RootHost>, context: u32, key: &CacheKey, reply: Labelled<'_>) {
    let Labelled { response, label } = reply;
    let outcome = Outcome::Answered {
        cache: label.cache,
        reason: label.reason,
    };
    cx.worker(|w| w.flights.let_go(context, outcome));
    let hex;
    let mut headers: Vec<(&str, &str)> = Vec::with_capacity(response.headers.len() + 4);
    headers.extend(
        response
            .headers
            .iter()
            .map(|(n, v)| (n.as_str(), v.as_str())),
    );
    headers.push((CACHE_HEADER, label.cache.as_str()));
    if cx.config().debug_headers {
        hex = key.hex();
        headers.push((KEY_HEADER, &hex));
        if let Some(r) = label.reason {
            headers.push((REASON_HEADER, r));
        }
        if !label.tags.is_empty() {
            headers.push((TAGS_HEADER, label.tags));
        }
    }
    // The response carries its entry's tags, whoever it goes to (see `shared_fetch::finish`).
    let cdn = cdn_headers(cx.config(), &response.tags, cx.host());
    headers.extend(cdn.iter().map(|(n, v)| (n.as_str(), v.as_str())));
    let host = cx.host();
    if host.answer(context, response.status, headers, &response.body) {
        if label.cache == Label::COALESCED.cache {
            host.count(Counter::Coalesced);
        }
        if label.cache == Label::STALE.cache {
            host.count(Counter::StaleServed);
        }
    } else {
        // The client went away while waiting.
        cx.worker(|w| w.flights.forget(context));
    }
}

/// Lets the paused request `context` go upstream on its own; `reason` shows in the debug header.
pub fn release(cx: &mut Ctx<'_, impl RootHost>, context: u32, reason: Release) {
    cx.worker(|w| w.flights.let_go(context, Outcome::Released(reason)));
    if !cx.host().resume(context) {
        cx.worker(|w| w.flights.forget(context));
    }
}
