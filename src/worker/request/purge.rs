//! Purging, from a worker: the purge API (answered by the filter itself, never sent upstream nor
//! cached) and the purge a successful mutation's answer implies. Both end in [`apply`]: once it
//! returns, no worker serves what was purged.

use crate::config::{Config, MutationInvalidation, PurgeApi};
use crate::effects::counters::Counter;
use crate::effects::host::{Host, RequestHost};
use crate::fleet::commits::HeldPurge;
use crate::invalidate::marks::{tag_hash, Target};
use crate::invalidate::mutation::{extension_tags, Coarse, PurgePlan};
use crate::invalidate::purge_request::{authorized, parse_selectors, Refusal};
use crate::invalidate::shape::{find_in_shaped_answer, ResponseShape};
use crate::request::http::split_path;
use crate::worker::ctx::Ctx;
use crate::worker::l2::write::queue_purge;
use crate::worker::marks::mark;
use crate::worker::root::shared_fetch::request_dispatch;
use crate::worker::root::timer::tick_soon;
use crate::worker::state::OWED_PURGES;

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
}

impl Admin {
    fn name(self) -> &'static str {
        match self {
            Admin::Purge => "the purge API",
            Admin::Explain => "the explain endpoint",
        }
    }

    fn body(self) -> &'static str {
        match self {
            Admin::Purge => "a JSON array of selectors",
            Admin::Explain => "a JSON object describing a request",
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
pub fn answer_held(cx: &mut Ctx<'_, impl Host>, now_ms: u64) {
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
fn apply_at(
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

/// What a mutation's answer says changed: `None` unless it is a clean `200` with `data`. Tags
/// the origin declares (`header_tags`, read from its headers, and `extensions`) win over the
/// objects of the answer, which are read through the operation's `shape` only: without one they
/// purge nothing (see `invalidate::shape`).
pub fn mutation_plan(
    config: &Config,
    status: u16,
    body: &[u8],
    shape: Option<&ResponseShape>,
    header_tags: &[String],
) -> Option<PurgePlan> {
    if status != 200 || config.mutation_invalidation == MutationInvalidation::Off {
        return None;
    }
    if crate::cache::storable::body_storable(body).is_err() {
        return None;
    }
    let answer: serde_json::Value = serde_json::from_slice(body).ok()?;
    if !answer.get("data").is_some_and(serde_json::Value::is_object) {
        return None;
    }
    let by_type = config.mutation_invalidation == MutationInvalidation::Type;
    let mut declared = header_tags.to_vec();
    declared.extend(extension_tags(&config.mutation_purges.tags_from, &answer));
    if let Some(plan) = PurgePlan::declared(&declared, by_type) {
        return Some(plan);
    }
    let found = find_in_shaped_answer(&answer, shape?, &config.key_fields)?;
    let plan = PurgePlan::of(&found.types, &found.entities, by_type);
    (!plan.tags.is_empty()).then_some(plan)
}

/// The marks a mutation's purge makes: its tags while the budget lasts and they are few enough,
/// its coarser form otherwise (`true`: collapsed).
pub fn mutation_targets(plan: &PurgePlan, within_budget: bool) -> (Vec<(Target, bool)>, bool) {
    if within_budget && !plan.too_large() {
        let targets = plan
            .tags
            .iter()
            .map(|t| (Target::Tag(tag_hash(t)), false))
            .collect();
        return (targets, false);
    }
    let targets = match plan.collapse() {
        Coarse::Tags(tags) => tags
            .iter()
            .map(|t| (Target::Tag(tag_hash(t)), false))
            .collect(),
        Coarse::All => vec![(Target::All, false)],
    };
    (targets, true)
}

/// Applies a mutation's purge, collapsed when this worker's budget is spent.
pub fn after_mutation(cx: &mut Ctx<'_, impl Host>, plan: &PurgePlan) {
    let now_us = cx.host().now_us();
    let within_budget = cx.worker(|w| w.mutation_budget.take(now_us));
    let (targets, collapsed) = mutation_targets(plan, within_budget);
    if collapsed {
        cx.host().count(Counter::MutationPurgesCollapsed);
    }
    match apply_at(cx, &targets, now_us) {
        Ok(Fleet::Unqueued) | Err(_) => owe(cx, now_us, targets),
        Ok(_) => cx.host().count(Counter::MutationPurges),
    }
}

/// A mutation's purge that shared data refused (to mark, or to queue for the fleet) is kept by
/// this worker and applied again by its root: the mutation's answer is on its way, and nothing
/// it changed may be served from here on.
fn owe(cx: &mut Ctx<'_, impl Host>, at_us: u64, targets: Vec<(Target, bool)>) {
    cx.host().count(Counter::MutationPurgesOwed);
    cx.worker(|w| {
        w.owed_purges.push((at_us, targets));
        if w.owed_purges.len() > OWED_PURGES {
            let latest = w
                .owed_purges
                .iter()
                .map(|(at, _)| *at)
                .max()
                .unwrap_or(at_us);
            w.owed_purges = vec![(latest, vec![(Target::All, false)])];
        }
    });
    request_dispatch(cx);
}

/// Root: applies the mutation purges this worker still owes, oldest first; what fails again
/// stays owed.
pub fn apply_owed(cx: &mut Ctx<'_, impl Host>) {
    let owed = cx.worker(|w| std::mem::take(&mut w.owed_purges));
    for (at_us, targets) in owed {
        match apply_at(cx, &targets, at_us) {
            Ok(Fleet::Unqueued) | Err(_) => cx.worker(|w| w.owed_purges.push((at_us, targets))),
            Ok(_) => cx.host().count(Counter::MutationPurges),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    use crate::request::canonical::mutation_shape;

    const UPDATE: &str = r#"mutation { updateUser(id: 1, name: "N") { __typename id name } }"#;

    fn targets(config: &Config, status: u16, body: &[u8], doc: &str) -> Option<Vec<Target>> {
        let shape = mutation_shape(doc, None, config.limits()).unwrap();
        let plan = mutation_plan(config, status, body, Some(&shape), &[])?;
        Some(
            mutation_targets(&plan, true)
                .0
                .into_iter()
                .map(|t| t.0)
                .collect(),
        )
    }

    fn tag(t: &str) -> Target {
        Target::Tag(tag_hash(t))
    }

    #[test]
    fn mutations_purge_what_they_return_by_mode() {
        let body = br#"{"data":{"updateUser":{"__typename":"User","id":"1","name":"N"}}}"#;
        let entity = targets(&Config::default(), 200, body, UPDATE).unwrap();
        assert!(entity.contains(&tag("entity:User:1")));
        assert!(entity.contains(&tag("entities:User")));
        let by_type = Config::parse(br#"{"mutation_invalidation":"type"}"#).unwrap();
        let type_targets = targets(&by_type, 200, body, UPDATE).unwrap();
        assert!(type_targets.contains(&tag("type:User")));
        assert!(!type_targets.contains(&tag("entity:User:1")));
        let off = Config::parse(br#"{"mutation_invalidation":"off"}"#).unwrap();
        assert_eq!(targets(&off, 200, body, UPDATE), None);
    }

    #[test]
    fn failed_mutations_purge_nothing() {
        let c = Config::default();
        let with_errors =
            br#"{"data":{"updateUser":{"__typename":"User","id":"1"}},"errors":[{"message":"x"}]}"#;
        assert_eq!(targets(&c, 200, with_errors, UPDATE), None);
        let clean = br#"{"data":{"updateUser":{"__typename":"User","id":"1"}}}"#;
        assert_eq!(targets(&c, 500, clean, UPDATE), None);
        assert_eq!(
            targets(&c, 200, br#"{"data":{"bump":3}}"#, "mutation { bump }"),
            None
        );
        assert_eq!(targets(&c, 200, b"<html>", UPDATE), None);
    }

    #[test]
    fn a_client_s_aliases_steer_no_purge() {
        let c = Config::default();
        let attack = r#"mutation { updateProfile(bio: "Product") { __typename: bio id: handle } }"#;
        let body = br#"{"data":{"updateProfile":{"__typename":"Product","id":"1"}}}"#;
        assert_eq!(targets(&c, 200, body, attack), None);
        let type_mode = Config::parse(br#"{"mutation_invalidation":"type"}"#).unwrap();
        assert_eq!(targets(&type_mode, 200, body, attack), None);
        assert_eq!(
            mutation_plan(&c, 200, body, None, &[]),
            None,
            "no operation, no reading of the answer"
        );
    }

    #[test]
    fn tags_the_origin_declares_win() {
        let c = Config::default();
        let body = br#"{"data":{"updateUser":{"__typename":"User","id":"1"}},
            "extensions":{"cacheTags":["entity:Post:7"]}}"#;
        let shape = mutation_shape(UPDATE, None, c.limits()).unwrap();
        let plan = mutation_plan(&c, 200, body, Some(&shape), &[]).unwrap();
        assert!(plan.tags.contains(&"entity:Post:7".to_string()));
        assert!(!plan.tags.contains(&"entity:User:1".to_string()));
        let from_header = ["type:Comment".to_string()];
        let plan = mutation_plan(&c, 200, body, Some(&shape), &from_header).unwrap();
        assert!(plan.tags.contains(&"type:Comment".to_string()));
        assert!(
            plan.tags.contains(&"entity:Post:7".to_string()),
            "all sources count"
        );
        // Tags of the origin's CDN only: the answer's objects say what changed.
        let cdn = ["product-1".to_string()];
        let plain = br#"{"data":{"updateUser":{"__typename":"User","id":"1"}}}"#;
        let plan = mutation_plan(&c, 200, plain, Some(&shape), &cdn).unwrap();
        assert!(plan.tags.contains(&"entity:User:1".to_string()));
        let none = Config::parse(br#"{"mutation_tags_from":[]}"#).unwrap();
        let plan = mutation_plan(&none, 200, body, Some(&shape), &[]).unwrap();
        assert!(
            plan.tags.contains(&"entity:User:1".to_string()),
            "not asked to"
        );
    }

    #[test]
    fn past_the_budget_a_purge_collapses_to_its_types_or_all() {
        let c = Config::default();
        let body = br#"{"data":{"updateUser":{"__typename":"User","id":"1"}}}"#;
        let shape = mutation_shape(UPDATE, None, c.limits()).unwrap();
        let plan = mutation_plan(&c, 200, body, Some(&shape), &[]).unwrap();
        let (fine, collapsed) = mutation_targets(&plan, true);
        assert!(!collapsed && fine.contains(&(tag("entity:User:1"), false)));
        let (coarse, collapsed) = mutation_targets(&plan, false);
        assert!(collapsed);
        assert_eq!(coarse.len(), 2);
        assert!(coarse.contains(&(tag("type:User"), false)));
        let fields = mutation_plan(&c, 200, body, None, &["field:me".to_string()]).unwrap();
        assert_eq!(
            mutation_targets(&fields, false).0,
            vec![(Target::All, false)]
        );
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
