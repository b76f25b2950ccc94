//! The headers an answer from the cache carries: `x-cache` (the status, see `CacheStatus`), its
//! reason, key and tags for debugging, and the tags a CDN in front may purge by.

use crate::config::Config;
use crate::effects::counters::Counter;
use crate::effects::host::Host;
use crate::invalidate::cdn::header_value;

pub const CACHE_HEADER: &str = "x-cache";
pub const KEY_HEADER: &str = "x-cache-key";
pub const REASON_HEADER: &str = "x-cache-reason";
pub const TAGS_HEADER: &str = "x-cache-tags";

/// The `cdn_tags` headers for an answer carrying `tags` (comma-separated), counting the tags
/// they leave out.
pub fn cdn_headers(config: &Config, tags: &str, host: &impl Host) -> Vec<(String, String)> {
    let Some(cdn) = &config.cdn_tags else {
        return Vec::new();
    };
    let mut out = Vec::with_capacity(cdn.headers.len());
    for header in &cdn.headers {
        let (value, left_out) = header_value(tags, header, cdn);
        (0..left_out).for_each(|_| host.count(Counter::CdnTagsLeftOut));
        if let Some(v) = value {
            out.push((header.name.clone(), v));
        }
    }
    out
}
