//! Per-operation, per-field and per-route cache policy: how long a request's answer may be kept
//! and whether it is shared by all users or private to one.
//!
//! The rule types and their parsing are the configuration's (`config::rules`); this applies them.
//!
//! When several rules match, the most restrictive wins: any `cache: false` turns caching off, any
//! `private` makes the entry private, and the shortest TTL applies.

use crate::config::{Lifetimes, Matcher, Rule, Scope};
use crate::request::bypass::Bypass;
use crate::request::canonical::CanonicalOperation;

/// Whether a rule applies to this operation.
fn matches(rule: &Rule, op: &CanonicalOperation) -> bool {
    rule_matches(rule, op.name.as_deref(), &op.root_fields)
}

/// Whether `rule` applies to the operation named `name` selecting `root_fields`.
pub fn rule_matches(rule: &Rule, name: Option<&str>, root_fields: &[String]) -> bool {
    match &rule.matcher {
        Matcher::Operation(n) => name == Some(n.as_str()),
        Matcher::Field(field) => root_fields.iter().any(|f| f == field),
    }
}

/// What the route's metadata says (`filter_metadata.<namespace>` on the route).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct RouteOverride {
    pub ttl_seconds: Option<u64>,
    pub stale_while_revalidate_seconds: Option<u64>,
    pub stale_if_error_seconds: Option<u64>,
    pub disabled: bool,
    /// Entity mode for the route: `Some(false)` off, `Some(true)` on (see `entities::mode`).
    pub entities: Option<bool>,
}

/// The policy for one request.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RequestPolicy {
    pub ttl_seconds: u64,
    pub stale_while_revalidate_seconds: u64,
    pub stale_if_error_seconds: u64,
    pub scope: Scope,
}

/// Combines the global TTL, the route's override and the matching rules.
///
/// Scope is decided per top-level field: a field rule's scope, else the operation rule's, else
/// `default_scope`; the entry is private if any field is. So a public field next to a field no
/// rule names is only shared when the default is public.
pub fn request_policy(
    defaults: Lifetimes,
    default_scope: Scope,
    rules: &[Rule],
    op: &CanonicalOperation,
    route: RouteOverride,
) -> Result<RequestPolicy, Bypass> {
    if route.disabled {
        return Err(Bypass::RouteDisabled);
    }
    let mut rule_ttl: Option<u64> = None;
    let mut rule_swr: Option<u64> = None;
    let mut rule_sie: Option<u64> = None;
    for rule in rules.iter().filter(|r| matches(r, op)) {
        if rule.cache == Some(false) {
            return Err(Bypass::NotCachedByRule);
        }
        shortest(&mut rule_ttl, rule.ttl_seconds);
        shortest(&mut rule_swr, rule.stale_while_revalidate_seconds);
        shortest(&mut rule_sie, rule.stale_if_error_seconds);
    }
    let op_scope = combine(
        rules
            .iter()
            .filter(|r| matches!(&r.matcher, Matcher::Operation(_)) && matches(r, op)),
    );
    let field_scope = |field: &str| {
        combine(
            rules
                .iter()
                .filter(|r| matches!(&r.matcher, Matcher::Field(f) if f == field)),
        )
        .or(op_scope)
        .unwrap_or(default_scope)
    };
    let private = op.root_fields.is_empty() && op_scope.unwrap_or(default_scope) == Scope::Private
        || op
            .root_fields
            .iter()
            .any(|f| field_scope(f) == Scope::Private);
    Ok(RequestPolicy {
        ttl_seconds: pick(rule_ttl, route.ttl_seconds, defaults.ttl_seconds),
        stale_while_revalidate_seconds: pick(
            rule_swr,
            route.stale_while_revalidate_seconds,
            defaults.stale_while_revalidate_seconds,
        ),
        stale_if_error_seconds: pick(
            rule_sie,
            route.stale_if_error_seconds,
            defaults.stale_if_error_seconds,
        ),
        scope: if private {
            Scope::Private
        } else {
            Scope::Public
        },
    })
}

/// Keeps the shorter of two durations: several matching rules restrict each other.
fn shortest(acc: &mut Option<u64>, value: Option<u64>) {
    if let Some(v) = value {
        *acc = Some(acc.map_or(v, |a| a.min(v)));
    }
}

/// A route's value replaces the configured default; matching rules still apply if shorter.
fn pick(rules: Option<u64>, route: Option<u64>, default: u64) -> u64 {
    match (rules, route) {
        (Some(r), Some(t)) => r.min(t),
        (Some(r), None) => r,
        (None, Some(t)) => t,
        (None, None) => default,
    }
}

