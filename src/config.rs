//! The plugin configuration: parsed once in `on_configure` into typed, validated structs.
//!
//! Every error names the field it is about, because the only place an operator sees it is one log
//! line when Envoy refuses to load the plugin.

use crate::invalidate::mutation::{MutationPurges, TagSource};
use crate::invalidate::tags::KeyFields;
use crate::request::rules::{Lifetimes, Matcher, Rule, Scope};
use serde::Deserialize;
use std::collections::HashMap;
use std::fmt;

/// Hard ceilings that keep a typo from turning into an unbounded allocation in Envoy's heap.
const MAX_SLOTS: u64 = 1 << 20;
const MAX_TTL_SECONDS: u64 = 365 * 24 * 3600;
const MAX_ENTRY_BYTES: u64 = 64 << 20;
const MAX_TOTAL_CACHE_BYTES: u64 = 8 << 30;
const MAX_QUERY_FIELDS: u64 = 1_000_000;
const MAX_BODY_BYTES: u64 = 64 << 20;
/// graphql-parser refuses to nest deeper than 50 on its own; a higher setting would be a lie.
const MAX_QUERY_DEPTH: u64 = 50;

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
    /// Number of cache slots in shared data: the cache never holds more entries than this.
    pub cache_slots: u32,
    /// Largest stored entry (response body plus headers); larger responses are not stored.
    pub max_entry_bytes: usize,
    /// Adds `x-cache-key` and `x-cache-reason` to responses.
    pub debug_headers: bool,
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
    /// `shadow`: look up, store and count, but always forward and never change an answer.
    pub shadow: bool,
    /// The fleet's shared cache (`graphql-cache-l2`), when configured.
    pub l2: Option<L2>,
}

/// How the filter reaches the fleet's L2 service (Envoy clusters; the wasm ABI has no Redis).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct L2 {
    /// Lookups, stores, releases and purge writes: short calls.
    pub cluster: String,
    /// Long-polls (waiting for another node's fetch, following purges): a cluster of their own
    /// so that waiters cannot take the connections lookups need.
    pub wait_cluster: String,
    /// Budget of one short call; past it the request goes on as if there were no L2.
    pub timeout_ms: u64,
    /// How long a node waits for another node's fetch of the same key before fetching itself.
    pub wait_ms: u64,
    /// The `:authority` of calls to the service.
    pub authority: String,
    /// Sent as `authorization: Bearer` on every call: the service answers nobody else.
    pub secret: Option<Secret>,
    /// Signs what this Envoy puts in the L2 and checks what it reads back: the service and
    /// Redis store the fleet's entries and purges but cannot forge them.
    pub fleet_key: FleetKey,
    /// How far ahead of this Envoy's clock a purge record may be dated (clocks differ a little;
    /// a record dated later is taken as made now, so nobody can purge the future).
    pub purge_skew_ms: u64,
    /// Once reads of the fleet's purge log have failed this long, everything born before they
    /// began is purged here (0: never). Past it, a purge made elsewhere may have been missed.
    pub feed_failsafe_ms: u64,
}

impl L2 {
    /// Longest time a flight spends in L2 calls before its own origin fetch starts.
    pub fn budget_ms(&self) -> u64 {
        self.timeout_ms
            .saturating_mul(2)
            .saturating_add(self.wait_ms)
    }
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PurgeApi {
    pub path: String,
    pub token: Secret,
}

/// The fleet's signing key (what it signs: `fleet::seal`). Never printed.
#[derive(Clone, PartialEq, Eq)]
pub struct FleetKey(Vec<u8>);

/// The fleet key's least length: 256 bits of text.
pub const MIN_FLEET_KEY: usize = 32;

impl FleetKey {
    /// `None` when shorter than [`MIN_FLEET_KEY`].
    pub fn new(bytes: &[u8]) -> Option<FleetKey> {
        (bytes.len() >= MIN_FLEET_KEY).then(|| FleetKey(bytes.to_vec()))
    }

    pub fn bytes(&self) -> &[u8] {
        &self.0
    }
}

impl fmt::Debug for FleetKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("FleetKey(..)")
    }
}

/// A secret from the configuration: never printed, not even by `{:?}` (config errors and logs
/// may show the configuration's other values).
#[derive(Clone, PartialEq, Eq)]
pub struct Secret(String);

impl Secret {
    pub fn new(value: String) -> Secret {
        Secret(value)
    }

    pub fn expose(&self) -> &str {
        &self.0
    }
}

impl fmt::Debug for Secret {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("Secret(..)")
    }
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

/// Where the identity that scopes private entries comes from.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum IdentitySource {
    /// A claim of the JWT verified by `envoy.filters.http.jwt_authn`, which must store the
    /// payload in dynamic metadata under `payload_key` (`payload_in_metadata`).
    JwtClaim { payload_key: String, claim: String },
    /// A request header set by an auth filter (e.g. `ext_authz`), which must overwrite any value
    /// sent by the client.
    Header(String),
}

