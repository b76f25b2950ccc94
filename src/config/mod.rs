//! The plugin configuration: parsed once in `on_configure` into typed, validated structs.
//!
//! Every error names the field it is about, because the only place an operator sees it is one log
//! line when Envoy refuses to load the plugin.
//!
//! One file per concern, each reading and checking its own fields: `raw` (the JSON as written),
//! `requests` (paths, body and query limits, mode), `headers` (header-name lists and what a fetch
//! for others may carry), `memory` (slots and sizes), `fetch` (coalescing and the shared fetch),
//! `identity`, `rules` (lifetimes, scope, per-operation rules), `purge` (purge API, mutation
//! invalidation, tag sources and budget, key fields), `l2` (the fleet's cache and its secrets),
//! with `bounds` and `error` shared by all. This module only assembles them.
//!
//! The configuration imports nothing else from the crate: the types it parses into (rules, key
//! fields, tag sources, the header rule of `forward_headers`, the parser's limits) live here and
//! the code that applies them imports them, so a change to how a request is handled never
//! ripples back into what the operator may write.

mod bounds;
mod cdn;
mod entities;
mod error;
mod fetch;
mod headers;
mod identity;
mod l2;
mod memory;
mod operation_stats;
#[cfg(test)]
mod parse_tests;
mod purge;
mod raw;
mod requests;
mod rules;

pub use self::cdn::{CdnHeader, CdnTags};
pub use self::entities::{Entities, EntityType};
pub use self::error::ConfigError;
pub use self::headers::{carriable, HOP_BY_HOP};
pub use self::identity::IdentitySource;
pub use self::l2::{Env, FleetKey, Secret, L2, MIN_FLEET_KEY};
pub use self::operation_stats::OperationStats;
pub use self::purge::{
    KeyFields, MutationInvalidation, MutationPurges, PurgeApi, TagSource, MIN_PURGE_TOKEN,
};
pub use self::requests::Limits;
pub use self::rules::{Lifetimes, Matcher, Rule, Scope};

use self::error::field_error;
use self::fetch::Fetch;
use self::memory::{Cache, PerWorker};
use self::raw::RawConfig;
use self::requests::Reading;

