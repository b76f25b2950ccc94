//! Header names in the configuration (`vary_headers`, `forward_headers`, `identity.header`), and
//! which client headers may ever be sent again on a client's behalf (the shared fetch): the rule
//! both `forward_headers` and the fetch itself apply, kept here so that the configuration can
//! refuse a name the fetch would drop without depending on the code that makes the fetch.

use super::error::{field_error, ConfigError};

/// Headers that belong to one connection, not to the message (RFC 9110 7.6.1), plus
/// `content-length`, which Envoy sets for the body it sends: in requests as in answers.
pub const HOP_BY_HOP: &[&str] = &[
    "connection",
    "keep-alive",
    "proxy-connection",
    "transfer-encoding",
    "te",
    "trailer",
    "upgrade",
    "content-length",
];

/// Validators and ranges shape one client's answer; the shared answer must be the whole one.
const ONE_CLIENT: &[&str] = &[
    "if-none-match",
    "if-modified-since",
    "if-match",
    "if-unmodified-since",
    "if-range",
    "range",
];

/// Whether a client header may be carried by a fetch made for others, whatever the
/// configuration lists. Never pseudo-headers, connection headers, one client's validators or
/// ranges, nor `accept-encoding`: the filter asks for `identity` itself.
pub fn carriable(name: &str) -> bool {
    !name.starts_with(':')
        && name != "accept-encoding"
        && !HOP_BY_HOP.contains(&name)
        // `expect: 100-continue` is about the client's upload, which is complete.
        && name != "expect"
        && !ONE_CLIENT.contains(&name)
}

/// `vary_headers`: lower-cased, each once, sorted.
pub(super) fn vary_headers(
    raw: Option<Vec<String>>,
    default: Vec<String>,
) -> Result<Vec<String>, ConfigError> {
    match raw {
        Some(list) => normalize_header_names("vary_headers", list),
        None => Ok(default),
    }
}

pub(super) fn normalize_header_names(
    field: &str,
    names: Vec<String>,
) -> Result<Vec<String>, ConfigError> {
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
pub(super) fn parse_forward_headers(
    raw: Option<Vec<String>>,
    default: Vec<String>,
) -> Result<Vec<String>, ConfigError> {
    let Some(list) = raw else { return Ok(default) };
    let names = normalize_header_names("forward_headers", list.clone())?;
    for (i, name) in list.iter().enumerate() {
        if !carriable(&name.to_ascii_lowercase()) {
            return Err(field_error(
                &format!("forward_headers[{i}]"),
                format!("{name:?} is never sent on a shared fetch (hop-by-hop, a validator or range, or accept-encoding)"),
            ));
        }
    }
    Ok(names)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn what_a_fetch_for_others_never_carries() {
        for never in [
            ":path",
            "connection",
            "content-length",
            "expect",
            "accept-encoding",
            "if-none-match",
            "range",
        ] {
            assert!(!carriable(never), "{never}");
        }
        for may in ["authorization", "user-agent", "content-type", "x-anything"] {
            assert!(carriable(may), "{may}");
        }
    }
}
