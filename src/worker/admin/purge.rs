//! Purging, from a worker: the purge API (answered by the filter itself, never sent upstream nor
//! cached). It, and the purge a successful mutation's answer implies (`mutation_purge`), end in
//! [`apply`]: once it returns, no worker serves what was purged.

use crate::config::{Config, PurgeApi};
use crate::effects::counters::Counter;
use crate::effects::host::{Host, RequestHost, RootHost};
use crate::fleet::commits::HeldPurge;
use crate::invalidate::marks::{tag_hash, Target};
use crate::invalidate::purge_request::{authorized, parse_selectors, Refusal};
use crate::request::http::split_path;
use crate::worker::ctx::Ctx;
use crate::worker::fleet::write::queue_purge;
use crate::worker::serving::marks::mark;
use crate::worker::timer::tick_soon;
use crate::worker::to_root::request_dispatch;

/// What the purge API does with a request's headers.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum AtHeaders {
    /// Answered already (refused).
    Answered,
    /// Authorized: its body holds the selectors.
    NeedBody,
}

/// The purge API's path, if `path` (with its query string) is it.
pub fn purge_api<'a>(config: &'a Config, raw_path: &[u8]) -> Option<&'a PurgeApi> {
    admin_api(config, raw_path).and_then(|(call, api)| (call == Admin::Purge).then_some(api))
}

/// The admin endpoints, behind one bearer token: purge, and explain.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Admin {
    Purge,
    Explain,
    WhatIf,
}

impl Admin {
    fn name(self) -> &'static str {
        match self {
            Admin::Purge => "the purge API",
            Admin::Explain => "the explain endpoint",
            Admin::WhatIf => "the what-if route",
        }
    }

    fn body(self) -> &'static str {
        match self {
            Admin::Purge => "a JSON array of selectors",
            Admin::Explain => "a JSON object describing a request",
            Admin::WhatIf => "a JSON object of candidate settings",
        }
    }
}

/// Which admin endpoint `raw_path` names, if any.
pub fn admin_api<'a>(config: &'a Config, raw_path: &[u8]) -> Option<(Admin, &'a PurgeApi)> {
    let api = config.purge.as_ref()?;
    let path = split_path(std::str::from_utf8(raw_path).ok()?).0;
    if path == api.path {
        return Some((Admin::Purge, api));
    }
    if path == api.what_if_path {
        return Some((Admin::WhatIf, api));
    }
    (path == api.explain_path).then_some((Admin::Explain, api))
}

/// Checks a purge request's method and token; refusals are answered here.
pub fn at_headers(
    (call, api): (Admin, &PurgeApi),
    host: &impl RequestHost,
    end_of_stream: bool,
) -> AtHeaders {
    let method = host.request_header(":method").unwrap_or_default();
    let refusal = if method != b"POST" {
        Some(Refusal {
            status: 405,
            message: format!("{} takes POST", call.name()),
        })
    } else if !authorized(
        host.request_header("authorization").as_deref(),
        api.token.expose(),
    ) {
        Some(Refusal {
            status: 401,
            message: "missing or wrong bearer token".into(),
        })
    } else if end_of_stream {
        Some(Refusal {
            status: 400,
            message: format!("the body must be {}", call.body()),
        })
    } else {
        None
    };
    match refusal {
        Some(r) => {
            refuse(host, &r);
            AtHeaders::Answered
        }
        None => AtHeaders::NeedBody,
    }
}

/// The longest `?wait_ms=` a purge may wait for the fleet's log to hold it.
pub const MAX_PURGE_WAIT_MS: u64 = 10_000;

/// `?wait_ms=` of the purge API's path: how long its answer may wait for the fleet's log.
fn wait_ms(raw_path: &[u8]) -> Result<u64, Refusal> {
    let path = std::str::from_utf8(raw_path).unwrap_or_default();
    let query = split_path(path).1.unwrap_or_default();
    let mut wait = 0;
    for pair in query.split('&').filter(|p| !p.is_empty()) {
        let (name, value) = pair.split_once('=').unwrap_or((pair, ""));
        if name != "wait_ms" {
            continue;
        }
        wait = value
            .parse::<u64>()
            .ok()
            .filter(|&ms| ms <= MAX_PURGE_WAIT_MS)
            .ok_or_else(|| Refusal {
                status: 400,
                message: format!(
                    "wait_ms must be a number of milliseconds up to {MAX_PURGE_WAIT_MS}"
                ),
            })?;
    }
    Ok(wait)
}

