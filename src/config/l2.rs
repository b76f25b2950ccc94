//! The fleet's shared cache (`graphql-cache-l2`) as this Envoy reaches it, and the secrets that
//! come with it. A secret may be written in the configuration or named by an environment
//! variable (`*_env`), because Envoy's `/config_dump` shows the configuration to whoever can read
//! the admin port; either way it is never printed, not even in an error.

use super::bounds::bounded;
use super::error::{field_error, ConfigError};
use super::raw::RawL2;
use l2_proto::limits::{printable_secret, MIN_SECRET_BYTES};
use std::fmt;

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

/// The fleet's keys (what they sign: `fleet::seal`): the first signs, every one is accepted, so
/// that a key can be rotated without a moment where two Envoys refuse each other's purges.
/// Never printed.
#[derive(Clone, PartialEq, Eq)]
pub struct FleetKey {
    signing: Vec<u8>,
    also_accepted: Vec<Vec<u8>>,
}

/// The fleet key's least length: 256 bits of text.
pub const MIN_FLEET_KEY: usize = 32;

impl FleetKey {
    /// One key. `None` when shorter than [`MIN_FLEET_KEY`].
    pub fn new(bytes: &[u8]) -> Option<FleetKey> {
        FleetKey::rotating(&[bytes])
    }

    /// Signs with the first, accepts any. `None` for none, or one shorter than
    /// [`MIN_FLEET_KEY`].
    pub fn rotating(keys: &[&[u8]]) -> Option<FleetKey> {
        let (first, rest) = keys.split_first()?;
        if keys.iter().any(|k| k.len() < MIN_FLEET_KEY) {
            return None;
        }
        Some(FleetKey {
            signing: first.to_vec(),
            also_accepted: rest.iter().map(|k| k.to_vec()).collect(),
        })
    }

    /// The key that signs.
    pub fn bytes(&self) -> &[u8] {
        &self.signing
    }

    /// Every key whose signature is accepted, the signing one first.
    pub fn accepted(&self) -> impl Iterator<Item = &[u8]> {
        std::iter::once(self.signing.as_slice()).chain(self.also_accepted.iter().map(Vec::as_slice))
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

/// `l2`, checked against `coalesce`.
pub(super) fn parse(
    raw: Option<RawL2>,
    coalesce: bool,
    env: &Env<'_>,
) -> Result<Option<L2>, ConfigError> {
    let l2 = parse_l2(raw, env)?;
    if l2.is_some() && !coalesce {
        // Only a key's leader calls L2: with no leaders nothing would.
        return Err(field_error("l2", "needs `coalesce` on"));
    }
    Ok(l2)
}

/// The L2 service caps every long-poll at its `--max-wait-ms` (5 s by default).
const MAX_L2_WAIT_MS: u64 = 60_000;

fn parse_l2(raw: Option<RawL2>, env: &Env<'_>) -> Result<Option<L2>, ConfigError> {
    let Some(raw) = raw else { return Ok(None) };
    let fleet_key = fleet_keys(&raw, env);
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
    let fleet_key = fleet_key?;
    if l2_secret
        .as_deref()
        .is_some_and(|s| s.len() < MIN_SECRET_BYTES || !printable_secret(s.as_bytes()))
    {
        return Err(field_error(
            "l2.secret",
            format!(
                "must be at least {MIN_SECRET_BYTES} printable characters, without white space"
            ),
        ));
    }
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

/// `fleet_key` (one key) or `fleet_keys` (several, while one is rotated: the first signs), each
/// written in the configuration or named by an environment variable (`fleet_keys_env`: the keys
/// separated by commas).
fn fleet_keys(raw: &RawL2, env: &Env<'_>) -> Result<FleetKey, ConfigError> {
    let one = secret(
        "l2.fleet_key",
        raw.fleet_key.clone(),
        raw.fleet_key_env.clone(),
        env,
    )?;
    let listed = raw.fleet_keys.clone().map(|keys| keys.join(","));
    let several = secret("l2.fleet_keys", listed, raw.fleet_keys_env.clone(), env)?;
    let (field, text) =
        match (one, several) {
            (Some(_), Some(_)) => {
                return Err(field_error(
                    "l2.fleet_keys",
                    "give `fleet_key` or `fleet_keys`, not both",
                ))
            }
            (Some(k), None) => ("l2.fleet_key", vec![k]),
            (None, Some(list)) => (
                "l2.fleet_keys",
                list.split(',').map(|k| k.trim().to_string()).collect(),
            ),
            (None, None) => return Err(field_error(
                "l2.fleet_key",
                "is required: the key (32+ characters) that signs the fleet's entries and purges \
                 (`fleet_key_env` names an environment variable holding it; `fleet_keys` lists \
                 several while one is rotated)",
            )),
        };
    let keys: Vec<&[u8]> = text.iter().map(|k| k.as_bytes()).collect();
    FleetKey::rotating(&keys).ok_or_else(|| field_error(field, "must be at least 32 characters"))
}

/// Envoy's environment as the VM sees it (the variables listed in
/// `vm_config.environment_variables.host_env_keys`).
pub type Env<'a> = dyn Fn(&str) -> Option<String> + 'a;

/// A secret written in the configuration (`field`: Envoy's `/config_dump` shows it) or named by
/// an environment variable (`field_env`: only the name shows). Never echoed in an error.
pub(super) fn secret(
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