/// The longest lifetime (TTL, or either stale window) a route's metadata may set, seconds.
pub const ROUTE_LIFETIME_SECONDS: u64 = 365 * 24 * 3600;

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Config {
    /// Seconds a stored response stays fresh. 0 stores nothing.
    pub ttl_seconds: u64,
    /// After expiry, seconds an entry is served stale (`x-cache: STALE`) while one refresh runs.
    pub stale_while_revalidate_seconds: u64,
    /// After expiry, seconds an entry is served stale when the shared fetch fails.
    pub stale_if_error_seconds: u64,
    /// Request paths (without query string) the filter handles; empty means every path.
    pub paths: Vec<String>,
    /// Lower-cased request header names whose values become part of the key.
    pub vary_headers: Vec<String>,
    /// Client headers a shared fetch carries beside the key's own (see `coalesce::upstream`).
    pub forward_headers: Vec<String>,
    /// Largest request body that is buffered and inspected; larger ones pass through.
    pub max_body_bytes: usize,
    /// Deepest nesting of `{`, `(` and `[` accepted before parsing (bounds the parser's recursion).
    pub max_query_depth: usize,
    /// Most field selections (operation plus used fragments) a cacheable query may have.
    pub max_query_fields: usize,
    /// Bytes of stored entries the shared cache holds at most (see `cache::table`).
    pub cache_bytes: u64,
    /// Entry slots in shared data: the cache never holds more entries than this.
    pub cache_slots: u32,
    /// Largest stored entry (response body plus headers); larger responses are not stored.
    pub max_entry_bytes: usize,
    /// Adds `x-cache-key` and `x-cache-reason` to responses.
    pub debug_headers: bool,
    /// Each handled request's cache status, reason, operation, key prefix, age and entry size in
    /// Envoy's filter state (`wasm.graphql_cache`), for the access log: one host call a request.
    pub access_log: bool,
    /// Entry tags sent on answers for a CDN in front (`Surrogate-Key`, `Cache-Tag`); `None`: not.
    pub cdn_tags: Option<CdnTags>,
    /// Counters per operation name (top `top_k` names, the rest as `other`).
    pub operation_stats: OperationStats,
    /// Entity caching of `_entities` requests (a listener in front of a subgraph); `None`: off.
    pub entities: Option<Entities>,
    /// Coalesce concurrent identical misses into one upstream fetch.
    pub coalesce: bool,
    /// Number of in-flight records in shared data (concurrently coalesced keys, across workers).
    pub flight_slots: u32,
    /// Timeout of the shared upstream fetch.
    pub fetch_timeout_ms: u64,
    /// Longest a request waits for another request's fetch before going upstream itself.
    pub max_wait_ms: u64,
    /// Most requests per key and worker waiting on one fetch; more go upstream on their own.
    pub max_waiters: usize,
    /// Cluster for the shared fetch; `None` means the route's cluster.
    pub upstream_cluster: Option<String>,
    /// Where a request's identity comes from, for private entries.
    pub identity: Option<IdentitySource>,
    /// Scope of operations no rule names.
    pub default_scope: Scope,
    /// Per-operation and per-field policy.
    pub rules: Vec<Rule>,
    /// `filter_metadata` namespace read from the route for per-route overrides; `None` = off.
    pub route_metadata: Option<String>,
    /// Entries of the per-worker memo from raw request bytes to key (0 turns it off).
    pub key_memo_entries: usize,
    /// Bytes of recently served entries each worker keeps in front of shared data (0: off).
    pub local_cache_bytes: usize,
    /// Whether the route's upstream cluster is part of the key (one property read per request).
    pub key_by_cluster: bool,
    /// Which fields identify an object of each type, for `Type:<id>` tags.
    pub key_fields: KeyFields,
    /// The purge API's path and bearer token; `None`: no purge API.
    pub purge: Option<PurgeApi>,
    /// What a successful mutation purges.
    pub mutation_invalidation: MutationInvalidation,
    /// Where a mutation's answer declares its tags, and how many mutation purges run as asked.
    pub mutation_purges: MutationPurges,
    /// Slots of purge marks in shared data (bounds invalidation memory whatever the tags).
    pub tag_slots: u32,
    /// Persisted queries (hash to text) remembered in shared data; 0 turns APQ off.
    pub apq_slots: u32,
    /// Keys whose last answer's fate (stored, refused by admission, not stored and why) shared
    /// data remembers, so that a miss says exactly why it missed; 0 turns it off.
    pub miss_reason_keys: u32,
    /// Records of recent lookups and origin answers each worker keeps for the what-if route
    /// (`whatif::ring`); 0 turns it off.
    pub what_if_records: u32,
    /// `shadow`: look up, store and count, but always forward and never change an answer.
    pub shadow: bool,
    /// The fleet's shared cache (`graphql-cache-l2`), when configured.
    pub l2: Option<L2>,
}

impl Default for Config {
    fn default() -> Self {
        Config {
            ttl_seconds: 60,
            stale_while_revalidate_seconds: 0,
            stale_if_error_seconds: 0,
            paths: Vec::new(),
            vary_headers: vec!["authorization".to_string(), "cookie".to_string()],
            forward_headers: ["traceparent", "tracestate", "user-agent", "x-request-id"]
                .map(String::from)
                .to_vec(),
            max_body_bytes: 64 * 1024,
            max_query_depth: 32,
            max_query_fields: 2000,
            cache_bytes: 64 << 20,
            cache_slots: 131_072,
            max_entry_bytes: 128 * 1024,
            debug_headers: false,
            access_log: false,
            cdn_tags: None,
            operation_stats: OperationStats::default(),
            entities: None,
            coalesce: true,
            flight_slots: 1024,
            fetch_timeout_ms: 10_000,
            max_wait_ms: 15_000,
            max_waiters: 1000,
            upstream_cluster: None,
            identity: None,
            default_scope: Scope::Public,
            rules: Vec::new(),
            route_metadata: None,
            key_memo_entries: 1024,
            local_cache_bytes: 64 << 10,
            key_by_cluster: true,
            key_fields: KeyFields::default(),
            purge: None,
            mutation_invalidation: MutationInvalidation::Entity,
            mutation_purges: MutationPurges::default(),
            tag_slots: 4096,
            apq_slots: 1024,
            miss_reason_keys: 16_384,
            what_if_records: 8_192,
            shadow: false,
            l2: None,
        }
    }
}

impl Config {
    /// Parses the plugin's `configuration` bytes. Empty input (no configuration) gives the defaults.
    pub fn parse(bytes: &[u8]) -> Result<Config, ConfigError> {
        Self::parse_with_env(bytes, &|_| None)
    }

    /// [`Config::parse`], with secrets named by environment variables read through `env`.
    pub fn parse_with_env(bytes: &[u8], env: &Env<'_>) -> Result<Config, ConfigError> {
        let text = std::str::from_utf8(bytes)
            .map_err(|_| field_error("", "configuration is not UTF-8"))?;
        if text.trim().is_empty() {
            return Ok(Config::default());
        }
        Self::from_raw(raw::read(text)?, env)
    }

