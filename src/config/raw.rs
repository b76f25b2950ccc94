//! The configuration as the operator wrote it: every field optional, unknown ones refused.
//! Kept apart from the typed `Config` so that what is accepted on the wire and what the filter
//! runs with can differ (defaults, normalised header names, secrets read from the environment).

use super::error::{field_error, ConfigError};
use serde::Deserialize;
use std::collections::HashMap;

/// The JSON shape as written by the operator; every field optional.
#[derive(Deserialize, Default)]
#[serde(deny_unknown_fields)]
pub(super) struct RawConfig {
    pub(super) ttl_seconds: Option<u64>,
    pub(super) stale_while_revalidate_seconds: Option<u64>,
    pub(super) stale_if_error_seconds: Option<u64>,
    pub(super) paths: Option<Vec<String>>,
    pub(super) vary_headers: Option<Vec<String>>,
    pub(super) forward_headers: Option<Vec<String>>,
    pub(super) max_body_bytes: Option<u64>,
    pub(super) max_query_depth: Option<u64>,
    pub(super) max_query_fields: Option<u64>,
    pub(super) cache_bytes: Option<u64>,
    pub(super) cache_slots: Option<u64>,
    pub(super) max_entry_bytes: Option<u64>,
    pub(super) debug_headers: Option<bool>,
    pub(super) access_log: Option<bool>,
    pub(super) cdn_tags: Option<RawCdnTags>,
    pub(super) operation_stats: Option<RawOperationStats>,
    pub(super) entities: Option<RawEntities>,
    pub(super) coalesce: Option<bool>,
    pub(super) flight_slots: Option<u64>,
    pub(super) fetch_timeout_ms: Option<u64>,
    pub(super) max_wait_ms: Option<u64>,
    pub(super) max_waiters: Option<u64>,
    pub(super) upstream_cluster: Option<String>,
    pub(super) identity: Option<RawIdentity>,
    pub(super) default_scope: Option<String>,
    pub(super) rules: Option<Vec<RawRule>>,
    pub(super) route_metadata: Option<String>,
    pub(super) key_memo_entries: Option<u64>,
    pub(super) local_cache_bytes: Option<u64>,
    pub(super) key_by_cluster: Option<bool>,
    pub(super) key_fields: Option<HashMap<String, Vec<String>>>,
    pub(super) purge_path: Option<String>,
    pub(super) explain_path: Option<String>,
    pub(super) purge_token: Option<String>,
    pub(super) purge_token_env: Option<String>,
    pub(super) mutation_invalidation: Option<String>,
    pub(super) mutation_tags_from: Option<Vec<String>>,
    pub(super) mutation_purges_per_second: Option<u64>,
    pub(super) mutation_purge_burst: Option<u64>,
    pub(super) tag_slots: Option<u64>,
    pub(super) apq_slots: Option<u64>,
    pub(super) miss_reason_keys: Option<u64>,
    pub(super) what_if_records: Option<u64>,
    pub(super) what_if_path: Option<String>,
    pub(super) mode: Option<String>,
    pub(super) l2: Option<RawL2>,
}

#[derive(Deserialize, Clone)]
#[serde(deny_unknown_fields)]
pub(super) struct RawL2 {
    pub(super) cluster: Option<String>,
    pub(super) wait_cluster: Option<String>,
    pub(super) timeout_ms: Option<u64>,
    pub(super) wait_ms: Option<u64>,
    pub(super) authority: Option<String>,
    pub(super) secret: Option<String>,
    pub(super) secret_env: Option<String>,
    pub(super) fleet_key: Option<String>,
    pub(super) fleet_key_env: Option<String>,
    pub(super) fleet_keys: Option<Vec<String>>,
    pub(super) fleet_keys_env: Option<String>,
    pub(super) purge_skew_ms: Option<u64>,
    pub(super) feed_failsafe_ms: Option<u64>,
}

#[derive(Deserialize, Clone)]
#[serde(deny_unknown_fields)]
pub(super) struct RawCdnTags {
    pub(super) headers: Option<Vec<String>>,
    pub(super) max_header_bytes: Option<u64>,
    pub(super) max_tag_bytes: Option<u64>,
}

#[derive(Deserialize, Clone)]
#[serde(deny_unknown_fields)]
pub(super) struct RawEntities {
    pub(super) ttl_seconds: Option<u64>,
    pub(super) null_ttl_seconds: Option<u64>,
    pub(super) stale_while_revalidate_seconds: Option<u64>,
    pub(super) stale_if_error_seconds: Option<u64>,
    pub(super) max_answer_bytes: Option<u64>,
    pub(super) types: Option<HashMap<String, RawEntityType>>,
}

#[derive(Deserialize, Clone)]
#[serde(deny_unknown_fields)]
pub(super) struct RawEntityType {
    pub(super) ttl_seconds: Option<u64>,
    pub(super) stale_while_revalidate_seconds: Option<u64>,
    pub(super) stale_if_error_seconds: Option<u64>,
    pub(super) scope: Option<String>,
    pub(super) prefetch: Option<bool>,
}

#[derive(Deserialize, Clone)]
#[serde(deny_unknown_fields)]
pub(super) struct RawOperationStats {
    pub(super) top_k: Option<u64>,
    pub(super) min_requests: Option<u64>,
}

#[derive(Deserialize, Clone)]
#[serde(deny_unknown_fields)]
pub(super) struct RawIdentity {
    pub(super) source: String,
    pub(super) claim: Option<String>,
    pub(super) payload_key: Option<String>,
    pub(super) header: Option<String>,
}

#[derive(Deserialize, Clone)]
#[serde(deny_unknown_fields)]
pub(super) struct RawRule {
    pub(super) operation: Option<String>,
    pub(super) field: Option<String>,
    pub(super) ttl_seconds: Option<u64>,
    pub(super) stale_while_revalidate_seconds: Option<u64>,
    pub(super) stale_if_error_seconds: Option<u64>,
    pub(super) scope: Option<String>,
    pub(super) cache: Option<bool>,
}

/// Reads the JSON; an error names the field it is about (serde's path), or is about the whole.
pub(super) fn read(text: &str) -> Result<RawConfig, ConfigError> {
    let mut de = serde_json::Deserializer::from_str(text);
    let raw: RawConfig = serde_path_to_error::deserialize(&mut de).map_err(|e| {
        let path = e.path().to_string();
        let inner = e.into_inner();
        let message = inner.to_string();
        // The path of an unknown field names it (`l2.redis`), except at the top ("."), where
        // serde's message has it.
        match unknown_field_name(&message) {
            Some(name) if path == "." => field_error(&name, message),
            Some(_) => field_error(&path, message),
            None if path == "." => field_error("", message),
            None => field_error(&path, message),
        }
    })?;
    de.end()
        .map_err(|e| field_error("", format!("trailing characters: {e}")))?;
    Ok(raw)
}

/// Pulls `name` out of serde's "unknown field `name`, expected ..." message.
fn unknown_field_name(message: &str) -> Option<String> {
    let rest = message.strip_prefix("unknown field `")?;
    let end = rest.find('`')?;
    Some(rest[..end].to_string())
}
