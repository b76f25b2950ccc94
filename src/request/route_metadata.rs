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
    }
}

/// A map as Envoy hands it over (the proxy-wasm pairs format): a `u32` count, each entry's name
/// and value lengths (`u32` each), then each name and value followed by a NUL. Read exactly:
/// anything else is not a map.
pub fn pairs(bytes: &[u8]) -> Option<Vec<(&[u8], &[u8])>> {
    let u32_at = |at: usize| -> Option<usize> {
        let b: [u8; 4] = bytes.get(at..at.checked_add(4)?)?.try_into().ok()?;
        Some(u32::from_le_bytes(b) as usize)
    };
    let count = u32_at(0)?;
    // Each entry takes at least 8 bytes of lengths and 2 NULs: a count beyond that is a lie.
    if count > bytes.len() / 10 {
        return None;
    }
    let mut out = Vec::with_capacity(count);
    let mut at = 4 + count * 8;
    for i in 0..count {
        let (name_len, value_len) = (u32_at(4 + i * 8)?, u32_at(8 + i * 8)?);
        let name = bytes.get(at..at.checked_add(name_len)?)?;
        at += name_len;
        (bytes.get(at) == Some(&0)).then_some(())?;
        at += 1;
        let value = bytes.get(at..at.checked_add(value_len)?)?;
        at += value_len;
        (bytes.get(at) == Some(&0)).then_some(())?;
        at += 1;
        out.push((name, value));
    }
    (at == bytes.len()).then_some(out)
}

/// The longest duration a route may set, as for the configuration's own fields.
const MAX_ROUTE_SECONDS: u64 = 365 * 24 * 3600;

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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn route_metadata_comes_as_pairs() {
        let hex = |s: &str| -> Vec<u8> {
            (0..s.len())
                .step_by(2)
                .map(|i| u8::from_str_radix(&s[i..i + 2], 16).unwrap())
                .collect()
        };
        let ttl = hex("010000000b0000000800000074746c5f7365636f6e647300000000000000004000");
        let two = 2.0f64.to_le_bytes();
        assert_eq!(pairs(&ttl), Some(vec![(&b"ttl_seconds"[..], &two[..])]));
        let off = hex("01000000080000000100000064697361626c6564000100");
        assert_eq!(pairs(&off), Some(vec![(&b"disabled"[..], &[1u8][..])]));
        assert_eq!(pairs(&hex("00000000")), Some(vec![]));
        for bad in [
            &ttl[..ttl.len() - 1],
            &ttl[..3],
            b"",
            &[0xff, 0xff, 0xff, 0xff][..],
        ] {
            assert_eq!(pairs(bad), None, "{bad:?}");
        }
        let mut trailing = ttl.clone();
        trailing.push(0);
        assert_eq!(pairs(&trailing), None);
    }

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
    }
}
