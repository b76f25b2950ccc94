//! What may be stored, and for how long. When in doubt, the answer is "not stored".

use crate::cache::entry::Entry;
use crate::cache::freshness::{freshness, Freshness};
use crate::cache::headers::replayed;
use crate::cache::not_stored::NotStored;
use crate::config::Config;
use crate::config::Lifetimes;
use crate::invalidate::marks::tag_hash;
use crate::invalidate::tags::{entry_tags, find_in_answer_generic, find_in_parsed, OperationTags};
use crate::json::{self, Json};
use crate::request::key::CacheKey;
use serde::de::{Deserializer, IgnoredAny, MapAccess, Visitor};
use std::fmt;
use std::rc::Rc;

/// Request headers the key always includes, so a response that varies on them may be stored.
/// `accept-encoding` is not in the key, but the filter asks the origin for `identity` whenever it
/// may store, so an answer varying on it is the same for everyone.
const IMPLICIT_VARY: &[&str] = &["accept", "accept-encoding"];

/// Decides from the status and headers whether a response may be stored at all (freshness aside).
/// `vary_headers` are the request headers the key already includes (lower-case).
pub fn admissible<'h, I>(status: u32, headers: I, vary_headers: &[String]) -> Result<(), NotStored>
where
    I: IntoIterator<Item = (&'h str, &'h [u8])>,
{
    if status != 200 {
        return Err(NotStored::Status);
    }
    let mut json = false;
    for (name, value) in headers {
        match name {
            "set-cookie" => return Err(NotStored::SetCookie),
            "content-encoding" if !value.trim_ascii().eq_ignore_ascii_case(b"identity") => {
                return Err(NotStored::ContentEncoding)
            }
            "content-type" => json = is_json_media_type(value),
            "vary" => check_vary(value, vary_headers)?,
            _ => {}
        }
    }
    if !json {
        return Err(NotStored::ContentType);
    }
    Ok(())
}

fn is_json_media_type(value: &[u8]) -> bool {
    let media = value
        .split(|&b| b == b';')
        .next()
        .unwrap_or_default()
        .trim_ascii();
    media.eq_ignore_ascii_case(b"application/json")
        || media.eq_ignore_ascii_case(b"application/graphql-response+json")
}

/// A `vary` response header is acceptable only if every header it names is part of the key.
pub fn check_vary(value: &[u8], vary_headers: &[String]) -> Result<(), NotStored> {
    for name in value.split(|&b| b == b',') {
        let name = name.trim_ascii();
        if name.is_empty() {
            continue;
        }
        let known = IMPLICIT_VARY
            .iter()
            .any(|h| name.eq_ignore_ascii_case(h.as_bytes()))
            || vary_headers
                .iter()
                .any(|h| name.eq_ignore_ascii_case(h.as_bytes()));
        if !known {
            return Err(NotStored::Vary);
        }
    }
    Ok(())
}

/// An upstream answer, complete.
#[derive(Debug, Clone, Copy)]
pub struct Answer<'a> {
    pub status: u16,
    pub headers: &'a [(String, Vec<u8>)],
    pub body: &'a [u8],
}

/// What the request that caused an answer said, for storing it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Asked {
    /// From the configuration, the operation's rules and the route.
    pub lifetimes: Lifetimes,
    /// When the request looked the key up (see `Entry::born_us`).
    pub born_us: u64,
    pub operation: Rc<OperationTags>,
}

/// What an entry records beside the answer.
#[derive(Debug, Clone, Copy)]
pub struct Stamp<'a> {
    /// When the answer was asked for (see `Entry::born_us`).
    pub born_us: u64,
    pub now_ms: u64,
    pub operation: &'a OperationTags,
}