    /// Each concern reads its fields; the order of the calls is the order in which a
    /// configuration with several mistakes has them reported (the first one found).
    fn from_raw(raw: RawConfig, env: &Env<'_>) -> Result<Config, ConfigError> {
        let d = Config::default();
        let mutation_purges = purge::mutation_purges(&raw)?;
        let lifetimes = rules::lifetimes(
            raw.ttl_seconds,
            raw.stale_while_revalidate_seconds,
            raw.stale_if_error_seconds,
            d.lifetimes(),
        )?;
        let paths = requests::paths(raw.paths.clone(), d.paths.clone())?;
        let vary_headers = headers::vary_headers(raw.vary_headers.clone(), d.vary_headers.clone())?;
        let forward_headers =
            headers::parse_forward_headers(raw.forward_headers.clone(), d.forward_headers.clone())?;
        let reading = requests::reading(
            raw.max_body_bytes,
            raw.max_query_depth,
            raw.max_query_fields,
            d.reading(),
        )?;
        let cache = memory::cache(&raw, d.cache())?;
        let fetch = fetch::fetch(&raw, &d.fetch())?;
        let identity = raw
            .identity
            .clone()
            .map(identity::parse_identity)
            .transpose()?;
        let default_scope = rules::default_scope(raw.default_scope.clone(), identity.is_some())?;
        let rules = rules::parse_rules(raw.rules.clone().unwrap_or_default())?;
        let route_metadata =
            requests::route_metadata(raw.route_metadata.clone(), d.route_metadata.clone());
        let per_worker = memory::per_worker(&raw, d.per_worker(cache.bytes))?;
        let invalidation = purge::invalidation(&raw, d.tag_slots, env)?;
        let apq_slots = memory::apq_slots(raw.apq_slots, d.apq_slots)?;
        let (miss_reason_keys, what_if_records) = memory::insight(&raw, d.insight())?;
        let shadow = requests::shadow(raw.mode.as_deref())?;
        let coalesce = raw.coalesce.unwrap_or(d.coalesce);
        let l2 = l2::parse(raw.l2.clone(), coalesce, env)?;
        Ok(Config {
            ttl_seconds: lifetimes.ttl_seconds,
            stale_while_revalidate_seconds: lifetimes.stale_while_revalidate_seconds,
            stale_if_error_seconds: lifetimes.stale_if_error_seconds,
            paths,
            vary_headers,
            forward_headers,
            max_body_bytes: reading.max_body_bytes,
            max_query_depth: reading.limits.max_depth,
            max_query_fields: reading.limits.max_fields,
            cache_bytes: cache.bytes,
            cache_slots: cache.slots,
            max_entry_bytes: cache.max_entry_bytes,
            debug_headers: raw.debug_headers.unwrap_or(d.debug_headers),
            access_log: raw.access_log.unwrap_or(d.access_log),
            cdn_tags: cdn::parse(raw.cdn_tags.clone())?,
            operation_stats: operation_stats::parse(raw.operation_stats.as_ref())?,
            entities: entities::parse(raw.entities.as_ref(), lifetimes.ttl_seconds, default_scope)?,
            coalesce,
            flight_slots: fetch.flight_slots,
            fetch_timeout_ms: fetch.fetch_timeout_ms,
            max_wait_ms: fetch.max_wait_ms,
            max_waiters: fetch.max_waiters,
            upstream_cluster: fetch.upstream_cluster,
            identity,
            default_scope,
            rules,
            route_metadata,
            key_memo_entries: per_worker.key_memo_entries,
            local_cache_bytes: per_worker.local_cache_bytes,
            key_by_cluster: raw.key_by_cluster.unwrap_or(d.key_by_cluster),
            key_fields: invalidation.key_fields,
            purge: invalidation.purge,
            mutation_invalidation: invalidation.mutation_invalidation,
            mutation_purges,
            tag_slots: invalidation.tag_slots,
            apq_slots,
            miss_reason_keys,
            what_if_records,
            shadow,
            l2,
        })
    }

    /// The defaults of `requests::reading`.
    fn reading(&self) -> Reading {
        Reading {
            max_body_bytes: self.max_body_bytes,
            limits: self.limits(),
        }
    }

    /// The defaults of `memory::cache`.
    fn cache(&self) -> Cache {
        Cache {
            bytes: self.cache_bytes,
            slots: self.cache_slots,
            max_entry_bytes: self.max_entry_bytes,
        }
    }

