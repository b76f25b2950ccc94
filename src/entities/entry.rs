//! One entity as a cache entry: its JSON as the subgraph wrote it, for its type's lifetime capped
//! by the subgraph answer's own freshness, tagged `entity:<Type>:<id>` (from its representation)
//! and with what it holds, so the purge API and mutations reach it.

use crate::cache::not_stored::NotStored;
use crate::cache::storable::{encode_entry, kept_headers, storable_life, Content};
use crate::config::{Config, Lifetimes};
use crate::entities::request::Representation;
use crate::invalidate::tags::{entry_tags, find_in_answer, Found};
use crate::request::key::CacheKey;

/// The subgraph's answer an entity came in: its status and headers.
#[derive(Debug, Clone, Copy)]
pub struct Source<'a> {
    pub status: u16,
    pub headers: &'a [(String, Vec<u8>)],
    /// When it was asked for (µs), and now (ms).
    pub born_us: u64,
    pub now_ms: u64,
}

/// The encoded entry for the entity `raw` (an object, or `null` with a negative TTL), or why not.
pub fn entity_entry(
    key: &CacheKey,
    rep: &Representation,
    raw: &str,
    source: &Source<'_>,
    config: &Config,
    allowed: &Lifetimes,
) -> Result<Vec<u8>, NotStored> {
    let life = storable_life(
        source.status,
        source.headers,
        config,
        allowed,
        source.now_ms,
    )?;
    // Only its type: an entity is served inside an answer the filter assembles.
    let headers = kept_headers(source.headers, |name| name == "content-type")?;
    let content = Content {
        status: source.status,
        headers,
        body: raw.as_bytes(),
    };
    let stamp = (source.born_us, source.now_ms);
    encode_entry(key, &life, stamp, content, config, || {
        tags(rep, raw, config)
    })
}

/// The entity's own tag (its representation names its type and key), then the types and
/// entities inside it.
fn tags(rep: &Representation, raw: &str, config: &Config) -> Vec<String> {
    let wrap = |json: &str| format!(r#"{{"data":{{"e":{json}}}}}"#);
    let mut found: Found =
        find_in_answer(wrap(&rep.canonical).as_bytes(), &config.key_fields).unwrap_or_default();
    let inside = find_in_answer(wrap(raw).as_bytes(), &config.key_fields).unwrap_or_default();
    for t in inside.types {
        if !found.types.contains(&t) {
            found.types.push(t);
        }
    }
    for e in inside.entities {
        if !found.entities.contains(&e) {
            found.entities.push(e);
        }
    }
    found.truncated |= inside.truncated;
    entry_tags(None, &[], &found)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::cache::entry::Entry;

    fn rep(json: &str) -> Representation {
        let value: serde_json::Value = serde_json::from_str(json).unwrap();
        Representation {
            typename: value["__typename"].as_str().unwrap().to_string(),
            canonical: value.to_string(),
        }
    }

    fn source(headers: &[(String, Vec<u8>)]) -> Source<'_> {
        Source {
            status: 200,
            headers,
            born_us: 1_000_000,
            now_ms: 2_000,
        }
    }

    #[test]
    fn an_entity_is_stored_as_written_tagged_by_its_representation_and_what_it_holds() {
        let config = Config::parse(br#"{"debug_headers":true}"#).unwrap();
        let key = CacheKey { digest: [7; 32] };
        let raw = r#"{"name":"A","author":{"__typename":"User","id":"9"}}"#;
        let headers = vec![("content-type".to_string(), b"application/json".to_vec())];
        let allowed = Lifetimes {
            ttl_seconds: 300,
            ..Lifetimes::default()
        };
        let bytes = entity_entry(
            &key,
            &rep(r#"{"__typename":"Product","id":"1"}"#),
            raw,
            &source(&headers),
            &config,
            &allowed,
        )
        .unwrap();
        let e = Entry::decode(&bytes).unwrap();
        assert_eq!(e.body, raw.as_bytes());
        assert_eq!(e.expires_at_ms, 2_000 + 300_000);
        let tags: Vec<&str> = e.tags.split(',').collect();
        for t in [
            "type:Product",
            "entity:Product:1",
            "type:User",
            "entity:User:9",
        ] {
            assert!(tags.contains(&t), "{t} in {tags:?}");
        }
    }

    #[test]
    fn the_subgraph_s_freshness_caps_the_type_s_ttl() {
        let config = Config::default();
        let key = CacheKey { digest: [7; 32] };
        let allowed = Lifetimes {
            ttl_seconds: 300,
            ..Lifetimes::default()
        };
        let r = rep(r#"{"__typename":"Product","id":"1"}"#);
        let cc = |v: &str| {
            vec![
                ("content-type".to_string(), b"application/json".to_vec()),
                ("cache-control".to_string(), v.as_bytes().to_vec()),
            ]
        };
        let capped = entity_entry(
            &key,
            &r,
            "{}",
            &source(&cc("max-age=20")),
            &config,
            &allowed,
        );
        assert_eq!(
            Entry::decode(&capped.unwrap()).unwrap().expires_at_ms,
            22_000
        );
        let refused = entity_entry(&key, &r, "{}", &source(&cc("no-store")), &config, &allowed);
        assert_eq!(refused, Err(NotStored::NoStore));
    }
}
