//! What keeps answers fresh before their TTL, as configured: the purge API (path and token),
//! what a successful mutation purges and where its answer declares tags, how many mutation purges
//! run as asked, which fields identify an object for `Type:<id>` tags, and the purge marks' slots.

use super::bounds::{bounded, to_u32};
use super::error::{field_error, ConfigError};
use super::l2::{secret, Env, Secret};
use super::raw::RawConfig;
use std::collections::HashMap;

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PurgeApi {
    pub path: String,
    /// The explain endpoint (same token): `explain_path`, else `explain` beside the purge path.
    pub explain_path: String,
    /// The what-if route (same token): `what_if_path`, else `what-if` beside the purge path.
    pub what_if_path: String,
    pub token: Secret,
}

/// What a mutation answered `200` with `data` and no `errors` purges.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum MutationInvalidation {
    /// The `Type:<id>` tags of the objects in its answer.
    Entity,
    /// Every type seen in its answer.
    Type,
    Off,
}

/// The shortest purge token accepted: a guessable token would let anyone empty the cache.
pub const MIN_PURGE_TOKEN: usize = 16;

/// Where the origin may declare what a mutation changed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum TagSource {
    /// A response header (lower case); its values are split on commas and white space, which
    /// reads Fastly's `Surrogate-Key` (space-separated) and Cloudflare's `Cache-Tag`
    /// (comma-separated) alike. A tag with a comma or a space must come through `extensions`.
    Header(String),
    /// A member of the answer's `extensions`: an array of strings.
    Extensions(String),
}

impl TagSource {
    /// `header:<name>` or `extensions:<member>`; the error says what is wrong.
    pub fn parse(text: &str) -> Result<TagSource, String> {
        match text.split_once(':') {
            Some(("header", name)) => {
                let valid = !name.is_empty()
                    && name
                        .bytes()
                        .all(|b| b.is_ascii_alphanumeric() || b"!#$%&'*+-.^_`|~".contains(&b));
                if valid {
                    Ok(TagSource::Header(name.to_ascii_lowercase()))
                } else {
                    Err(format!("{name:?} is not a valid HTTP header name"))
                }
            }
            Some(("extensions", member)) if !member.is_empty() => {
                Ok(TagSource::Extensions(member.to_string()))
            }
            _ => Err(format!(
                "{text:?} is not \"header:<name>\" or \"extensions:<member>\""
            )),
        }
    }
}

/// How mutation answers purge, beyond `mutation_invalidation`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct MutationPurges {
    /// Where declared tags are read, in order; all that are present count.
    pub tags_from: Vec<TagSource>,
    /// Mutation purges per second, per worker, before they collapse.
    pub per_second: u32,
    /// How many may come at once.
    pub burst: u32,
}

impl Default for MutationPurges {
    fn default() -> Self {
        MutationPurges {
            tags_from: vec![
                TagSource::Header("surrogate-key".to_string()),
                TagSource::Header("cache-tag".to_string()),
                TagSource::Extensions("cacheTags".to_string()),
            ],
            per_second: 100,
            burst: 200,
        }
    }
}

/// Which fields identify an object of a type; `default` for types not listed (`["id"]`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct KeyFields {
    pub by_type: HashMap<String, Vec<String>>,
    pub default: Vec<String>,
}

impl Default for KeyFields {
    fn default() -> Self {
        KeyFields {
            by_type: HashMap::new(),
            default: vec!["id".to_string()],
        }
    }
}

impl KeyFields {
    pub fn of(&self, typename: &str) -> &[String] {
        self.by_type.get(typename).unwrap_or(&self.default)
    }
}

/// The invalidation fields read after the rest (`key_fields`, the purge API,
/// `mutation_invalidation`, `tag_slots`), in that order.
pub(super) struct Invalidation {
    pub(super) key_fields: KeyFields,
    pub(super) purge: Option<PurgeApi>,
    pub(super) mutation_invalidation: MutationInvalidation,
    pub(super) tag_slots: u32,
}

pub(super) fn invalidation(
    raw: &RawConfig,
    default_tag_slots: u32,
    env: &Env<'_>,
) -> Result<Invalidation, ConfigError> {
    let key_fields = parse_key_fields(raw.key_fields.clone())?;
    let token = secret(
        "purge_token",
        raw.purge_token.clone(),
        raw.purge_token_env.clone(),
        env,
    )?;
    let purge = parse_purge(raw.purge_path.clone(), token)?
        .map(|api| with_explain_path(api, raw.explain_path.clone()))
        .map(|api| api.and_then(|a| with_what_if_path(a, raw.what_if_path.clone())))
        .transpose()?;
    if purge.is_none() && raw.explain_path.is_some() {
        return Err(field_error("explain_path", "only applies with purge_path"));
    }
    if purge.is_none() && raw.what_if_path.is_some() {
        return Err(field_error("what_if_path", "only applies with purge_path"));
    }
    let mutation_invalidation = match raw.mutation_invalidation.as_deref() {
        None | Some("entity") => MutationInvalidation::Entity,
        Some("type") => MutationInvalidation::Type,
        Some("off") => MutationInvalidation::Off,
        Some(other) => {
            return Err(field_error(
                "mutation_invalidation",
                format!("{other:?} is not \"entity\", \"type\" or \"off\""),
            ))
        }
    };
    let tag_slots = bounded(
        "tag_slots",
        raw.tag_slots,
        u64::from(default_tag_slots),
        1,
        65_536,
    )?;
    Ok(Invalidation {
        key_fields,
        purge,
        mutation_invalidation,
        tag_slots: to_u32(tag_slots),
    })
}

