//! The purge a successful mutation's answer implies: what it changed (the tags its origin
//! declares, or the objects of its answer read through the operation's shape), within each
//! worker's budget, applied as the purge API's are (`purge::apply_at`), and kept by the worker
//! when shared data refuses it.

use crate::config::{Config, MutationInvalidation};
use crate::effects::counters::Counter;
use crate::effects::host::Host;
use crate::invalidate::marks::{tag_hash, Target};
use crate::invalidate::mutation::{extension_tags, Coarse, PurgePlan};
use crate::invalidate::shape::{find_in_shaped_answer, ResponseShape};
use crate::worker::admin::purge::{apply_at, Fleet};
use crate::worker::ctx::Ctx;
use crate::worker::state::OWED_PURGES;
use crate::worker::to_root::request_dispatch;

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
}
