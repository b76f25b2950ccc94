//! `entities`: entity caching for a listener in front of a subgraph. Each representation of an
//! `_entities` request is cached on its own, for its type's TTL and scope.

use super::bounds::{bounded, MAX_TTL_SECONDS};
use super::error::{field_error, ConfigError};
use super::purge::KeyFields;
use super::raw::{RawEntities, RawEntityType};
use super::rules::{parse_scope, Lifetimes, Scope};

use std::collections::BTreeMap;

/// The largest subgraph answer to a partial fetch the filter reads back to merge (else the
/// gateway's own request goes upstream whole).
pub const DEFAULT_MAX_ANSWER_BYTES: u64 = 1 << 20;

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Entities {
    /// Lifetime of an entity whose type sets none.
    pub ttl_seconds: u64,
    /// Lifetime of a `null` entity (not found); 0: never stored.
    pub null_ttl_seconds: u64,
    /// After expiry, how long an entity is served while one refresh runs (types that set none).
    pub stale_while_revalidate_seconds: u64,
    /// After expiry, how long an entity may replace a failed fetch (types that set none).
    pub stale_if_error_seconds: u64,
    /// Per type: TTL and scope.
    pub types: BTreeMap<String, EntityType>,
    /// Scope of types not listed.
    pub default_scope: Scope,
    pub max_answer_bytes: usize,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct EntityType {
    pub ttl_seconds: Option<u64>,
    pub stale_while_revalidate_seconds: Option<u64>,
    pub stale_if_error_seconds: Option<u64>,
    pub scope: Option<Scope>,
    /// Entities of this type named by an answer on this hop are fetched before the gateway
    /// asks (see `entities::prefetch`); public types only.
    pub prefetch: bool,
}

impl Entities {
    /// What `"entities": {}` gives on a listener with this TTL and default scope.
    pub fn defaults(ttl_seconds: u64, default_scope: Scope) -> Entities {
        Entities {
            ttl_seconds,
            null_ttl_seconds: 0,
            stale_while_revalidate_seconds: 0,
            stale_if_error_seconds: 0,
            types: BTreeMap::new(),
            default_scope,
            max_answer_bytes: DEFAULT_MAX_ANSWER_BYTES as usize,
        }
    }

    /// The TTL and scope of entities of `typename`.
    pub fn policy(&self, typename: &str) -> (u64, Scope) {
        let (life, scope) = self.rules(typename);
        (life.ttl_seconds, scope)
    }

    /// What entities of `typename` may be stored for: their TTL and stale windows (a subgraph's
    /// own `cache-control` caps the TTL and may set the windows, as for whole answers).
    pub fn lifetimes(&self, typename: &str) -> Lifetimes {
        self.rules(typename).0
    }

    /// [`Entities::lifetimes`] and the scope of `typename`, from one look at its type.
    pub fn rules(&self, typename: &str) -> (Lifetimes, Scope) {
        let t = self.types.get(typename);
        let life = Lifetimes {
            ttl_seconds: t.and_then(|t| t.ttl_seconds).unwrap_or(self.ttl_seconds),
            stale_while_revalidate_seconds: t
                .and_then(|t| t.stale_while_revalidate_seconds)
                .unwrap_or(self.stale_while_revalidate_seconds),
            stale_if_error_seconds: t
                .and_then(|t| t.stale_if_error_seconds)
                .unwrap_or(self.stale_if_error_seconds),
        };
        (life, t.and_then(|t| t.scope).unwrap_or(self.default_scope))
    }

    /// The scope of entities of `typename` asked with `selection` (a printed selection set): a
    /// public type whose selection reaches a private one (`... on Account`, a fragment on it) is
    /// private too, keyed by the caller's identity.
    pub fn scope_in(&self, typename: &str, selection: &str) -> Scope {
        let (_, scope) = self.rules(typename);
        if scope == Scope::Private || self.private_named(selection, " on ") {
            return Scope::Private;
        }
        Scope::Public
    }

    /// Whether an entity's answer (its JSON) holds an object of a private type with more in it
    /// than a reference (its `__typename` and key fields, as a gateway asks for an entity it
    /// resolves elsewhere: which user wrote a review is the review's data, the user's own fields
    /// are not). Such an answer is not stored for everyone. Only what says its `__typename` can
    /// be seen; an answer that cannot be read counts as holding one.
    pub fn holds_private(&self, raw: &str, key_fields: &KeyFields) -> bool {
        if !self.private_named(raw, "\"__typename\"") {
            return false;
        }
        match serde_json::from_str::<serde_json::Value>(raw) {
            Ok(value) => self.private_content(&value, key_fields),
            Err(_) => true,
        }
    }

    fn private_content(&self, value: &serde_json::Value, key_fields: &KeyFields) -> bool {
        match value {
            serde_json::Value::Object(members) => {
                let typename = members.get("__typename").and_then(|t| t.as_str());
                let beyond_reference = |t: &str| {
                    let keys = key_fields.of(t);
                    members
                        .keys()
                        .any(|m| m != "__typename" && !keys.iter().any(|k| k == m))
                };
                if typename
                    .is_some_and(|t| self.rules(t).1 == Scope::Private && beyond_reference(t))
                {
                    return true;
                }
                members
                    .values()
                    .any(|v| self.private_content(v, key_fields))
            }
            serde_json::Value::Array(items) => {
                items.iter().any(|v| self.private_content(v, key_fields))
            }
            _ => false,
        }
    }

    /// Whether a private type's name follows `marker` (then blanks, and for `__typename` a
    /// colon and a quote) anywhere in `text`. With `default_scope` private, every unlisted type
    /// is private: then any name counts.
    fn private_named(&self, text: &str, marker: &str) -> bool {
        let private = |name: &str| self.rules(name).1 == Scope::Private;
        text.match_indices(marker).any(|(at, m)| {
            let rest = text[at + m.len()..].trim_start();
            let rest = match rest.strip_prefix(':') {
                Some(r) => r.trim_start().strip_prefix('"').unwrap_or(r),
                None => rest,
            };
            let end = rest
                .find(|c: char| !(c.is_ascii_alphanumeric() || c == '_'))
                .unwrap_or(rest.len());
            end > 0 && private(&rest[..end])
        })
    }

    /// Whether entities of `typename` are prefetched: asked for so, and public (a private
    /// entity is fetched with its caller's credentials, never on a guess).
    pub fn prefetch(&self, typename: &str) -> bool {
        let (life, scope) = self.rules(typename);
        self.types.get(typename).is_some_and(|t| t.prefetch)
            && scope == Scope::Public
            && life.ttl_seconds > 0
    }

    /// Whether any type is prefetched.
    pub fn prefetches(&self) -> bool {
        self.types.keys().any(|t| self.prefetch(t))
    }
}

/// `field` of `entities` (or of one type), at most a year; `default` when unset.
fn seconds(field: &str, value: Option<u64>, default: u64) -> Result<u64, ConfigError> {
    bounded(field, value, default, 0, MAX_TTL_SECONDS)
}

pub(super) fn parse(
    raw: Option<&RawEntities>,
    ttl_seconds: u64,
    default_scope: Scope,
) -> Result<Option<Entities>, ConfigError> {
    let Some(raw) = raw else {
        return Ok(None);
    };
    let ttl = bounded(
        "entities.ttl_seconds",
        raw.ttl_seconds,
        ttl_seconds,
        0,
        MAX_TTL_SECONDS,
    )?;
    let null_ttl = bounded(
        "entities.null_ttl_seconds",
        raw.null_ttl_seconds,
        0,
        0,
        MAX_TTL_SECONDS,
    )?;
    let swr = seconds(
        "entities.stale_while_revalidate_seconds",
        raw.stale_while_revalidate_seconds,
        0,
    )?;
    let sie = seconds(
        "entities.stale_if_error_seconds",
        raw.stale_if_error_seconds,
        0,
    )?;
    let max_answer_bytes = bounded(
        "entities.max_answer_bytes",
        raw.max_answer_bytes,
        DEFAULT_MAX_ANSWER_BYTES,
        1024,
        64 << 20,
    )?;
    let mut types = BTreeMap::new();
    for (name, t) in raw.types.clone().unwrap_or_default() {
        let parsed = entity_type(&name, &t)?;
        if parsed.prefetch && parsed.scope.unwrap_or(default_scope) == Scope::Private {
            return Err(field_error(
                &format!("entities.types.{name}.prefetch"),
                "a private type is never prefetched (its entities are fetched with the caller's credentials)",
            ));
        }
        types.insert(name.clone(), parsed);
    }
    Ok(Some(Entities {
        ttl_seconds: ttl,
        null_ttl_seconds: null_ttl,
        stale_while_revalidate_seconds: swr,
        stale_if_error_seconds: sie,
        types,
        default_scope,
        max_answer_bytes: max_answer_bytes as usize,
    }))
}

fn entity_type(name: &str, raw: &RawEntityType) -> Result<EntityType, ConfigError> {
    let field = format!("entities.types.{name}");
    if name.is_empty() || !name.chars().all(|c| c.is_ascii_alphanumeric() || c == '_') {
        return Err(field_error(&field, "is not a GraphQL type name"));
    }
    let optional = |name: &str, value: Option<u64>| {
        value
            .map(|v| seconds(&format!("{field}.{name}"), Some(v), 0))
            .transpose()
    };
    let ttl_seconds = optional("ttl_seconds", raw.ttl_seconds)?;
    let stale_while_revalidate_seconds = optional(
        "stale_while_revalidate_seconds",
        raw.stale_while_revalidate_seconds,
    )?;
    let stale_if_error_seconds = optional("stale_if_error_seconds", raw.stale_if_error_seconds)?;
    let scope = raw
        .scope
        .as_deref()
        .map(|s| parse_scope(&format!("{field}.scope"), s))
        .transpose()?;
    Ok(EntityType {
        ttl_seconds,
        stale_while_revalidate_seconds,
        stale_if_error_seconds,
        scope,
        prefetch: raw.prefetch.unwrap_or(false),
    })
}
