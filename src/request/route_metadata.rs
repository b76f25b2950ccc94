//! What a route says about caching, as Envoy hands it over: its `filter_metadata` namespace in
//! the proxy-wasm pairs format, numbers as little-endian doubles, booleans as one byte. Read
//! strictly (untrusted bytes from the host); anything else overrides nothing.

use crate::request::rules::RouteOverride;

/// The overrides `read` finds, by field name.
pub fn route_override(read: impl Fn(&str) -> Option<Vec<u8>>) -> RouteOverride {
    RouteOverride {
        ttl_seconds: seconds(read("ttl_seconds")),
        stale_while_revalidate_seconds: seconds(read("stale_while_revalidate_seconds")),
        stale_if_error_seconds: seconds(read("stale_if_error_seconds")),
        disabled: flag(read("disabled")),
        entities: choice(read("entities")),
    }
}

/// The longest duration a route may set, as for the configuration's own fields.
use crate::config::ROUTE_LIFETIME_SECONDS as MAX_ROUTE_SECONDS;

/// Envoy hands metadata numbers over as 8-byte little-endian doubles.
pub fn seconds(value: Option<Vec<u8>>) -> Option<u64> {
    let v = f64::from_le_bytes(value?.as_slice().try_into().ok()?);
    (v.is_finite() && v >= 0.0).then(|| (v as u64).min(MAX_ROUTE_SECONDS))
}

/// Booleans come as one byte.
pub fn flag(value: Option<Vec<u8>>) -> bool {
    value.is_some_and(|b| match b.as_slice() {
        [flag] => *flag != 0,
        other => other == b"true",
    })
}

/// A boolean the route may leave unsaid: `None` when absent or not a boolean.
pub fn choice(value: Option<Vec<u8>>) -> Option<bool> {
    match value?.as_slice() {
        [flag] => Some(*flag != 0),
        b"true" => Some(true),
        b"false" => Some(false),
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn route_metadata_values() {
        let n = |v: f64| Some(v.to_le_bytes().to_vec());
        assert_eq!(seconds(n(5.0)), Some(5));
        assert_eq!(seconds(n(-1.0)), None);
        assert_eq!(seconds(n(f64::NAN)), None);
        assert_eq!(
            seconds(n(1e300)),
            Some(MAX_ROUTE_SECONDS),
            "capped at a year"
        );
        assert_eq!(seconds(Some(b"5".to_vec())), None);
        assert!(flag(Some(vec![1])));
        assert!(!flag(Some(vec![0])));
        assert!(flag(Some(b"true".to_vec())));
        assert!(!flag(None));
        assert_eq!(choice(Some(vec![0])), Some(false));
        assert_eq!(choice(Some(vec![1])), Some(true));
        assert_eq!(choice(Some(b"false".to_vec())), Some(false));
        assert_eq!(choice(Some(b"yes".to_vec())), None, "not a boolean: unsaid");
        assert_eq!(choice(None), None);
    }
}
