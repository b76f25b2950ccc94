//! Which requests the filter takes on and how much of each it reads: the paths, the body and
//! query limits that bound the parser's work, the route metadata namespace and the serving mode.

use super::bounds::{bounded, to_usize, MAX_BODY_BYTES, MAX_QUERY_DEPTH, MAX_QUERY_FIELDS};
use super::error::{field_error, ConfigError};

/// How much of a query the filter is willing to look at.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Limits {
    pub max_depth: usize,
    pub max_fields: usize,
}

/// `paths`: request paths without a query string.
pub(super) fn paths(
    raw: Option<Vec<String>>,
    default: Vec<String>,
) -> Result<Vec<String>, ConfigError> {
    let paths = raw.unwrap_or(default);
    for (i, p) in paths.iter().enumerate() {
        if !p.starts_with('/') || p.contains('?') || p.contains('#') {
            return Err(field_error(
                &format!("paths[{i}]"),
                format!("{p:?} must start with '/' and contain no '?' or '#'"),
            ));
        }
    }
    Ok(paths)
}

/// `max_body_bytes`, `max_query_depth` and `max_query_fields`, in that order.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) struct Reading {
    pub(super) max_body_bytes: usize,
    pub(super) limits: Limits,
}

pub(super) fn reading(
    max_body_bytes: Option<u64>,
    max_query_depth: Option<u64>,
    max_query_fields: Option<u64>,
    d: Reading,
) -> Result<Reading, ConfigError> {
    let max_body_bytes = bounded(
        "max_body_bytes",
        max_body_bytes,
        d.max_body_bytes as u64,
        1,
        MAX_BODY_BYTES,
    )?;
    let max_query_depth = bounded(
        "max_query_depth",
        max_query_depth,
        d.limits.max_depth as u64,
        1,
        MAX_QUERY_DEPTH,
    )?;
    let max_query_fields = bounded(
        "max_query_fields",
        max_query_fields,
        d.limits.max_fields as u64,
        1,
        MAX_QUERY_FIELDS,
    )?;
    Ok(Reading {
        max_body_bytes: to_usize(max_body_bytes),
        limits: Limits {
            max_depth: to_usize(max_query_depth),
            max_fields: to_usize(max_query_fields),
        },
    })
}

/// `route_metadata`: an empty namespace turns per-route overrides off.
pub(super) fn route_metadata(raw: Option<String>, default: Option<String>) -> Option<String> {
    match raw {
        Some(ns) if ns.is_empty() => None,
        Some(ns) => Some(ns),
        None => default,
    }
}

/// `mode`: whether the filter only shadows (`true`) or serves.
pub(super) fn shadow(mode: Option<&str>) -> Result<bool, ConfigError> {
    match mode {
        None | Some("serve") => Ok(false),
        Some("shadow") => Ok(true),
        Some(other) => Err(field_error(
            "mode",
            format!("{other:?} is not \"serve\" or \"shadow\""),
        )),
    }
}