/// The scope several rules agree on: private if any says so.
fn combine<'a>(rules: impl Iterator<Item = &'a Rule>) -> Option<Scope> {
    rules
        .filter_map(|r| r.scope)
        .fold(None, |acc, s| match (acc, s) {
            (Some(Scope::Private), _) | (_, Scope::Private) => Some(Scope::Private),
            _ => Some(Scope::Public),
        })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::request::canonical::OperationKind;

    fn op(name: Option<&str>, fields: &[&str]) -> CanonicalOperation {
        CanonicalOperation {
            kind: OperationKind::Query,
            name: name.map(str::to_string),
            root_fields: fields.iter().map(|f| f.to_string()).collect(),
            text: String::new(),
        }
    }

    fn rule(m: Matcher, ttl: Option<u64>, scope: Option<Scope>, cache: Option<bool>) -> Rule {
        Rule {
            matcher: m,
            ttl_seconds: ttl,
            stale_while_revalidate_seconds: None,
            stale_if_error_seconds: None,
            scope,
            cache,
        }
    }

    fn rules() -> Vec<Rule> {
        vec![
            rule(Matcher::Operation("Products".into()), Some(60), None, None),
            rule(
                Matcher::Field("me".into()),
                None,
                Some(Scope::Private),
                None,
            ),
            rule(Matcher::Operation("Admin".into()), None, None, Some(false)),
            rule(
                Matcher::Field("news".into()),
                Some(5),
                Some(Scope::Public),
                None,
            ),
        ]
    }

    fn defaults() -> Lifetimes {
        Lifetimes {
            ttl_seconds: 30,
            stale_while_revalidate_seconds: 10,
            stale_if_error_seconds: 300,
        }
    }

    fn policy(o: &CanonicalOperation, route: RouteOverride) -> Result<RequestPolicy, Bypass> {
        request_policy(defaults(), Scope::Public, &rules(), o, route)
    }

    #[test]
    fn defaults_apply_without_a_matching_rule() {
        let p = policy(&op(None, &["users"]), RouteOverride::default()).unwrap();
        assert_eq!(
            p,
            RequestPolicy {
                ttl_seconds: 30,
                stale_while_revalidate_seconds: 10,
                stale_if_error_seconds: 300,
                scope: Scope::Public
            }
        );
    }

    #[test]
    fn operation_and_field_rules() {
        let p = policy(
            &op(Some("Products"), &["products"]),
            RouteOverride::default(),
        )
        .unwrap();
        assert_eq!(p.ttl_seconds, 60);
        let p = policy(&op(None, &["users", "me"]), RouteOverride::default()).unwrap();
        assert_eq!(p.scope, Scope::Private);
        assert_eq!(
            policy(&op(Some("Admin"), &["users"]), RouteOverride::default()),
            Err(Bypass::NotCachedByRule)
        );
    }

    #[test]
    fn the_most_restrictive_rule_wins() {
        let p = policy(
            &op(Some("Products"), &["news", "me"]),
            RouteOverride::default(),
        )
        .unwrap();
        assert_eq!(
            p,
            RequestPolicy {
                ttl_seconds: 5,
                stale_while_revalidate_seconds: 10,
                stale_if_error_seconds: 300,
                scope: Scope::Private
            }
        );
    }

    #[test]
    fn route_overrides() {
        let short = RouteOverride {
            ttl_seconds: Some(2),
            stale_while_revalidate_seconds: Some(1),
            ..RouteOverride::default()
        };
        assert_eq!(
            policy(&op(None, &["users"]), short)
                .unwrap()
                .stale_while_revalidate_seconds,
            1
        );
        assert_eq!(policy(&op(None, &["users"]), short).unwrap().ttl_seconds, 2);
        assert_eq!(
            policy(&op(Some("Products"), &["x"]), short)
                .unwrap()
                .ttl_seconds,
            2
        );
        let long = RouteOverride {
            ttl_seconds: Some(600),
            ..RouteOverride::default()
        };
        assert_eq!(
            policy(&op(None, &["users"]), long).unwrap().ttl_seconds,
            600
        );
        assert_eq!(
            policy(&op(Some("Products"), &["x"]), long)
                .unwrap()
                .ttl_seconds,
            60
        );
        let off = RouteOverride {
            disabled: true,
            ..RouteOverride::default()
        };
        assert_eq!(
            policy(&op(None, &["users"]), off),
            Err(Bypass::RouteDisabled)
        );
    }

    #[test]
    fn stale_windows_take_the_shortest_rule() {
        let mut rs = rules();
        rs[0].stale_if_error_seconds = Some(60);
        rs[3].stale_if_error_seconds = Some(20);
        let p = request_policy(
            defaults(),
            Scope::Public,
            &rs,
            &op(Some("Products"), &["news"]),
            RouteOverride::default(),
        )
        .unwrap();
        assert_eq!(p.stale_if_error_seconds, 20);
        assert_eq!(p.stale_while_revalidate_seconds, 10, "the default");
    }

    #[test]
    fn default_scope_is_configurable() {
        let p = request_policy(
            defaults(),
            Scope::Private,
            &rules(),
            &op(None, &["users"]),
            RouteOverride::default(),
        );
        assert_eq!(p.unwrap().scope, Scope::Private);
        let p = request_policy(
            defaults(),
            Scope::Private,
            &rules(),
            &op(None, &["news"]),
            RouteOverride::default(),
        );
        assert_eq!(p.unwrap().scope, Scope::Public);
    }
}
