//! Whether an `_entities` request is served in entity mode, and with which settings: the
//! listener's `entities`, unless the matched route's metadata says otherwise. A route's
//! `entities: false` turns entity mode off for it (its requests are cached as whole answers, as
//! on a listener without `entities`); `entities: true` turns it on where the listener has no
//! `entities`, with the settings `"entities": {}` would give. A route's `ttl_seconds` is the
//! TTL of the entities whose type `entities.types` gives none, as it replaces the listener's own
//! TTL for whole answers. A `disabled` route caches nothing, entities included.

use crate::config::{Config, Entities};
use crate::request::rules::RouteOverride;
use std::borrow::Cow;

/// Whether an `_entities` request on this route is looked up entity by entity. Never in shadow
/// mode, which must not answer.
pub fn entity_mode(config: &Config, route: &RouteOverride) -> bool {
    !config.shadow && !route.disabled && route.entities.unwrap_or(config.entities.is_some())
}

/// The listener's entity settings: its `entities`, else those of `"entities": {}` (for routes
/// that turn entity mode on). What no route changes: scopes, `null_ttl_seconds`,
/// `max_answer_bytes`.
pub fn listener_settings(config: &Config) -> Cow<'_, Entities> {
    match &config.entities {
        Some(e) => Cow::Borrowed(e),
        None => Cow::Owned(Entities::defaults(config.ttl_seconds, config.default_scope)),
    }
}

/// The entity settings of a request on this route: the listener's, with the route's TTL.
pub fn settings<'c>(config: &'c Config, route: &RouteOverride) -> Cow<'c, Entities> {
    let listener = listener_settings(config);
    match route.ttl_seconds {
        Some(ttl) if ttl != listener.ttl_seconds => {
            let mut e = listener.into_owned();
            e.ttl_seconds = ttl;
            Cow::Owned(e)
        }
        _ => listener,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::Scope;

    fn route(entities: Option<bool>) -> RouteOverride {
        RouteOverride {
            entities,
            ..RouteOverride::default()
        }
    }

    #[test]
    fn the_route_turns_entity_mode_off_or_on() {
        let with = Config::parse(br#"{"entities":{"ttl_seconds":30}}"#).unwrap();
        let without = Config::default();
        assert!(entity_mode(&with, &route(None)));
        assert!(!entity_mode(&with, &route(Some(false))));
        assert!(!entity_mode(&without, &route(None)));
        assert!(entity_mode(&without, &route(Some(true))));
        let disabled = RouteOverride {
            disabled: true,
            ..route(Some(true))
        };
        assert!(
            !entity_mode(&with, &disabled),
            "a disabled route caches nothing"
        );
        let shadow = Config::parse(br#"{"mode":"shadow","entities":{}}"#).unwrap();
        assert!(
            !entity_mode(&shadow, &route(Some(true))),
            "shadow never answers"
        );
    }

    #[test]
    fn a_route_s_entity_mode_takes_the_defaults_and_the_route_s_ttl() {
        let plain = Config::parse(br#"{"ttl_seconds":45}"#).unwrap();
        let explicit = Config::parse(br#"{"ttl_seconds":45,"entities":{}}"#).unwrap();
        assert_eq!(
            listener_settings(&plain).as_ref(),
            explicit.entities.as_ref().unwrap(),
            "as \"entities\": {{}} would give"
        );
        assert_eq!(settings(&plain, &route(Some(true))).policy("Product").0, 45);
        let short = RouteOverride {
            ttl_seconds: Some(5),
            ..route(Some(true))
        };
        assert_eq!(
            settings(&plain, &short).policy("Product"),
            (5, Scope::Public)
        );
        let typed = Config::parse(
            br#"{"entities":{"ttl_seconds":30,"types":{"User":{"ttl_seconds":300,"scope":"private"}}}}"#,
        )
        .unwrap();
        let s = settings(&typed, &short);
        assert_eq!(
            s.policy("Product").0,
            5,
            "the route's TTL for types not listed"
        );
        assert_eq!(
            s.policy("User"),
            (300, Scope::Private),
            "a type's own TTL stays"
        );
        assert!(matches!(settings(&typed, &route(None)), Cow::Borrowed(_)));
        let private =
            Config::parse(br#"{"identity":{"source":"header","header":"x-user"}}"#).unwrap();
        assert_eq!(
            listener_settings(&private).default_scope,
            Scope::Private,
            "the listener's default scope, as for whole answers"
        );
    }
}