impl IdentitySource {
    /// The property path of a JWT claim in Envoy's dynamic metadata.
    /// The property path of the verified token's issuer, beside the claim.
    pub fn issuer_path(&self) -> Option<Vec<&str>> {
        match self {
            IdentitySource::JwtClaim { payload_key, .. } => Some(vec![
                "metadata",
                "filter_metadata",
                "envoy.filters.http.jwt_authn",
                payload_key,
                "iss",
            ]),
            IdentitySource::Header(_) => None,
        }
    }

    pub fn property_path(&self) -> Option<Vec<&str>> {
        match self {
            IdentitySource::JwtClaim { payload_key, claim } => Some(vec![
                "metadata",
                "filter_metadata",
                "envoy.filters.http.jwt_authn",
                payload_key,
                claim,
            ]),
            IdentitySource::Header(_) => None,
        }
    }
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
            cache_slots: 1024,
            max_entry_bytes: 128 * 1024,
            debug_headers: false,
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
            local_cache_bytes: 4 << 20,
            key_by_cluster: true,
            key_fields: KeyFields::default(),
            purge: None,
            mutation_invalidation: MutationInvalidation::Entity,
            mutation_purges: MutationPurges::default(),
            tag_slots: 4096,
            apq_slots: 1024,
            shadow: false,
            l2: None,
        }
    }
}

/// A configuration problem, always about one named field.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ConfigError {
    pub field: String,
    pub problem: String,
}

impl fmt::Display for ConfigError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.field.is_empty() {
            write!(f, "invalid configuration: {}", self.problem)
        } else {
            write!(
                f,
                "invalid configuration field `{}`: {}",
                self.field, self.problem
            )
        }
    }
}

impl std::error::Error for ConfigError {}

fn field_error(field: &str, problem: impl Into<String>) -> ConfigError {
    ConfigError {
        field: field.to_string(),
        problem: problem.into(),
    }
}

