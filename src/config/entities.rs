//! `entities`: entity caching for a listener in front of a subgraph. Each representation of an
//! `_entities` request is cached on its own, for its type's TTL and scope.

use super::bounds::{bounded, MAX_TTL_SECONDS};
use super::error::{field_error, ConfigError};
use super::raw::{RawEntities, RawEntityType};
use super::rules::{parse_scope, Scope};

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
    /// Per type: TTL and scope.
    pub types: BTreeMap<String, EntityType>,
    /// Scope of types not listed.
    pub default_scope: Scope,
    pub max_answer_bytes: usize,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct EntityType {
    pub ttl_seconds: Option<u64>,
    pub scope: Option<Scope>,
}

impl Entities {
    /// What `"entities": {}` gives on a listener with this TTL and default scope.
    pub fn defaults(ttl_seconds: u64, default_scope: Scope) -> Entities {
        Entities {
            ttl_seconds,
            null_ttl_seconds: 0,
            types: BTreeMap::new(),
            default_scope,
            max_answer_bytes: DEFAULT_MAX_ANSWER_BYTES as usize,
        }
    }

    /// The TTL and scope of entities of `typename`.
    pub fn policy(&self, typename: &str) -> (u64, Scope) {
        let t = self.types.get(typename);
        (
            t.and_then(|t| t.ttl_seconds).unwrap_or(self.ttl_seconds),
            t.and_then(|t| t.scope).unwrap_or(self.default_scope),
        )
    }
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
    let max_answer_bytes = bounded(
        "entities.max_answer_bytes",
        raw.max_answer_bytes,
        DEFAULT_MAX_ANSWER_BYTES,
        1024,
        64 << 20,
    )?;
    let mut types = BTreeMap::new();
    for (name, t) in raw.types.clone().unwrap_or_default() {
        types.insert(name.clone(), entity_type(&name, &t)?);
    }
    Ok(Some(Entities {
        ttl_seconds: ttl,
        null_ttl_seconds: null_ttl,
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
    let ttl_seconds = raw
        .ttl_seconds
        .map(|t| {
            bounded(
                &format!("{field}.ttl_seconds"),
                Some(t),
                0,
                0,
                MAX_TTL_SECONDS,
            )
        })
        .transpose()?;
    let scope = raw
        .scope
        .as_deref()
        .map(|s| parse_scope(&format!("{field}.scope"), s))
        .transpose()?;
    Ok(EntityType { ttl_seconds, scope })
}