/// The whole body of an authorized purge request: applies it all or nothing, and answers (or,
/// with `?wait_ms=`, holds the request until the fleet's log has the purge or the wait is over:
/// see [`answer_held`]).
pub fn with_body(cx: &mut Ctx<'_, impl RequestHost>, context: u32, body: &[u8]) {
    let path = cx.host().request_header(":path").unwrap_or_default();
    let (selectors, wait_ms) = match parse_selectors(body).and_then(|s| Ok((s, wait_ms(&path)?))) {
        Ok(parsed) => parsed,
        Err(r) => return refuse(cx.host(), &r),
    };
    let targets: Vec<(Target, bool)> = selectors
        .iter()
        .flat_map(|s| {
            let targets: Vec<Target> = if s.tags.is_empty() {
                vec![Target::All]
            } else {
                s.tags.iter().map(|t| Target::Tag(tag_hash(t))).collect()
            };
            targets.into_iter().map(move |t| (t, s.soft))
        })
        .collect();
    let fleet = match apply(cx, &targets) {
        Ok(Fleet::Unqueued) => {
            return refuse(
                cx.host(),
                &Refusal {
                    status: 503,
                    message: "purged on this Envoy, but not queued for the fleet; retry".into(),
                },
            )
        }
        Ok(fleet) => fleet,
        Err(_) => {
            return refuse(
                cx.host(),
                &Refusal {
                    status: 503,
                    message: "the purge could not be written to shared data; retry".into(),
                },
            )
        }
    };
    cx.host().count(Counter::Purges);
    let purged = selectors.len();
    match fleet {
        Fleet::Pending { place, .. } if wait_ms > 0 => {
            let deadline_ms = cx.host().now_ms().saturating_add(wait_ms);
            let held = HeldPurge {
                context,
                place,
                purged,
                deadline_ms,
            };
            if !cx.worker(|w| w.held_commits.hold(held)) {
                answer_owed(cx.host(), purged, owed(cx.host()));
            }
        }
        // Applied here; the other Envoys have it once the fleet's purge log does (tens of ms
        // after that): until then it is owed, and `202` says so.
        Fleet::Pending { owed, .. } => answer_owed(cx.host(), purged, owed),
        _ => {
            let body = format!(r#"{{"purged":{purged}}}"#);
            cx.host().respond(200, json_headers(), body.as_bytes());
        }
    }
}

fn owed(host: &impl Host) -> usize {
    crate::fleet::outbox::pending(host)
}

fn answer_owed(host: &impl RequestHost, purged: usize, owed: usize) {
    let body = format!(r#"{{"purged":{purged},"fleet":"owed","owed":{owed}}}"#);
    host.respond(202, json_headers(), body.as_bytes());
}

/// Root: answers the held purge requests whose purge the fleet's log now holds (`200`,
/// `"fleet":"committed"`) or whose wait is over (`202`, still owed).
pub fn answer_held(cx: &mut Ctx<'_, impl RootHost>, now_ms: u64) {
    if cx.worker(|w| w.held_commits.is_empty()) {
        return;
    }
    let owed_from = crate::fleet::outbox::owed_from(cx.host());
    let due = cx.worker(|w| w.held_commits.take_due(owed_from, now_ms));
    let host = cx.host();
    for (held, committed) in due {
        let body = if committed {
            format!(r#"{{"purged":{},"fleet":"committed"}}"#, held.purged)
        } else {
            format!(
                r#"{{"purged":{},"fleet":"owed","owed":{}}}"#,
                held.purged,
                owed(host)
            )
        };
        let status = if committed { 200 } else { 202 };
        host.answer(held.context, status, json_headers(), body.as_bytes());
    }
    // Those still waiting are looked at again in a millisecond, not at the next tick.
    if !cx.worker(|w| w.held_commits.is_empty()) {
        tick_soon(cx);
    }
}

/// What a purge left for the rest of the fleet.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Fleet {
    /// No fleet (no L2).
    Alone,
    /// Owed to the fleet's purge log (`owed` records in all), at this place in the outbox.
    Pending { owed: usize, place: u64 },
    /// Applied here, but could not be queued for the fleet.
    Unqueued,
}

/// Refuses a purge request; nothing was purged.
pub fn refuse(host: &impl RequestHost, refusal: &Refusal) {
    host.count(Counter::PurgeRejected);
    let body = serde_json::json!({ "error": refusal.message }).to_string();
    let mut headers = json_headers();
    if refusal.status == 401 {
        headers.push(("www-authenticate", "Bearer"));
    }
    if refusal.status == 405 {
        headers.push(("allow", "POST"));
    }
    host.respond(refusal.status, headers, body.as_bytes());
}

pub fn json_headers() -> Vec<(&'static str, &'static str)> {
    vec![
        ("content-type", "application/json"),
        ("cache-control", "no-store"),
    ]
}

/// Marks the targets purged now (the purge API's and mutations' purges), and owes them to the
/// fleet's purge log.
pub fn apply(
    cx: &mut Ctx<'_, impl Host>,
    targets: &[(Target, bool)],
) -> Result<Fleet, crate::effects::store::StoreError> {
    let now_us = cx.host().now_us();
    apply_at(cx, targets, now_us)
}

/// [`apply`], for a purge made at `at_us`.
pub(crate) fn apply_at(
    cx: &mut Ctx<'_, impl Host>,
    targets: &[(Target, bool)],
    at_us: u64,
) -> Result<Fleet, crate::effects::store::StoreError> {
    let timed: Vec<(Target, bool, u64)> = targets
        .iter()
        .map(|&(target, soft)| (target, soft, at_us))
        .collect();
    mark(cx, &timed)?;
    // The rest of the fleet applies it at the same instant, from the L2 purge log.
    Ok(match queue_purge(cx, at_us, targets) {
        None => Fleet::Alone,
        Some(Ok(pushed)) => {
            request_dispatch(cx);
            Fleet::Pending {
                owed: pushed.pending,
                place: pushed.place,
            }
        }
        Some(Err(_)) => Fleet::Unqueued,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_purge_path_ignores_the_query_string_only() {
        let c = Config::parse(
            br#"{"purge_path":"/graphql-cache/purge","purge_token":"0123456789abcdef"}"#,
        )
        .unwrap();
        assert!(purge_api(&c, b"/graphql-cache/purge").is_some());
        assert!(purge_api(&c, b"/graphql-cache/purge?x=1").is_some());
        assert!(purge_api(&c, b"/graphql-cache/purge/x").is_none());
        assert!(purge_api(&Config::default(), b"/graphql-cache/purge").is_none());
    }
}