/// How long an answer with `status` and `headers` may be stored, if it may be at all (its status,
/// its headers, its freshness), within what `allowed` allows.
pub fn storable_life(
    status: u16,
    headers: &[(String, Vec<u8>)],
    config: &Config,
    allowed: &Lifetimes,
    now_ms: u64,
) -> Result<Freshness, NotStored> {
    let pairs = || headers.iter().map(|(n, v)| (n.as_str(), v.as_slice()));
    admissible(u32::from(status), pairs(), &config.vary_headers)?;
    freshness(pairs(), allowed, now_ms)
}

/// The whole decision for a complete upstream answer: the encoded entry to store under `key`, with
/// its tags, or why it may not be stored. `lifetimes` are what the configuration allows for this
/// request.
pub fn storable_entry(
    key: &CacheKey,
    answer: &Answer<'_>,
    config: &Config,
    allowed: &Lifetimes,
    stamp: &Stamp<'_>,
) -> Result<Vec<u8>, NotStored> {
    let life = storable_life(answer.status, answer.headers, config, allowed, stamp.now_ms)?;
    // Where the tags are read, the answer is read once for them and for what makes it storable.
    let parsed = config
        .reads_tags()
        .then(|| std::str::from_utf8(answer.body).ok())
        .flatten()
        .and_then(|text| json::parse(text).ok());
    match &parsed {
        Some(tree) => tree_storable(tree)?,
        None => body_storable(answer.body)?,
    }
    let headers = kept_headers(answer.headers, replayed)?;
    let content = Content {
        status: answer.status,
        headers,
        body: answer.body,
    };
    encode_entry(
        key,
        &life,
        (stamp.born_us, stamp.now_ms),
        content,
        config,
        // `move`: the tree goes once the tags are read, before the entry is encoded.
        move || {
            let found = match &parsed {
                Some(tree) => find_in_parsed(tree, &config.key_fields),
                // Refused by the strict reader, or not read: `serde_json` is all that is left.
                None => find_in_answer_generic(answer.body, &config.key_fields),
            };
            let found = found.unwrap_or_default();
            let op = stamp.operation;
            entry_tags(op.name.as_deref(), &op.root_fields, &found)
        },
    )
}

/// The headers of `headers` an entry keeps (those `keep` names), as text.
fn kept_headers(
    headers: &[(String, Vec<u8>)],
    keep: impl Fn(&str) -> bool,
) -> Result<Vec<(&str, &str)>, NotStored> {
    let mut kept = Vec::new();
    for (name, value) in headers {
        if keep(name) {
            let value = std::str::from_utf8(value).map_err(|_| NotStored::NonUtf8Header)?;
            kept.push((name.as_str(), value));
        }
    }
    Ok(kept)
}

/// What an entry holds: the answer as it is served again.
#[derive(Debug, Clone)]
pub struct Content<'a> {
    pub status: u16,
    pub headers: Vec<(&'a str, &'a str)>,
    pub body: &'a [u8],
}

/// The entry for `key`: `content`, fresh for `life` from `now_ms` (born at `born_us`), with the
/// tags `tags` gives, read only when something uses them (purges, or headers that show them);
/// refused past `max_entry_bytes`. The one encoder of answers and entities.
pub fn encode_entry(
    key: &CacheKey,
    life: &Freshness,
    (born_us, now_ms): (u64, u64),
    content: Content<'_>,
    config: &Config,
    tags: impl FnOnce() -> Vec<String>,
) -> Result<Vec<u8>, NotStored> {
    let shown = config.shows_tags();
    let tags = match config.reads_tags() {
        true => tags(),
        false => Vec::new(),
    };
    let text = if shown { tags.join(",") } else { String::new() };
    let entry = Entry {
        digest: key.digest,
        stored_at_ms: now_ms,
        expires_at_ms: now_ms.saturating_add(life.fresh_ms),
        stale_ms: life.swr_ms,
        error_ms: life.sie_ms,
        upstream_age_s: life.age_s,
        born_us,
        status: content.status,
        headers: content.headers,
        tag_hashes: tags.iter().map(|t| tag_hash(t)).collect(),
        tags: &text,
        body: content.body,
    };
    if entry.encoded_len() > config.max_entry_bytes {
        return Err(NotStored::TooLarge);
    }
    Ok(entry.encode())
}