/// The JSON shape as written by the operator; every field optional.
#[derive(Deserialize, Default)]
#[serde(deny_unknown_fields)]
struct RawConfig {
    ttl_seconds: Option<u64>,
    stale_while_revalidate_seconds: Option<u64>,
    stale_if_error_seconds: Option<u64>,
    paths: Option<Vec<String>>,
    vary_headers: Option<Vec<String>>,
    forward_headers: Option<Vec<String>>,
    max_body_bytes: Option<u64>,
    max_query_depth: Option<u64>,
    max_query_fields: Option<u64>,
    cache_slots: Option<u64>,
    max_entry_bytes: Option<u64>,
    debug_headers: Option<bool>,
    coalesce: Option<bool>,
    flight_slots: Option<u64>,
    fetch_timeout_ms: Option<u64>,
    max_wait_ms: Option<u64>,
    max_waiters: Option<u64>,
    upstream_cluster: Option<String>,
    identity: Option<RawIdentity>,
    default_scope: Option<String>,
    rules: Option<Vec<RawRule>>,
    route_metadata: Option<String>,
    key_memo_entries: Option<u64>,
    local_cache_bytes: Option<u64>,
    key_by_cluster: Option<bool>,
    key_fields: Option<HashMap<String, Vec<String>>>,
    purge_path: Option<String>,
    purge_token: Option<String>,
    purge_token_env: Option<String>,
    mutation_invalidation: Option<String>,
    mutation_tags_from: Option<Vec<String>>,
    mutation_purges_per_second: Option<u64>,
    mutation_purge_burst: Option<u64>,
    tag_slots: Option<u64>,
    apq_slots: Option<u64>,
    mode: Option<String>,
    l2: Option<RawL2>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawL2 {
    cluster: Option<String>,
    wait_cluster: Option<String>,
    timeout_ms: Option<u64>,
    wait_ms: Option<u64>,
    authority: Option<String>,
    secret: Option<String>,
    secret_env: Option<String>,
    fleet_key: Option<String>,
    fleet_key_env: Option<String>,
    purge_skew_ms: Option<u64>,
    feed_failsafe_ms: Option<u64>,
}

/// The L2 service caps every long-poll at its `--max-wait-ms` (5 s by default).
const MAX_L2_WAIT_MS: u64 = 60_000;

fn parse_l2(raw: Option<RawL2>, env: &Env<'_>) -> Result<Option<L2>, ConfigError> {
    let Some(raw) = raw else { return Ok(None) };
    let name = |field: &str, v: Option<String>| -> Result<Option<String>, ConfigError> {
        match v {
            Some(s) if s.trim().is_empty() || s.chars().any(char::is_whitespace) => {
                Err(field_error(
                    field,
                    "must be an Envoy cluster name (no spaces, not empty)",
                ))
            }
            other => Ok(other),
        }
    };
    let cluster = name("l2.cluster", raw.cluster)?.ok_or_else(|| {
        field_error(
            "l2.cluster",
            "is required: the Envoy cluster of the L2 service",
        )
    })?;
    let wait_cluster =
        name("l2.wait_cluster", raw.wait_cluster)?.unwrap_or_else(|| cluster.clone());
    let timeout_ms = bounded("l2.timeout_ms", raw.timeout_ms, 50, 1, 10_000)?;
    let wait_ms = bounded("l2.wait_ms", raw.wait_ms, 2_000, 0, MAX_L2_WAIT_MS)?;
    let authority = match raw.authority {
        Some(a) if a.is_empty() || !a.bytes().all(|b| b.is_ascii_graphic()) => {
            return Err(field_error("l2.authority", "must be a host name"))
        }
        Some(a) => a,
        None => "graphql-cache-l2".to_string(),
    };
    let l2_secret = secret("l2.secret", raw.secret, raw.secret_env, env)?;
    if l2_secret
        .as_deref()
        .is_some_and(|s| s.len() < MIN_SECRET || !s.bytes().all(|b| b.is_ascii_graphic()))
    {
        return Err(field_error(
            "l2.secret",
            "must be at least 16 printable characters, without white space",
        ));
    }
    let fleet_key = secret("l2.fleet_key", raw.fleet_key, raw.fleet_key_env, env)?
        .ok_or_else(|| {
            field_error(
                "l2.fleet_key",
                "is required: the key (32+ characters) that signs the fleet's entries and purges \
                 (`fleet_key_env` names an environment variable holding it)",
            )
        })
        .and_then(|k| {
            FleetKey::new(k.as_bytes())
                .ok_or_else(|| field_error("l2.fleet_key", "must be at least 32 characters"))
        })?;
    let purge_skew_ms = bounded("l2.purge_skew_ms", raw.purge_skew_ms, 1_000, 0, 60_000)?;
    let feed_failsafe_ms = bounded(
        "l2.feed_failsafe_ms",
        raw.feed_failsafe_ms,
        5_000,
        0,
        3_600_000,
    )?;
    Ok(Some(L2 {
        cluster,
        wait_cluster,
        timeout_ms,
        wait_ms,
        authority,
        secret: l2_secret.map(Secret),
        fleet_key,
        purge_skew_ms,
        feed_failsafe_ms,
    }))
}

/// Envoy's environment as the VM sees it (the variables listed in
/// `vm_config.environment_variables.host_env_keys`).
pub type Env<'a> = dyn Fn(&str) -> Option<String> + 'a;

/// The shortest L2 secret accepted.
const MIN_SECRET: usize = 16;

/// A secret written in the configuration (`field`: Envoy's `/config_dump` shows it) or named by
/// an environment variable (`field_env`: only the name shows). Never echoed in an error.
fn secret(
    field: &str,
    literal: Option<String>,
    env_name: Option<String>,
    env: &Env<'_>,
) -> Result<Option<String>, ConfigError> {
    let env_field = format!("{field}_env");
    match (literal, env_name) {
        (Some(_), Some(_)) => Err(field_error(
            &env_field,
            format!("give `{field}` or `{env_field}`, not both"),
        )),
        (Some(v), None) => Ok(Some(v)),
        (None, None) => Ok(None),
        (None, Some(name)) => match env(&name).filter(|v| !v.is_empty()) {
            Some(v) => Ok(Some(v)),
            None => Err(field_error(
                &env_field,
                format!(
                    "environment variable {name:?} is not set for the VM (list it in \
                     vm_config.environment_variables.host_env_keys)"
                ),
            )),
        },
    }
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawIdentity {
    source: String,
    claim: Option<String>,
    payload_key: Option<String>,
    header: Option<String>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawRule {
    operation: Option<String>,
    field: Option<String>,
    ttl_seconds: Option<u64>,
    stale_while_revalidate_seconds: Option<u64>,
    stale_if_error_seconds: Option<u64>,
    scope: Option<String>,
    cache: Option<bool>,
}

fn parse_scope(field: &str, value: &str) -> Result<Scope, ConfigError> {
    match value {
        "public" => Ok(Scope::Public),
        "private" => Ok(Scope::Private),
        other => Err(field_error(
            field,
            format!("{other:?} is not \"public\" or \"private\""),
        )),
    }
}

fn parse_identity(raw: RawIdentity) -> Result<IdentitySource, ConfigError> {
    let non_empty =
        |field: &str, v: Option<String>, default: Option<&str>| -> Result<String, ConfigError> {
            match v.or(default.map(str::to_string)) {
                Some(s) if !s.trim().is_empty() => Ok(s),
                _ => Err(field_error(field, "is required and must not be empty")),
            }
        };
    match raw.source.as_str() {
        "jwt" => {
            if raw.header.is_some() {
                return Err(field_error(
                    "identity.header",
                    "only applies to source \"header\"",
                ));
            }
            Ok(IdentitySource::JwtClaim {
                claim: non_empty("identity.claim", raw.claim, Some("sub"))?,
                payload_key: non_empty(
                    "identity.payload_key",
                    raw.payload_key,
                    Some("jwt_payload"),
                )?,
            })
        }
        "header" => {
            if raw.claim.is_some() || raw.payload_key.is_some() {
                return Err(field_error(
                    "identity.claim",
                    "only applies to source \"jwt\"",
                ));
            }
            let name = non_empty("identity.header", raw.header, None)?;
            let mut names = normalize_header_names("identity.header", vec![name])?;
            Ok(IdentitySource::Header(names.remove(0)))
        }
        other => Err(field_error(
            "identity.source",
            format!("{other:?} is not \"jwt\" or \"header\""),
        )),
    }
}

fn parse_rules(raw: Vec<RawRule>) -> Result<Vec<Rule>, ConfigError> {
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

fn parse_mutation_purges(raw: &RawConfig) -> Result<MutationPurges, ConfigError> {
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
                path,
                token: Secret(token),
            }))
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
        Self::from_raw(raw, env)
    }