fn parse_key_fields(raw: Option<HashMap<String, Vec<String>>>) -> Result<KeyFields, ConfigError> {
    let mut key_fields = KeyFields::default();
    for (typename, fields) in raw.unwrap_or_default() {
        let at = format!("key_fields.{typename}");
        if typename.is_empty() {
            return Err(field_error("key_fields", "a type name must not be empty"));
        }
        if fields.is_empty() || fields.iter().any(|f| f.is_empty()) {
            return Err(field_error(
                &at,
                "must list one or more non-empty field names",
            ));
        }
        key_fields.by_type.insert(typename, fields);
    }
    Ok(key_fields)
}

pub(super) fn mutation_purges(raw: &RawConfig) -> Result<MutationPurges, ConfigError> {
    let d = MutationPurges::default();
    let tags_from = match &raw.mutation_tags_from {
        None => d.tags_from,
        Some(list) => list
            .iter()
            .enumerate()
            .map(|(i, s)| {
                TagSource::parse(s).map_err(|p| field_error(&format!("mutation_tags_from[{i}]"), p))
            })
            .collect::<Result<_, _>>()?,
    };
    let rate = |field, v, default: u32| {
        let v = bounded(field, v, u64::from(default), 1, 1_000_000)?;
        Ok::<u32, ConfigError>(u32::try_from(v).unwrap_or(u32::MAX))
    };
    Ok(MutationPurges {
        tags_from,
        per_second: rate(
            "mutation_purges_per_second",
            raw.mutation_purges_per_second,
            d.per_second,
        )?,
        burst: rate("mutation_purge_burst", raw.mutation_purge_burst, d.burst)?,
    })
}

fn parse_purge(
    path: Option<String>,
    token: Option<String>,
) -> Result<Option<PurgeApi>, ConfigError> {
    match (path, token) {
        (None, None) => Ok(None),
        (None, Some(_)) => Err(field_error("purge_token", "only applies with purge_path")),
        (Some(_), None) => Err(field_error(
            "purge_token",
            "is required with purge_path (a bearer token of at least 16 characters)",
        )),
        (Some(path), Some(token)) => {
            if !path.starts_with('/') || path.contains('?') || path.contains('#') {
                return Err(field_error(
                    "purge_path",
                    format!("{path:?} must start with '/' and contain no '?' or '#'"),
                ));
            }
            if token.chars().count() < MIN_PURGE_TOKEN || token.chars().any(char::is_whitespace) {
                return Err(field_error(
                    "purge_token",
                    "must be at least 16 characters, without white space",
                ));
            }
            Ok(Some(PurgeApi {
                explain_path: String::new(),
                what_if_path: String::new(),
                path,
                token: Secret::new(token),
            }))
        }
    }
}

/// The explain endpoint's path: as given, else the purge path's last segment replaced by
/// `explain` (`/graphql-cache/purge` gives `/graphql-cache/explain`).
fn with_explain_path(mut api: PurgeApi, given: Option<String>) -> Result<PurgeApi, ConfigError> {
    api.explain_path = admin_path(&api, given, "explain_path", "explain", &[])?;
    Ok(api)
}

/// The what-if route's path: as given, else `what-if` beside the purge path.
fn with_what_if_path(mut api: PurgeApi, given: Option<String>) -> Result<PurgeApi, ConfigError> {
    let taken = [api.explain_path.clone()];
    api.what_if_path = admin_path(&api, given, "what_if_path", "what-if", &taken)?;
    Ok(api)
}

/// An admin route's path (`field`): as given, else the purge path's last segment replaced by
/// `leaf`; it must differ from the purge path and from the routes already `taken`.
fn admin_path(
    api: &PurgeApi,
    given: Option<String>,
    field: &str,
    leaf: &str,
    taken: &[String],
) -> Result<String, ConfigError> {
    let path = match given {
        Some(p) => p,
        None => {
            let parent = api.path.rsplit_once('/').map_or("", |(parent, _)| parent);
            format!("{parent}/{leaf}")
        }
    };
    let clash = path == api.path || taken.contains(&path);
    if !path.starts_with('/') || path.contains('?') || path.contains('#') || clash {
        return Err(field_error(
            field,
            format!(
                "{path:?} must start with '/', contain no '?' or '#', and differ from the other admin paths"
            ),
        ));
    }
    Ok(path)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sources_parse_and_errors_say_why() {
        assert_eq!(
            TagSource::parse("header:Surrogate-Key"),
            Ok(TagSource::Header("surrogate-key".into()))
        );
        assert_eq!(
            TagSource::parse("extensions:cacheTags"),
            Ok(TagSource::Extensions("cacheTags".into()))
        );
        for bad in [
            "header:",
            "header:a b",
            "extensions:",
            "cookie:x",
            "surrogate-key",
        ] {
            assert!(TagSource::parse(bad).is_err(), "{bad}");
        }
    }
}