    /// The defaults of `memory::per_worker`.
    fn per_worker(&self, cache_bytes: u64) -> PerWorker {
        PerWorker {
            key_memo_entries: self.key_memo_entries,
            local_cache_bytes: memory::local_default(cache_bytes),
        }
    }

    /// The defaults of `fetch::fetch`.
    fn fetch(&self) -> Fetch {
        Fetch {
            flight_slots: self.flight_slots,
            fetch_timeout_ms: self.fetch_timeout_ms,
            max_wait_ms: self.max_wait_ms,
            max_waiters: self.max_waiters,
            upstream_cluster: self.upstream_cluster.clone(),
        }
    }

    /// `miss_reason_keys` and `what_if_records`.
    fn insight(&self) -> (u32, u32) {
        (self.miss_reason_keys, self.what_if_records)
    }

    /// Whether the what-if ring records traffic: only beside the admin routes that read it.
    pub fn what_if_on(&self) -> bool {
        self.purge.is_some() && self.what_if_records > 0
    }

    /// The configured lifetimes, before rules and routes.
    pub fn lifetimes(&self) -> Lifetimes {
        Lifetimes {
            ttl_seconds: self.ttl_seconds,
            stale_while_revalidate_seconds: self.stale_while_revalidate_seconds,
            stale_if_error_seconds: self.stale_if_error_seconds,
        }
    }

    /// The longest any entry this configuration stores may be served, fresh or stale, in ms:
    /// how long a purge must be remembered for it to reach every entry it could apply to.
    pub fn longest_life_ms(&self) -> u64 {
        let d = self.lifetimes();
        let rules = self.rules.iter().map(|r| {
            (
                r.ttl_seconds,
                r.stale_while_revalidate_seconds,
                r.stale_if_error_seconds,
            )
        });
        let mut longest = longest(&d, rules);
        if let Some(e) = &self.entities {
            let base = Lifetimes {
                ttl_seconds: e.ttl_seconds.max(e.null_ttl_seconds),
                stale_while_revalidate_seconds: e.stale_while_revalidate_seconds,
                stale_if_error_seconds: e.stale_if_error_seconds,
            };
            let types = e.types.values().map(|t| {
                (
                    t.ttl_seconds,
                    t.stale_while_revalidate_seconds,
                    t.stale_if_error_seconds,
                )
            });
            longest = longest.max(self::longest(&base, types));
        }
        // A route may set its own lifetimes (`route_metadata`), up to a year each.
        if self.route_metadata.is_some() {
            longest = longest.max(ROUTE_LIFETIME_SECONDS.saturating_mul(3));
        }
        longest.saturating_mul(1000)
    }

    /// Whether entries show their tags (debug headers, CDN tags).
    pub fn shows_tags(&self) -> bool {
        self.debug_headers || self.cdn_tags.is_some()
    }

    /// Whether an entry's tags are read from its answer when it is stored.
    pub fn reads_tags(&self) -> bool {
        self.invalidation_on() || self.shows_tags()
    }

    /// Whether anything can purge (this Envoy's API or mutations, or another Envoy's through the
    /// L2's purge log): then every lookup checks the purge epoch.
    pub fn invalidation_on(&self) -> bool {
        self.purge.is_some()
            || self.mutation_invalidation != MutationInvalidation::Off
            || self.l2.is_some()
    }

    /// The parsing limits for the canonical printer.
    pub fn limits(&self) -> Limits {
        Limits {
            max_depth: self.max_query_depth,
            max_fields: self.max_query_fields,
        }
    }

    /// Whether the filter handles requests to this path (the path without its query string).
    pub fn handles_path(&self, path: &str) -> bool {
        self.paths.is_empty() || self.paths.iter().any(|p| p == path)
    }

    /// The most memory the cache can hold in shared data, by construction.
    pub fn cache_bound_bytes(&self) -> u64 {
        u64::from(self.cache_slots) * self.max_entry_bytes as u64
    }
}

/// The longest a lifetime may be, fresh and both stale windows, seconds: `base`, and each of
/// `overrides` (what it leaves unset is `base`'s).
fn longest(
    base: &Lifetimes,
    overrides: impl Iterator<Item = (Option<u64>, Option<u64>, Option<u64>)>,
) -> u64 {
    let life = |(ttl, swr, sie): (Option<u64>, Option<u64>, Option<u64>)| {
        ttl.unwrap_or(base.ttl_seconds)
            .saturating_add(swr.unwrap_or(base.stale_while_revalidate_seconds))
            .saturating_add(sie.unwrap_or(base.stale_if_error_seconds))
    };
    overrides.map(life).fold(life((None, None, None)), u64::max)
}