    fn from_raw(raw: RawConfig, env: &Env<'_>) -> Result<Config, ConfigError> {
        let d = Config::default();
        let mutation_purges = parse_mutation_purges(&raw)?;
        let ttl_seconds = raw.ttl_seconds.unwrap_or(d.ttl_seconds);
        if ttl_seconds > MAX_TTL_SECONDS {
            return Err(field_error(
                "ttl_seconds",
                "must be at most one year (31536000)",
            ));
        }
        let stale_while_revalidate_seconds = bounded(
            "stale_while_revalidate_seconds",
            raw.stale_while_revalidate_seconds,
            d.stale_while_revalidate_seconds,
            0,
            MAX_TTL_SECONDS,
        )?;
        let stale_if_error_seconds = bounded(
            "stale_if_error_seconds",
            raw.stale_if_error_seconds,
            d.stale_if_error_seconds,
            0,
            MAX_TTL_SECONDS,
        )?;
        let paths = raw.paths.unwrap_or(d.paths);
        for (i, p) in paths.iter().enumerate() {
            if !p.starts_with('/') || p.contains('?') || p.contains('#') {
                return Err(field_error(
                    &format!("paths[{i}]"),
                    format!("{p:?} must start with '/' and contain no '?' or '#'"),
                ));
            }
        }
        let vary_headers = match raw.vary_headers {
            Some(list) => normalize_header_names("vary_headers", list)?,
            None => d.vary_headers,
        };
        let forward_headers = parse_forward_headers(raw.forward_headers, d.forward_headers)?;
        let max_body_bytes = bounded(
            "max_body_bytes",
            raw.max_body_bytes,
            d.max_body_bytes as u64,
            1,
            MAX_BODY_BYTES,
        )?;
        let max_query_depth = bounded(
            "max_query_depth",
            raw.max_query_depth,
            d.max_query_depth as u64,
            1,
            MAX_QUERY_DEPTH,
        )?;
        let max_query_fields = bounded(
            "max_query_fields",
            raw.max_query_fields,
            d.max_query_fields as u64,
            1,
            MAX_QUERY_FIELDS,
        )?;
        let cache_slots = bounded(
            "cache_slots",
            raw.cache_slots,
            d.cache_slots as u64,
            1,
            MAX_SLOTS,
        )?;
        let max_entry_bytes = bounded(
            "max_entry_bytes",
            raw.max_entry_bytes,
            d.max_entry_bytes as u64,
            1024,
            MAX_ENTRY_BYTES,
        )?;
        if cache_slots.saturating_mul(max_entry_bytes) > MAX_TOTAL_CACHE_BYTES {
            return Err(field_error(
                "cache_slots",
                format!(
                    "cache_slots x max_entry_bytes = {} bytes exceeds the {} byte ceiling",
                    cache_slots.saturating_mul(max_entry_bytes),
                    MAX_TOTAL_CACHE_BYTES
                ),
            ));
        }
        let flight_slots = bounded(
            "flight_slots",
            raw.flight_slots,
            u64::from(d.flight_slots),
            1,
            65_536,
        )?;
        let fetch_timeout_ms = bounded(
            "fetch_timeout_ms",
            raw.fetch_timeout_ms,
            d.fetch_timeout_ms,
            1,
            600_000,
        )?;
        let max_wait_ms = bounded("max_wait_ms", raw.max_wait_ms, d.max_wait_ms, 1, 600_000)?;
        let max_waiters = bounded(
            "max_waiters",
            raw.max_waiters,
            d.max_waiters as u64,
            1,
            100_000,
        )?;
        let upstream_cluster = match raw.upstream_cluster {
            Some(c) if c.trim().is_empty() => {
                return Err(field_error(
                    "upstream_cluster",
                    "must not be empty (omit it to use the route's cluster)",
                ))
            }
            other => other,
        };
        let identity = raw.identity.map(parse_identity).transpose()?;
        let default_scope = match raw.default_scope {
            Some(s) => parse_scope("default_scope", &s)?,
            // With an identity source, an operation no rule calls public is private: when in
            // doubt, do not share.
            None if identity.is_some() => Scope::Private,
            None => Scope::Public,
        };
        let rules = parse_rules(raw.rules.unwrap_or_default())?;
        let route_metadata = match raw.route_metadata {
            Some(ns) if ns.is_empty() => None,
            Some(ns) => Some(ns),
            None => d.route_metadata,
        };
        let key_memo_entries = bounded(
            "key_memo_entries",
            raw.key_memo_entries,
            d.key_memo_entries as u64,
            0,
            65_536,
        )?;
        let local_cache_bytes = bounded(
            "local_cache_bytes",
            raw.local_cache_bytes,
            d.local_cache_bytes as u64,
            0,
            256 << 20,
        )?;
        let key_fields = parse_key_fields(raw.key_fields)?;
        let token = secret("purge_token", raw.purge_token, raw.purge_token_env, env)?;
        let purge = parse_purge(raw.purge_path, token)?;
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
            u64::from(d.tag_slots),
            1,
            65_536,
        )?;
        let apq_slots = bounded(
            "apq_slots",
            raw.apq_slots,
            u64::from(d.apq_slots),
            0,
            65_536,
        )?;
        let shadow = match raw.mode.as_deref() {
            None | Some("serve") => false,
            Some("shadow") => true,
            Some(other) => {
                return Err(field_error(
                    "mode",
                    format!("{other:?} is not \"serve\" or \"shadow\""),
                ))
            }
        };
        let l2 = parse_l2(raw.l2, env)?;
        let coalesce = raw.coalesce.unwrap_or(d.coalesce);
        if l2.is_some() && !coalesce {
            // Only a key's leader calls L2: with no leaders nothing would.
            return Err(field_error("l2", "needs `coalesce` on"));
        }
        Ok(Config {
            ttl_seconds,
            stale_while_revalidate_seconds,
            stale_if_error_seconds,
            paths,
            vary_headers,
            forward_headers,
            max_body_bytes: to_usize(max_body_bytes),
            max_query_depth: to_usize(max_query_depth),
            max_query_fields: to_usize(max_query_fields),
            cache_slots: u32::try_from(cache_slots).unwrap_or(u32::MAX),
            max_entry_bytes: to_usize(max_entry_bytes),
            debug_headers: raw.debug_headers.unwrap_or(d.debug_headers),
            coalesce,
            flight_slots: u32::try_from(flight_slots).unwrap_or(u32::MAX),
            fetch_timeout_ms,
            max_wait_ms,
            max_waiters: to_usize(max_waiters),
            upstream_cluster,
            identity,
            default_scope,
            rules,
            route_metadata,
            key_memo_entries: to_usize(key_memo_entries),
            local_cache_bytes: to_usize(local_cache_bytes),
            key_by_cluster: raw.key_by_cluster.unwrap_or(d.key_by_cluster),
            key_fields,
            purge,
            mutation_invalidation,
            mutation_purges,
            tag_slots: u32::try_from(tag_slots).unwrap_or(u32::MAX),
            apq_slots: u32::try_from(apq_slots).unwrap_or(u32::MAX),
            shadow,
            l2,
        })
    }

    /// The configured lifetimes, before rules and routes.
    pub fn lifetimes(&self) -> Lifetimes {
        Lifetimes {
            ttl_seconds: self.ttl_seconds,
            stale_while_revalidate_seconds: self.stale_while_revalidate_seconds,
            stale_if_error_seconds: self.stale_if_error_seconds,
        }
    }

    /// Whether anything can purge (this Envoy's API or mutations, or another Envoy's through the
    /// L2's purge log): then every lookup checks the purge epoch.
    pub fn invalidation_on(&self) -> bool {
        self.purge.is_some()
            || self.mutation_invalidation != MutationInvalidation::Off
            || self.l2.is_some()
    }

    /// The parsing limits for the canonical printer.
    pub fn limits(&self) -> crate::request::canonical::Limits {
        crate::request::canonical::Limits {
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

fn to_usize(v: u64) -> usize {
    usize::try_from(v).unwrap_or(usize::MAX)
}

fn bounded(
    field: &str,
    value: Option<u64>,
    default: u64,
    min: u64,
    max: u64,
) -> Result<u64, ConfigError> {
    let v = value.unwrap_or(default);
    if v < min || v > max {
        return Err(field_error(
            field,
            format!("{v} is out of range {min}..={max}"),
        ));
    }
    Ok(v)
}

fn normalize_header_names(field: &str, names: Vec<String>) -> Result<Vec<String>, ConfigError> {
    let mut out: Vec<String> = Vec::with_capacity(names.len());
    for (i, name) in names.into_iter().enumerate() {
        let lower = name.to_ascii_lowercase();
        let valid = !lower.is_empty()
            && lower
                .bytes()
                .all(|b| b.is_ascii_alphanumeric() || b"!#$%&'*+-.^_`|~".contains(&b));
        if !valid {
            return Err(field_error(
                &format!("{field}[{i}]"),
                format!(
                    "{name:?} is not a valid HTTP header name (pseudo-headers are not allowed)"
                ),
            ));
        }
        if !out.contains(&lower) {
            out.push(lower);
        }
    }
    // Sorted so that the key does not depend on the order the operator listed them in.
    out.sort();
    Ok(out)
}

/// `forward_headers`: header names a shared fetch may carry at all (not hop-by-hop, not one
/// client's validators, not `accept-encoding`, which the filter sets).
fn parse_forward_headers(
    raw: Option<Vec<String>>,
    default: Vec<String>,
) -> Result<Vec<String>, ConfigError> {
    let Some(list) = raw else { return Ok(default) };
    let names = normalize_header_names("forward_headers", list.clone())?;
    for (i, name) in list.iter().enumerate() {
        if !crate::request::forward::carriable(&name.to_ascii_lowercase()) {
            return Err(field_error(
                &format!("forward_headers[{i}]"),
                format!("{name:?} is never sent on a shared fetch (hop-by-hop, a validator or range, or accept-encoding)"),
            ));
        }
    }
    Ok(names)
}

/// Pulls `name` out of serde's "unknown field `name`, expected ..." message.
fn unknown_field_name(message: &str) -> Option<String> {
    let rest = message.strip_prefix("unknown field `")?;
    let end = rest.find('`')?;
    Some(rest[..end].to_string())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn empty_config_gives_defaults() {
        assert_eq!(Config::parse(b"").unwrap(), Config::default());
        assert_eq!(Config::parse(b"  ").unwrap(), Config::default());
        assert_eq!(Config::parse(b"{}").unwrap(), Config::default());
    }

    #[test]
    fn fields_are_read() {
        let c = Config::parse(
            br#"{"ttl_seconds":5,"paths":["/graphql"],"vary_headers":["X-Tenant","authorization"],
                "max_body_bytes":2048,"max_query_depth":10,"max_query_fields":7,"cache_slots":16,"max_entry_bytes":4096,
                "debug_headers":true,"coalesce":false,"flight_slots":8,"fetch_timeout_ms":500,
                "max_wait_ms":700,"max_waiters":3,"upstream_cluster":"origin"}"#,
        )
        .unwrap();
        assert_eq!(c.ttl_seconds, 5);
        assert_eq!(c.paths, vec!["/graphql"]);
        assert_eq!(c.vary_headers, vec!["authorization", "x-tenant"]);
        assert_eq!(c.max_body_bytes, 2048);
        assert_eq!(c.max_query_depth, 10);
        assert_eq!(c.max_query_fields, 7);
        assert_eq!(c.cache_slots, 16);
        assert_eq!(c.max_entry_bytes, 4096);
        assert!(c.debug_headers);
        assert!(!c.coalesce);
        assert_eq!(c.flight_slots, 8);
        assert_eq!(c.fetch_timeout_ms, 500);
        assert_eq!(c.max_wait_ms, 700);
        assert_eq!(c.max_waiters, 3);
        assert_eq!(c.upstream_cluster.as_deref(), Some("origin"));
        assert_eq!(c.cache_bound_bytes(), 16 * 4096);
        assert!(c.handles_path("/graphql"));
        assert!(!c.handles_path("/other"));
    }

    fn err(json: &str) -> ConfigError {
        Config::parse(json.as_bytes()).unwrap_err()
    }

    /// Each configuration is refused with its error naming that field.
    fn assert_fields(cases: &[(&str, &str)]) {
        for (json, field) in cases {
            assert_eq!(err(json).field, *field, "{json}");
        }
    }

    #[test]
    fn invalidation_fields() {
        let c = Config::parse(
            br#"{"purge_path":"/graphql-cache/purge","purge_token":"0123456789abcdef",
                "mutation_invalidation":"type","tag_slots":128,"key_fields":{"Post":["slug"]}}"#,
        )
        .unwrap();
        assert_eq!(
            c.purge,
            Some(PurgeApi {
                path: "/graphql-cache/purge".into(),
                token: Secret::new("0123456789abcdef".into())
            })
        );
        assert_eq!(c.mutation_invalidation, MutationInvalidation::Type);
        assert_eq!(c.tag_slots, 128);
        assert_eq!(c.key_fields.by_type["Post"], vec!["slug"]);
        assert_eq!(c.key_fields.default, vec!["id"]);
        assert!(c.invalidation_on());
        let off = Config::parse(br#"{"mutation_invalidation":"off"}"#).unwrap();
        assert!(!off.invalidation_on());
        assert!(
            Config::default().invalidation_on(),
            "mutations purge by default"
        );
        assert_eq!(err(r#"{"purge_path":"/p"}"#).field, "purge_token");
        assert_eq!(
            err(r#"{"purge_path":"/p","purge_token":"short"}"#).field,
            "purge_token"
        );
        assert_eq!(
            err(r#"{"purge_path":"p","purge_token":"0123456789abcdef"}"#).field,
            "purge_path"
        );
        assert_eq!(
            err(r#"{"purge_token":"0123456789abcdef"}"#).field,
            "purge_token"
        );
        assert_eq!(
            err(r#"{"mutation_invalidation":"all"}"#).field,
            "mutation_invalidation"
        );
        assert_eq!(err(r#"{"tag_slots":0}"#).field, "tag_slots");
        let m = Config::parse(
            br#"{"mutation_tags_from":["header:X-Tags","extensions:tags"],
                "mutation_purges_per_second":5,"mutation_purge_burst":7}"#,
        )
        .unwrap()
        .mutation_purges;
        assert_eq!(
            m.tags_from,
            vec![
                TagSource::Header("x-tags".into()),
                TagSource::Extensions("tags".into())
            ]
        );
        assert_eq!((m.per_second, m.burst), (5, 7));
        assert_fields(&[
            (
                r#"{"mutation_tags_from":["header:ok","body:x"]}"#,
                "mutation_tags_from[1]",
            ),
            (r#"{"mutation_tags_from":"header:x"}"#, "mutation_tags_from"),
            (
                r#"{"mutation_purges_per_second":0}"#,
                "mutation_purges_per_second",
            ),
            (r#"{"mutation_purge_burst":0}"#, "mutation_purge_burst"),
        ]);
        assert_eq!(
            err(r#"{"key_fields":{"User":[]}}"#).field,
            "key_fields.User"
        );
    }

    #[test]
    fn errors_name_the_field() {
        assert_fields(&[
            (r#"{"ttl_seconds":"ten"}"#, "ttl_seconds"),
            (r#"{"ttl_seconds":-1}"#, "ttl_seconds"),
            (r#"{"ttl_secons":1}"#, "ttl_secons"),
            (r#"{"vary_headers":["ok","bad header"]}"#, "vary_headers[1]"),
            (r#"{"vary_headers":[":authority"]}"#, "vary_headers[0]"),
            (r#"{"vary_headers":[1]}"#, "vary_headers[0]"),
            (r#"{"cache_slots":0}"#, "cache_slots"),
            (r#"{"max_entry_bytes":10}"#, "max_entry_bytes"),
            (r#"{"max_body_bytes":0}"#, "max_body_bytes"),
            (r#"{"max_query_depth":51}"#, "max_query_depth"),
            (r#"{"paths":["graphql"]}"#, "paths[0]"),
            (r#"{"max_query_fields":0}"#, "max_query_fields"),
            (r#"{"flight_slots":0}"#, "flight_slots"),
            (r#"{"fetch_timeout_ms":0}"#, "fetch_timeout_ms"),
            (r#"{"max_wait_ms":-5}"#, "max_wait_ms"),
            (r#"{"max_waiters":0}"#, "max_waiters"),
            (r#"{"upstream_cluster":" "}"#, "upstream_cluster"),
            (r#"{"coalesce":1}"#, "coalesce"),
            (r#"{"key_memo_entries":100000}"#, "key_memo_entries"),
            (r#"{"debug_headers":"yes"}"#, "debug_headers"),
            (
                r#"{"cache_slots":1048576,"max_entry_bytes":67108864}"#,
                "cache_slots",
            ),
        ]);
    }

    #[test]
    fn identity_rules_and_routes() {
        let c = Config::parse(
            br#"{"identity":{"source":"jwt"},"rules":[{"operation":"Products","ttl_seconds":60},
                {"field":"me","scope":"private"},{"operation":"Admin","cache":false}],"route_metadata":""}"#,
        )
        .unwrap();
        assert_eq!(
            c.identity,
            Some(IdentitySource::JwtClaim {
                payload_key: "jwt_payload".into(),
                claim: "sub".into()
            })
        );
        assert_eq!(c.default_scope, Scope::Private);
        assert_eq!(c.rules.len(), 3);
        assert_eq!(c.rules[1].scope, Some(Scope::Private));
        assert_eq!(c.route_metadata, None);
        let h = Config::parse(
            br#"{"identity":{"source":"header","header":"X-User"},"default_scope":"public"}"#,
        )
        .unwrap();
        assert_eq!(h.identity, Some(IdentitySource::Header("x-user".into())));
        assert_eq!(h.default_scope, Scope::Public);
        assert_eq!(Config::default().route_metadata, None);
        let r = Config::parse(br#"{"route_metadata":"my_ns"}"#).unwrap();
        assert_eq!(r.route_metadata.as_deref(), Some("my_ns"));
    }

    #[test]
    fn identity_and_rule_errors_name_the_field() {
        assert_fields(&[
            (r#"{"identity":{"source":"cookie"}}"#, "identity.source"),
            (r#"{"identity":{"source":"header"}}"#, "identity.header"),
            (
                r#"{"identity":{"source":"jwt","header":"x"}}"#,
                "identity.header",
            ),
            (
                r#"{"identity":{"source":"jwt","claim":""}}"#,
                "identity.claim",
            ),
            (
                r#"{"identity":{"source":"jwt","clam":"sub"}}"#,
                "identity.clam",
            ),
            (r#"{"default_scope":"shared"}"#, "default_scope"),
            (
                r#"{"rules":[{"operation":"A"},{"field":"me","scope":"mine"}]}"#,
                "rules[1].scope",
            ),
            (r#"{"rules":[{"ttl_seconds":5}]}"#, "rules[0]"),
            (r#"{"rules":[{"operation":"A","field":"b"}]}"#, "rules[0]"),
            (
                r#"{"rules":[{"operation":"A","ttl_seconds":99999999999}]}"#,
                "rules[0].ttl_seconds",
            ),
            (
                r#"{"rules":[{"operation":"A","cache":"no"}]}"#,
                "rules[0].cache",
            ),
        ]);
    }

    #[test]
    fn malformed_json_is_rejected() {
        assert!(Config::parse(b"{").is_err());
        assert!(Config::parse(b"[]").is_err());
        assert!(Config::parse(b"{} x").is_err());
        assert!(Config::parse(&[0xff, 0xfe]).is_err());
    }

    #[test]
    fn display_names_field() {
        let e = err(r#"{"ttl_seconds":"ten"}"#);
        assert!(e.to_string().contains("`ttl_seconds`"), "{e}");
    }

    #[test]
    fn l2_is_optional_and_checked_field_by_field() {
        assert_eq!(Config::default().l2, None);
        let c = Config::parse(br#"{"l2":{"cluster":"graphql_cache_l2","fleet_key":"fleet-key-for-tests-0123456789abcdef"}}"#).unwrap();
        let l2 = c.l2.unwrap();
        assert_eq!(
            l2.wait_cluster, "graphql_cache_l2",
            "long-polls default to the same cluster"
        );
        assert_eq!((l2.timeout_ms, l2.wait_ms), (50, 2000));
        assert_eq!(l2.authority, "graphql-cache-l2");
        assert_eq!(l2.budget_ms(), 2 * 50 + 2000);
        assert_fields(&[
            (r#"{"l2":{}}"#, "l2.cluster"),
            (r#"{"l2":{"cluster":""}}"#, "l2.cluster"),
            (
                r#"{"l2":{"cluster":"a","wait_cluster":"b c"}}"#,
                "l2.wait_cluster",
            ),
            (r#"{"l2":{"cluster":"a","timeout_ms":0}}"#, "l2.timeout_ms"),
            (r#"{"l2":{"cluster":"a","wait_ms":600000}}"#, "l2.wait_ms"),
            (r#"{"l2":{"cluster":"a","authority":""}}"#, "l2.authority"),
            (r#"{"l2":{"cluster":"a","redis":"x"}}"#, "l2.redis"),
            (
                r#"{"coalesce":false,"l2":{"cluster":"a","fleet_key":"fleet-key-for-tests-0123456789abcdef"}}"#,
                "l2",
            ),
            (r#"{"l2":{"cluster":"a"}}"#, "l2.fleet_key"),
            (
                r#"{"l2":{"cluster":"a","fleet_key":"short"}}"#,
                "l2.fleet_key",
            ),
            (
                r#"{"l2":{"cluster":"a","fleet_key":"fleet-key-for-tests-0123456789abcdef","secret":"short"}}"#,
                "l2.secret",
            ),
            (
                r#"{"l2":{"cluster":"a","fleet_key":"fleet-key-for-tests-0123456789abcdef","purge_skew_ms":600000}}"#,
                "l2.purge_skew_ms",
            ),
        ]);
    }

    #[test]
    fn secrets_come_from_the_vm_environment_and_are_never_shown() {
        let env = |name: &str| match name {
            "FLEET" => Some("fleet-key-from-the-environment-0123456789".to_string()),
            "L2" => Some("l2-secret-0123456789".to_string()),
            "PURGE" => Some("purge-token-0123456789".to_string()),
            _ => None,
        };
        let c = Config::parse_with_env(
            br#"{"purge_path":"/p","purge_token_env":"PURGE",
                 "l2":{"cluster":"a","fleet_key_env":"FLEET","secret_env":"L2"}}"#,
            &env,
        )
        .unwrap();
        let l2 = c.l2.as_ref().unwrap();
        assert_eq!(l2.secret.as_ref().unwrap().expose(), "l2-secret-0123456789");
        assert_eq!(
            l2.fleet_key,
            FleetKey::new(b"fleet-key-from-the-environment-0123456789").unwrap()
        );
        assert_eq!(
            c.purge.as_ref().unwrap().token.expose(),
            "purge-token-0123456789"
        );
        let shown = format!("{c:?}");
        for secret in ["l2-secret", "fleet-key-from", "purge-token"] {
            assert!(!shown.contains(secret), "{secret} in {shown}");
        }
        let field = |json: &str| Config::parse_with_env(json.as_bytes(), &env).unwrap_err();
        let missing = field(r#"{"l2":{"cluster":"a","fleet_key_env":"NOPE"}}"#);
        assert_eq!(missing.field, "l2.fleet_key_env");
        assert!(missing.problem.contains("host_env_keys"), "{missing}");
        let both = field(
            r#"{"purge_path":"/p","purge_token":"0123456789abcdef","purge_token_env":"PURGE"}"#,
        );
        assert_eq!(both.field, "purge_token_env");
        let short = field(r#"{"l2":{"cluster":"a","fleet_key_env":"L2"}}"#);
        assert_eq!(short.field, "l2.fleet_key");
        assert!(!short.to_string().contains("l2-secret"), "{short}");
    }

    #[test]
    fn forward_headers_are_read_and_checked() {
        let d = Config::default();
        assert_eq!(
            d.forward_headers,
            vec!["traceparent", "tracestate", "user-agent", "x-request-id"]
        );
        let c = Config::parse(br#"{"forward_headers":["X-Trace","x-trace","baggage"]}"#).unwrap();
        assert_eq!(c.forward_headers, vec!["baggage", "x-trace"]);
        let none = Config::parse(br#"{"forward_headers":[]}"#).unwrap();
        assert!(none.forward_headers.is_empty());
        assert_fields(&[
            (
                r#"{"forward_headers":["ok","bad header"]}"#,
                "forward_headers[1]",
            ),
            (r#"{"forward_headers":[":path"]}"#, "forward_headers[0]"),
            (r#"{"forward_headers":"user-agent"}"#, "forward_headers"),
            (
                r#"{"forward_headers":["a","Connection"]}"#,
                "forward_headers[1]",
            ),
            (
                r#"{"forward_headers":["accept-encoding"]}"#,
                "forward_headers[0]",
            ),
            (
                r#"{"forward_headers":["if-none-match"]}"#,
                "forward_headers[0]",
            ),
            (
                r#"{"forward_headers":["content-length"]}"#,
                "forward_headers[0]",
            ),
        ]);
    }
}
