//! Conditional requests against a stored answer (RFC 9110 13.1): whether a client's validators
//! say the answer it has is current, so a hit can be a `304` instead of the whole body.

use crate::cache::entry::Entry;
use crate::cache::freshness::http_date;
use crate::request::classify::RequestHead;

/// Whether a conditional GET's validators match the stored answer (RFC 9110 13.1.2 and 13.1.3):
/// `if-none-match` by weak comparison, else `if-modified-since` against `last-modified`.
pub fn not_modified(head: &RequestHead, entry: &Entry<'_>) -> bool {
    if head.method != b"GET" {
        return false;
    }
    let header = |name: &str| {
        entry
            .headers
            .iter()
            .find(|(n, _)| *n == name)
            .map(|(_, v)| *v)
    };
    if let Some(candidates) = &head.if_none_match {
        // `*` matches any current representation, and there is one.
        let any = candidates
            .split(|&b| b == b',')
            .any(|c| c.trim_ascii() == b"*");
        return any || header("etag").is_some_and(|etag| etag_matches(candidates, etag));
    }
    match (&head.if_modified_since, header("last-modified")) {
        (Some(since), Some(modified)) => match (http_date(since), http_date(modified.as_bytes())) {
            (Some(since), Some(modified)) => modified <= since,
            _ => false,
        },
        _ => false,
    }
}

fn etag_matches(candidates: &[u8], etag: &str) -> bool {
    let opaque = |t: &[u8]| -> Vec<u8> {
        let t = t.trim_ascii();
        t.strip_prefix(b"W/").unwrap_or(t).to_vec()
    };
    let stored = opaque(etag.as_bytes());
    candidates
        .split(|&b| b == b',')
        .any(|c| opaque(c) == stored)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn entry(headers: Vec<(&'static str, &'static str)>) -> Entry<'static> {
        Entry {
            digest: [0; 32],
            stored_at_ms: 0,
            expires_at_ms: 0,
            stale_ms: 0,
            error_ms: 0,
            upstream_age_s: 0,
            born_us: 0,
            status: 200,
            headers,
            tag_hashes: vec![],
            tags: "",
            body: b"{}",
        }
    }

    fn get(inm: Option<&str>, ims: Option<&str>) -> RequestHead {
        RequestHead {
            method: b"GET".to_vec(),
            if_none_match: inm.map(|v| v.as_bytes().to_vec()),
            if_modified_since: ims.map(|v| v.as_bytes().to_vec()),
            ..RequestHead::default()
        }
    }

    #[test]
    fn validators_are_compared_as_rfc_9110_says() {
        let e = entry(vec![
            ("etag", "W/\"v1\""),
            ("last-modified", "Sun, 06 Nov 1994 08:49:37 GMT"),
        ]);
        assert!(
            not_modified(&get(Some("\"v1\""), None), &e),
            "weak comparison"
        );
        assert!(not_modified(&get(Some("\"v0\", W/\"v1\""), None), &e));
        assert!(not_modified(&get(Some("*"), None), &e));
        assert!(!not_modified(&get(Some("\"v2\""), None), &e));
        assert!(
            !not_modified(
                &get(Some("\"v2\""), Some("Sun, 06 Nov 1994 08:49:37 GMT")),
                &e
            ),
            "if-none-match wins over if-modified-since"
        );
        assert!(not_modified(
            &get(None, Some("Sun, 06 Nov 1994 08:49:37 GMT")),
            &e
        ));
        assert!(!not_modified(
            &get(None, Some("Sat, 05 Nov 1994 08:49:37 GMT")),
            &e
        ));
        assert!(!not_modified(&get(None, Some("garbage")), &e));
        assert!(!not_modified(&get(None, None), &e));
        let mut post = get(Some("*"), None);
        post.method = b"POST".to_vec();
        assert!(!not_modified(&post, &e), "only GETs");
        assert!(
            not_modified(&get(Some("*"), None), &entry(vec![])),
            "* needs no etag"
        );
        assert!(!not_modified(&get(Some("\"v1\""), None), &entry(vec![])));
    }
}
