//! What the operator says about lifetimes and sharing: the configured lifetimes, the default
//! scope and the per-operation and per-field rules. The types live with the configuration (which
//! reads them) rather than with the request (which applies them, `request::rules`), so that the
//! configuration depends on nothing else in the crate.

use super::bounds::{bounded, MAX_TTL_SECONDS};
use super::error::{field_error, ConfigError};
use super::raw::RawRule;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Scope {
    /// One entry shared by every caller (still separated by `vary_headers`).
    Public,
    /// One entry per identity; a request without an identity is not cached.
    Private,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Matcher {
    /// The operation's name (`query Products { ... }`).
    Operation(String),
    /// A top-level field of the selected operation (`{ me { ... } }`).
    Field(String),
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Rule {
    pub matcher: Matcher,
    pub ttl_seconds: Option<u64>,
    pub stale_while_revalidate_seconds: Option<u64>,
    pub stale_if_error_seconds: Option<u64>,
    pub scope: Option<Scope>,
    /// `Some(false)`: never cached (nor coalesced).
    pub cache: Option<bool>,
}

/// How long an answer may be kept: fresh, then stale while refreshing, then stale on errors.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Lifetimes {
    pub ttl_seconds: u64,
    pub stale_while_revalidate_seconds: u64,
    pub stale_if_error_seconds: u64,
}

/// `ttl_seconds` and the two stale windows, each at most a year.
pub(super) fn lifetimes(
    ttl_seconds: Option<u64>,
    stale_while_revalidate_seconds: Option<u64>,
    stale_if_error_seconds: Option<u64>,
    d: Lifetimes,
) -> Result<Lifetimes, ConfigError> {
    let ttl_seconds = ttl_seconds.unwrap_or(d.ttl_seconds);
    if ttl_seconds > MAX_TTL_SECONDS {
        return Err(field_error(
            "ttl_seconds",
            "must be at most one year (31536000)",
        ));
    }
    Ok(Lifetimes {
        ttl_seconds,
        stale_while_revalidate_seconds: bounded(
            "stale_while_revalidate_seconds",
            stale_while_revalidate_seconds,
            d.stale_while_revalidate_seconds,
            0,
            MAX_TTL_SECONDS,
        )?,
        stale_if_error_seconds: bounded(
            "stale_if_error_seconds",
            stale_if_error_seconds,
            d.stale_if_error_seconds,
            0,
            MAX_TTL_SECONDS,
        )?,
    })
}

/// `default_scope`; unset, it is private when there is an identity source.
pub(super) fn default_scope(raw: Option<String>, identity: bool) -> Result<Scope, ConfigError> {
    match raw {
        Some(s) => parse_scope("default_scope", &s),
        // With an identity source, an operation no rule calls public is private: when in
        // doubt, do not share.
        None if identity => Ok(Scope::Private),
        None => Ok(Scope::Public),
    }
}

pub(super) fn parse_scope(field: &str, value: &str) -> Result<Scope, ConfigError> {
    match value {
        "public" => Ok(Scope::Public),
        "private" => Ok(Scope::Private),
        other => Err(field_error(
            field,
            format!("{other:?} is not \"public\" or \"private\""),
        )),
    }
}

pub(super) fn parse_rules(raw: Vec<RawRule>) -> Result<Vec<Rule>, ConfigError> {
    raw.into_iter()
        .enumerate()
        .map(|(i, r)| {
            let at = |f: &str| format!("rules[{i}].{f}");
            let matcher = match (r.operation, r.field) {
                (Some(o), None) if !o.is_empty() => Matcher::Operation(o),
                (None, Some(f)) if !f.is_empty() => Matcher::Field(f),
                (Some(_), Some(_)) => {
                    return Err(field_error(
                        &format!("rules[{i}]"),
                        "name either `operation` or `field`, not both",
                    ))
                }
                _ => {
                    return Err(field_error(
                        &format!("rules[{i}]"),
                        "needs a non-empty `operation` or `field`",
                    ))
                }
            };
            for (name, value) in [
                ("ttl_seconds", r.ttl_seconds),
                (
                    "stale_while_revalidate_seconds",
                    r.stale_while_revalidate_seconds,
                ),
                ("stale_if_error_seconds", r.stale_if_error_seconds),
            ] {
                if value.is_some_and(|t| t > MAX_TTL_SECONDS) {
                    return Err(field_error(
                        &at(name),
                        "must be at most one year (31536000)",
                    ));
                }
            }
            let scope = r.scope.map(|s| parse_scope(&at("scope"), &s)).transpose()?;
            Ok(Rule {
                matcher,
                ttl_seconds: r.ttl_seconds,
                stale_while_revalidate_seconds: r.stale_while_revalidate_seconds,
                stale_if_error_seconds: r.stale_if_error_seconds,
                scope,
                cache: r.cache,
            })
        })
        .collect()
}