/// A GraphQL response may be stored only if it is a JSON object without a top-level `errors`
/// member. Only the top level is read; values are skipped without being built.
pub fn body_storable(body: &[u8]) -> Result<(), NotStored> {
    let mut de = serde_json::Deserializer::from_slice(body);
    let has_errors = de
        .deserialize_map(TopLevelErrors)
        .map_err(|_| NotStored::NotJson)?;
    de.end().map_err(|_| NotStored::NotJson)?;
    if has_errors {
        return Err(NotStored::GraphqlErrors);
    }
    Ok(())
}

/// [`body_storable`] of an answer the strict reader has read (no member named twice, so its
/// `errors` is the only one).
fn tree_storable(answer: &Json<'_>) -> Result<(), NotStored> {
    match answer {
        Json::Object(members) if members.iter().any(|(name, _)| name == "errors") => {
            Err(NotStored::GraphqlErrors)
        }
        Json::Object(_) => Ok(()),
        _ => Err(NotStored::NotJson),
    }
}

struct TopLevelErrors;

impl<'de> Visitor<'de> for TopLevelErrors {
    type Value = bool;

    fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
        f.write_str("a GraphQL response object")
    }

    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<bool, A::Error> {
        let mut errors = false;
        while let Some(key) = map.next_key::<std::borrow::Cow<'de, str>>()? {
            errors |= key == "errors";
            map.next_value::<IgnoredAny>()?;
        }
        Ok(errors)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Admission and freshness together, as `storable_entry` decides them, in seconds.
    fn ttl(status: u32, headers: &[(&str, &str)]) -> Result<u64, NotStored> {
        let h = || headers.iter().map(|(n, v)| (*n, v.as_bytes()));
        admissible(status, h(), &["authorization".to_string()])?;
        let allowed = Lifetimes {
            ttl_seconds: 60,
            ..Lifetimes::default()
        };
        Ok(freshness(h(), &allowed, 0)?.fresh_ms / 1000)
    }

    const JSON: (&str, &str) = ("content-type", "application/json");

    fn allowed() -> Lifetimes {
        Lifetimes {
            ttl_seconds: 60,
            ..Lifetimes::default()
        }
    }

    #[test]
    fn plain_json_200_is_stored_for_the_configured_ttl() {
        assert_eq!(ttl(200, &[JSON]), Ok(60));
        assert_eq!(
            ttl(
                200,
                &[(
                    "content-type",
                    "application/graphql-response+json; charset=utf-8"
                )]
            ),
            Ok(60)
        );
    }

    #[test]
    fn refusals() {
        assert_eq!(ttl(500, &[JSON]), Err(NotStored::Status));
        assert_eq!(ttl(201, &[JSON]), Err(NotStored::Status));
        assert_eq!(
            ttl(200, &[JSON, ("set-cookie", "a=b")]),
            Err(NotStored::SetCookie)
        );
        assert_eq!(
            ttl(200, &[JSON, ("cache-control", "no-store")]),
            Err(NotStored::NoStore)
        );
        assert_eq!(
            ttl(200, &[JSON, ("cache-control", "max-age=5, Private")]),
            Err(NotStored::Private)
        );
        assert_eq!(
            ttl(200, &[JSON, ("cache-control", "no-cache")]),
            Err(NotStored::NoCache)
        );
        assert_eq!(
            ttl(200, &[JSON, ("cache-control", "max-age=0")]),
            Err(NotStored::MaxAgeZero)
        );
        assert_eq!(
            ttl(200, &[JSON, ("cache-control", "max-age=abc")]),
            Err(NotStored::MaxAgeZero)
        );
        assert_eq!(
            ttl(200, &[JSON, ("content-encoding", "gzip")]),
            Err(NotStored::ContentEncoding)
        );
        assert_eq!(
            ttl(200, &[("content-type", "text/html")]),
            Err(NotStored::ContentType)
        );
        assert_eq!(ttl(200, &[]), Err(NotStored::ContentType));
        assert_eq!(ttl(200, &[JSON, ("vary", "*")]), Err(NotStored::Vary));
        assert_eq!(
            ttl(200, &[JSON, ("vary", "x-tenant")]),
            Err(NotStored::Vary)
        );
    }

    #[test]
    fn shorter_upstream_lifetimes_win() {
        assert_eq!(
            ttl(200, &[JSON, ("cache-control", "public, max-age=5")]),
            Ok(5)
        );
        assert_eq!(
            ttl(200, &[JSON, ("cache-control", "max-age=5, s-maxage=10")]),
            Ok(10)
        );
        assert_eq!(
            ttl(200, &[JSON, ("cache-control", "s-maxage=\"7\"")]),
            Ok(7)
        );
        assert_eq!(ttl(200, &[JSON, ("cache-control", "max-age=600")]), Ok(60));
        assert_eq!(
            ttl(
                200,
                &[JSON, ("cache-control", "max-age=99999999999999999999999")]
            ),
            Ok(60)
        );
    }

    #[test]
    fn vary_on_keyed_headers_is_fine() {
        assert_eq!(
            ttl(200, &[JSON, ("vary", "Accept-Encoding, Authorization")]),
            Ok(60)
        );
        assert_eq!(ttl(200, &[JSON, ("content-encoding", "identity")]), Ok(60));
    }

    #[test]
    fn storable_entries_replay_the_origin_s_headers_but_one_exchange_s() {
        let key = CacheKey { digest: [1; 32] };
        let config = Config::default();
        let headers: Vec<(String, Vec<u8>)> = vec![
            ("content-type".into(), b"application/json".to_vec()),
            ("x-trace".into(), b"t".to_vec()),
            ("cache-control".into(), b"max-age=5".to_vec()),
            (
                "access-control-allow-origin".into(),
                b"https://app.example".to_vec(),
            ),
            ("date".into(), b"Sun, 06 Nov 1994 08:49:37 GMT".to_vec()),
            ("age".into(), b"1".to_vec()),
            ("x-envoy-upstream-service-time".into(), b"3".to_vec()),
            ("content-length".into(), b"11".to_vec()),
        ];
        let op = OperationTags::default();
        let stamp = Stamp {
            born_us: 900,
            now_ms: 1000,
            operation: &op,
        };
        let answer = |body: &'static [u8]| Answer {
            status: 200,
            headers: &headers,
            body,
        };
        let bytes = storable_entry(
            &key,
            &answer(br#"{"data":{}}"#),
            &config,
            &allowed(),
            &stamp,
        )
        .unwrap();
        let e = Entry::decode(&bytes).unwrap();
        assert_eq!(e.born_us, 900);
        assert_eq!(
            e.headers,
            vec![
                ("content-type", "application/json"),
                ("x-trace", "t"),
                ("cache-control", "max-age=5"),
                ("access-control-allow-origin", "https://app.example"),
            ]
        );
        assert_eq!(e.upstream_age_s, 1);
        assert_eq!(e.expires_at_ms, 5000, "max-age 5 less the upstream age 1");
        assert_eq!(
            storable_entry(
                &key,
                &answer(br#"{"errors":[]}"#),
                &config,
                &allowed(),
                &stamp
            ),
            Err(NotStored::GraphqlErrors)
        );
        let big = format!(r#"{{"data":"{}"}}"#, "x".repeat(config.max_entry_bytes));
        let big = Answer {
            status: 200,
            headers: &headers,
            body: big.as_bytes(),
        };
        assert_eq!(
            storable_entry(&key, &big, &config, &allowed(), &stamp),
            Err(NotStored::TooLarge)
        );
    }

    #[test]
    fn entries_carry_their_tags() {
        let key = CacheKey { digest: [1; 32] };
        let config = Config::parse(br#"{"debug_headers":true}"#).unwrap();
        let headers: Vec<(String, Vec<u8>)> =
            vec![("content-type".into(), b"application/json".to_vec())];
        let op = OperationTags {
            name: Some("GetUser".into()),
            root_fields: vec!["user".into()],
        };
        let stamp = Stamp {
            born_us: 1,
            now_ms: 2,
            operation: &op,
        };
        let body = br#"{"data":{"user":{"__typename":"User","id":1}}}"#;
        let answer = Answer {
            status: 200,
            headers: &headers,
            body,
        };
        let bytes = storable_entry(&key, &answer, &config, &allowed(), &stamp).unwrap();
        let e = Entry::decode(&bytes).unwrap();
        assert_eq!(
            e.tags,
            "operation:GetUser,field:user,type:User,entity:User:1"
        );
        assert_eq!(e.tag_hashes.len(), 4);
        assert_eq!(e.tag_hashes[3], tag_hash("entity:User:1"));
        // Without debugging, the hashes are kept and the text is not.
        let lean = Config::default();
        let bytes = storable_entry(&key, &answer, &lean, &allowed(), &stamp).unwrap();
        let e = Entry::decode(&bytes).unwrap();
        assert_eq!((e.tags, e.tag_hashes.len()), ("", 4));
    }

    /// Where tags are read, the answer is read once for them and for its admission: that
    /// reading must admit and refuse what `body_storable` does (a member named twice is left to
    /// `serde_json`, as before).
    #[test]
    fn an_answer_read_for_its_tags_is_admitted_as_body_storable_admits_it() {
        let key = CacheKey { digest: [1; 32] };
        let headers: Vec<(String, Vec<u8>)> =
            vec![("content-type".into(), b"application/json".to_vec())];
        let op = OperationTags::default();
        let stamp = Stamp {
            born_us: 1,
            now_ms: 2,
            operation: &op,
        };
        let reading = Config::default();
        let not_reading = Config::parse(br#"{"mutation_invalidation":"off"}"#).unwrap();
        assert!(reading.reads_tags() && !not_reading.reads_tags());
        let bodies: [&[u8]; 10] = [
            br#"{"data":{"a":1}}"#,
            br#"{"data":{"errors":[1]}}"#,
            br#"{"data":null,"errors":[{"message":"x"}]}"#,
            br#"{"errors":[]}"#,
            br#"{"data":1"#,
            br#"[1]"#,
            b"",
            br#"{"data":1} x"#,
            br#"{"data":"\u00e9", "e\u0072rors": 1}"#,
            br#"{"data":{"a":1},"data":{"a":2}}"#,
        ];
        for body in bodies {
            let answer = Answer {
                status: 200,
                headers: &headers,
                body,
            };
            for config in [&reading, &not_reading] {
                let stored = storable_entry(&key, &answer, config, &allowed(), &stamp);
                assert_eq!(
                    stored.map(|_| ()),
                    body_storable(body),
                    "{}",
                    String::from_utf8_lossy(body)
                );
            }
        }
    }

    #[test]
    fn bodies() {
        assert_eq!(body_storable(br#"{"data":{"a":1}}"#), Ok(()));
        assert_eq!(body_storable(br#"{"data":{"errors":[1]}}"#), Ok(()));
        assert_eq!(
            body_storable(br#"{"data":null,"errors":[{"message":"x"}]}"#),
            Err(NotStored::GraphqlErrors)
        );
        assert_eq!(
            body_storable(br#"{"errors":[]}"#),
            Err(NotStored::GraphqlErrors)
        );
        assert_eq!(body_storable(br#"{"data":1"#), Err(NotStored::NotJson));
        assert_eq!(body_storable(br#"[1]"#), Err(NotStored::NotJson));
        assert_eq!(body_storable(b""), Err(NotStored::NotJson));
        assert_eq!(body_storable(br#"{"data":1} x"#), Err(NotStored::NotJson));
        assert_eq!(
            body_storable(br#"{"data":"\u00e9", "e\u0072rors": 1}"#),
            Err(NotStored::GraphqlErrors)
        );
    }
}
