//! Subject extraction for the `me` field: `authorization: Bearer <token>`.
//!
//! A token with three dot-separated segments is treated as a JWT (the
//! signature is NOT checked): its middle segment is base64url-decoded and its
//! `sub` claim is the subject. Any other token is itself the subject.

/// Returns the subject named by an `authorization` header value, if any.
pub fn bearer_subject(authorization: &str) -> Option<String> {
    let value = authorization.trim();
    let (scheme, token) = value.split_once(' ')?;
    if !scheme.eq_ignore_ascii_case("bearer") {
        return None;
    }
    let token = token.trim();
    if token.is_empty() {
        return None;
    }
    let segments: Vec<&str> = token.split('.').collect();
    if segments.len() == 3 {
        jwt_subject(segments[1])
    } else {
        Some(token.to_string())
    }
}

/// Decodes a JWT payload segment and returns its `sub` claim (a string, or a
/// number rendered as a string).
pub fn jwt_subject(payload_segment: &str) -> Option<String> {
    let bytes = base64url_decode(payload_segment)?;
    let claims: serde_json::Value = serde_json::from_slice(&bytes).ok()?;
    match claims.get("sub")? {
        serde_json::Value::String(s) if !s.is_empty() => Some(s.clone()),
        serde_json::Value::Number(n) => Some(n.to_string()),
        _ => None,
    }
}

/// Decodes unpadded (or padded) base64url. The standard alphabet's `+` and
/// `/` are tolerated too. Returns `None` on any invalid input.
pub fn base64url_decode(input: &str) -> Option<Vec<u8>> {
    let trimmed = input.trim_end_matches('=');
    // A single leftover character can never encode a whole byte.
    if trimmed.len() % 4 == 1 {
        return None;
    }
    let mut out = Vec::with_capacity(trimmed.len() * 3 / 4);
    let mut acc: u32 = 0;
    let mut bits: u32 = 0;
    for c in trimmed.bytes() {
        let v = match c {
            b'A'..=b'Z' => c - b'A',
            b'a'..=b'z' => c - b'a' + 26,
            b'0'..=b'9' => c - b'0' + 52,
            b'-' | b'+' => 62,
            b'_' | b'/' => 63,
            _ => return None,
        };
        acc = (acc << 6) | u32::from(v);
        bits += 6;
        if bits >= 8 {
            bits -= 8;
            out.push(((acc >> bits) & 0xff) as u8);
        }
        acc &= (1 << bits) - 1;
    }
    Some(out)
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]
mod tests {
    use super::*;

    #[test]
    fn base64url_roundtrips() {
        assert_eq!(base64url_decode("").unwrap(), b"");
        assert_eq!(base64url_decode("Zg").unwrap(), b"f");
        assert_eq!(base64url_decode("Zg==").unwrap(), b"f");
        assert_eq!(base64url_decode("Zm8").unwrap(), b"fo");
        assert_eq!(base64url_decode("Zm8=").unwrap(), b"fo");
        assert_eq!(base64url_decode("Zm9v").unwrap(), b"foo");
        assert_eq!(base64url_decode("Zm9vYmFy").unwrap(), b"foobar");
        // url-safe alphabet and the standard one
        assert_eq!(base64url_decode("-_8").unwrap(), vec![0xfb, 0xff]);
        assert_eq!(base64url_decode("+/8").unwrap(), vec![0xfb, 0xff]);
        assert!(base64url_decode("Z").is_none());
        assert!(base64url_decode("Zm9v!").is_none());
        assert!(base64url_decode("Zm 9v").is_none());
    }

    #[test]
    fn jwt_sub() {
        // {"sub":"alice","iat":1}
        let token = "eyJhbGciOiJIUzI1NiJ9.eyJzdWIiOiJhbGljZSIsImlhdCI6MX0.c2ln";
        assert_eq!(
            bearer_subject(&format!("Bearer {token}")).as_deref(),
            Some("alice")
        );
        // Same payload with padding.
        let padded = "e30.eyJzdWIiOiJhbGljZSIsImlhdCI6MX0=.x";
        assert_eq!(
            bearer_subject(&format!("bearer {padded}")).as_deref(),
            Some("alice")
        );
        // {"sub":2}
        assert_eq!(
            bearer_subject("Bearer a.eyJzdWIiOjJ9.b").as_deref(),
            Some("2")
        );
        // {"name":"x"} -> no sub
        assert_eq!(bearer_subject("Bearer a.eyJuYW1lIjoieCJ9.b"), None);
        // Undecodable payload -> no subject (not the raw token)
        assert_eq!(bearer_subject("Bearer a.!!!.b"), None);
        assert_eq!(bearer_subject("Bearer a.bm90IGpzb24.b"), None);
    }

    #[test]
    fn plain_tokens() {
        assert_eq!(bearer_subject("Bearer alice").as_deref(), Some("alice"));
        assert_eq!(bearer_subject("BEARER  3 ").as_deref(), Some("3"));
        assert_eq!(bearer_subject("Bearer a.b").as_deref(), Some("a.b"));
        assert_eq!(bearer_subject("Bearer "), None);
        assert_eq!(bearer_subject("Basic YWxpY2U6cHc="), None);
        assert_eq!(bearer_subject("alice"), None);
        assert_eq!(bearer_subject(""), None);
    }
}
