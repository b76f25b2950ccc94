//! `cdn_tags`: an entry's tags sent on the answers served from it, in the headers a CDN in front
//! of Envoy purges by (Fastly's `Surrogate-Key`, space-separated; Cloudflare's `Cache-Tag`,
//! comma-separated), so that one purge by tag can reach both caches.

use super::bounds::bounded;
use super::error::{field_error, ConfigError};
use super::headers::{carriable, normalize_header_names};
use super::raw::RawCdnTags;

/// Fastly: a surrogate key is at most 1,024 bytes. Cloudflare: a tag at most 1,024 characters.
pub const DEFAULT_MAX_TAG_BYTES: u64 = 1024;
/// Fastly and Cloudflare both cap the header at 16 KB.
pub const DEFAULT_MAX_HEADER_BYTES: u64 = 16 * 1024;

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CdnTags {
    pub headers: Vec<CdnHeader>,
    pub max_header_bytes: usize,
    pub max_tag_bytes: usize,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CdnHeader {
    /// Lower case.
    pub name: String,
    /// A space for `surrogate-key` (Fastly's syntax), a comma for any other.
    pub separator: char,
}

pub(super) fn parse(raw: Option<RawCdnTags>) -> Result<Option<CdnTags>, ConfigError> {
    let Some(raw) = raw else {
        return Ok(None);
    };
    let names = raw
        .headers
        .unwrap_or_else(|| vec!["surrogate-key".to_string()]);
    if names.is_empty() {
        return Err(field_error("cdn_tags.headers", "names no header"));
    }
    let names = normalize_header_names("cdn_tags.headers", names)?;
    if let Some(bad) = names.iter().find(|n| !carriable(n) || reserved(n)) {
        return Err(field_error(
            "cdn_tags.headers",
            format!("`{bad}` is not a header the filter may set"),
        ));
    }
    let headers = names
        .into_iter()
        .map(|name| CdnHeader {
            separator: if name == "surrogate-key" { ' ' } else { ',' },
            name,
        })
        .collect();
    let max_tag_bytes = bounded(
        "cdn_tags.max_tag_bytes",
        raw.max_tag_bytes,
        DEFAULT_MAX_TAG_BYTES,
        1,
        64 * 1024,
    )?;
    let max_header_bytes = bounded(
        "cdn_tags.max_header_bytes",
        raw.max_header_bytes,
        DEFAULT_MAX_HEADER_BYTES,
        1,
        64 * 1024,
    )?;
    Ok(Some(CdnTags {
        headers,
        max_header_bytes: max_header_bytes as usize,
        max_tag_bytes: max_tag_bytes as usize,
    }))
}

/// Headers the answer already carries for their own meaning.
fn reserved(name: &str) -> bool {
    matches!(
        name,
        "content-type" | "age" | "cache-control" | "etag" | "vary" | "set-cookie" | "date"
    ) || name.starts_with("x-cache")
}
