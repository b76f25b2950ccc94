//! Whose entry a private answer is: the identity source. Read from a verified JWT claim or from
//! a header an auth filter sets; never from anything the client alone controls.

use super::error::{field_error, ConfigError};
use super::headers::normalize_header_names;
use super::raw::RawIdentity;

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

    /// The property path of a JWT claim in Envoy's dynamic metadata.
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

pub(super) fn parse_identity(raw: RawIdentity) -> Result<IdentitySource, ConfigError> {
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
