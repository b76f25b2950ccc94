//! Purging, from a worker: the purge API (answered by the filter itself, never sent upstream nor
//! cached) and the purge a successful mutation's answer implies. Both end in [`apply`]: once it
//! returns, no worker serves what was purged.

use crate::config::{Config, MutationInvalidation, PurgeApi};
use crate::effects::counters::Counter;
use crate::effects::host::{Host, RequestHost};
use crate::invalidate::marks::{tag_hash, Target};
use crate::invalidate::purge::{authorized, parse_selectors, Refusal};
use crate::invalidate::tags::{entity_purge_tags, find_in_answer, type_purge_tags};
use crate::request::http::split_path;
use crate::worker::l2_write::queue_purge;
use crate::worker::lookup::refresh_marks;
use crate::worker::shared_fetch::request_dispatch;
use crate::worker::state::{Plugin, Worker};
use std::cell::RefCell;

/// What the purge API does with a request's headers.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum AtHeaders {
    /// Not the purge path.
    NotPurge,
    /// Answered already (refused).
    Answered,
    /// Authorized: its body holds the selectors.
    NeedBody,
}

/// The purge API's path, if `path` (with its query string) is it.
pub fn purge_api<'a>(config: &'a Config, raw_path: &[u8]) -> Option<&'a PurgeApi> {
    let api = config.purge.as_ref()?;
    let path = std::str::from_utf8(raw_path).ok()?;
    (split_path(path).0 == api.path).then_some(api)
}

/// Checks a purge request's method and token; refusals are answered here.
pub fn at_headers(api: &PurgeApi, host: &impl RequestHost, end_of_stream: bool) -> AtHeaders {
    let method = host.request_header(":method").unwrap_or_default();
    let refusal = if method != b"POST" {
        Some(Refusal {
            status: 405,
            message: "the purge API takes POST".into(),
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
            message: "the body must be a JSON array of selectors".into(),
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

/// The whole body of an authorized purge request: applies it all or nothing, and answers.
pub fn with_body(plugin: &Plugin, worker: &RefCell<Worker>, host: &impl RequestHost, body: &[u8]) {
    let selectors = match parse_selectors(body) {
        Ok(s) => s,
        Err(r) => return refuse(host, &r),
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
    let fleet = match apply(plugin, worker, host, &targets) {
        Ok(Fleet::Unqueued) => {
            return refuse(
                host,
                &Refusal {
                    status: 503,
                    message: "purged on this Envoy, but not queued for the fleet; retry".into(),
                },
            )
        }
        Ok(fleet) => fleet,
        Err(_) => {
            return refuse(
                host,
                &Refusal {
                    status: 503,
                    message: "the purge could not be written to shared data; retry".into(),
                },
            )
        }
    };
    host.count(Counter::Purges);
    let body = match fleet {
        // Other Envoys have it once the fleet's purge log does, within a second after that.
        Fleet::Pending(n) => format!(
            r#"{{"purged":{},"fleet":"pending","pending":{n}}}"#,
            selectors.len()
        ),
        _ => format!(r#"{{"purged":{}}}"#, selectors.len()),
    };
    host.respond(200, json_headers(), body.as_bytes());
}

/// What a purge left for the rest of the fleet.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Fleet {
    /// No fleet (no L2).
    Alone,
    /// Owed to the fleet's purge log, with this many purges in all.
    Pending(usize),
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

fn json_headers() -> Vec<(&'static str, &'static str)> {
    vec![
        ("content-type", "application/json"),
        ("cache-control", "no-store"),
    ]
}

/// Marks the targets purged now, and reads the marks back so this worker's copies go at once.
pub fn apply(
    plugin: &Plugin,
    worker: &RefCell<Worker>,
    host: &impl Host,
    targets: &[(Target, bool)],
) -> Result<Fleet, crate::effects::store::StoreError> {
    let now_us = host.now_us();
    plugin.purges.apply(host, targets, now_us)?;
    host.raise_purge_signal();
    refresh_marks(plugin, worker, host);
    // The rest of the fleet applies it at the same instant, from the L2 purge log.
    Ok(match queue_purge(plugin, host, now_us, targets) {
        None => Fleet::Alone,
        Some(Ok(pushed)) => {
            request_dispatch(worker, host);
            Fleet::Pending(pushed.pending)
        }
        Some(Err(_)) => Fleet::Unqueued,
    })
}

/// What a mutation's answer purges: `None` unless it is a clean `200` with `data`.
pub fn mutation_targets(config: &Config, status: u16, body: &[u8]) -> Option<Vec<(Target, bool)>> {
    if status != 200 || config.mutation_invalidation == MutationInvalidation::Off {
        return None;
    }
    if crate::cache::storable::body_storable(body).is_err() {
        return None;
    }
    let found = find_in_answer(body, &config.key_fields)?;
    let mut tags: Vec<String> = match config.mutation_invalidation {
        MutationInvalidation::Entity => found
            .entities
            .iter()
            .flat_map(|(t, id)| entity_purge_tags(t, id))
            .collect(),
        MutationInvalidation::Type => found
            .types
            .iter()
            .flat_map(|t| type_purge_tags(t))
            .collect(),
        MutationInvalidation::Off => Vec::new(),
    };
    tags.sort_unstable();
    tags.dedup();
    (!tags.is_empty()).then(|| {
        tags.iter()
            .map(|t| (Target::Tag(tag_hash(t)), false))
            .collect()
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn mutations_purge_what_they_return_by_mode() {
        let body = br#"{"data":{"updateUser":{"__typename":"User","id":"1","name":"N"}}}"#;
        let entity = Config::default();
        let entity_targets = mutation_targets(&entity, 200, body).unwrap();
        assert!(entity_targets.contains(&(Target::Tag(tag_hash("entity:User:1")), false)));
        assert!(entity_targets.contains(&(Target::Tag(tag_hash("entities:User")), false)));
        let by_type = Config::parse(br#"{"mutation_invalidation":"type"}"#).unwrap();
        let type_targets = mutation_targets(&by_type, 200, body).unwrap();
        assert!(type_targets.contains(&(Target::Tag(tag_hash("type:User")), false)));
        assert!(!type_targets.contains(&(Target::Tag(tag_hash("entity:User:1")), false)));
        let off = Config::parse(br#"{"mutation_invalidation":"off"}"#).unwrap();
        assert_eq!(mutation_targets(&off, 200, body), None);
    }

    #[test]
    fn failed_mutations_purge_nothing() {
        let c = Config::default();
        let with_errors =
            br#"{"data":{"updateUser":{"__typename":"User","id":"1"}},"errors":[{"message":"x"}]}"#;
        assert_eq!(mutation_targets(&c, 200, with_errors), None);
        assert_eq!(
            mutation_targets(&c, 500, br#"{"data":{"u":{"__typename":"User","id":"1"}}}"#),
            None
        );
        assert_eq!(mutation_targets(&c, 200, br#"{"data":{"bump":3}}"#), None);
        assert_eq!(mutation_targets(&c, 200, b"<html>"), None);
    }

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
