//! One entity as a cache entry: its JSON as the subgraph wrote it, for its type's lifetime capped
//! by the subgraph answer's own freshness, tagged `entity:<Type>:<id>` (from its representation)
//! and with what it holds, so the purge API and mutations reach it.

use crate::cache::not_stored::NotStored;
use crate::cache::storable::{encode_entry, storable_life, Content};
use crate::config::{Config, Lifetimes};
use crate::entities::request::Representation;
use crate::invalidate::tags::{entry_tags, find_in_value, Objects};
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
    // No headers: an entity is served only inside an answer the filter assembles, which sets its
    // own (a `content-type` would be 40 to 50 bytes on an entity of 20 to 250).
    let content = Content {
        status: source.status,
        headers: Vec::new(),
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
    let mut found = Objects::default();
    find_in_value(&rep.canonical, &config.key_fields, &mut found);
    find_in_value(raw, &config.key_fields, &mut found);
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
        assert!(e.headers.is_empty(), "the assembled answer sets its own");
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

    /// The gateway side's purge after `updateProduct` returns Product 3, and the subgraph side's
    /// entry for the representation of Product 3 (its id a string or a number), meet on one tag:
    /// the entry's hashes hit a slot the mutation marked.
    #[test]
    fn a_mutation_returning_the_entity_purges_its_entry() {
        use crate::effects::fake::MapStore;
        use crate::invalidate::marks::{tag_hash, PurgeTable, Target, Verdict};
        use crate::invalidate::mutation::PurgePlan;
        use crate::invalidate::shape::find_in_shaped_answer;
        use crate::request::canonical::mutation_shape;

        let config = Config::default();
        let doc = r#"mutation Rename { updateProduct(id: "3", name: "N") { __typename id name } }"#;
        let shape = mutation_shape(doc, None, config.limits()).unwrap();
        let answer: serde_json::Value = serde_json::from_str(
            r#"{"data":{"updateProduct":{"__typename":"Product","id":"3","name":"N"}}}"#,
        )
        .unwrap();
        let found = find_in_shaped_answer(&answer, &shape, &config.key_fields).unwrap();
        let plan = PurgePlan::of(&found.types, &found.entities, false);
        assert!(plan.tags.contains(&"entity:Product:3".to_string()));
        let store = MapStore::default();
        let table = PurgeTable::new(config.tag_slots);
        table.precreate(&store);
        let targets: Vec<_> = plan
            .tags
            .iter()
            .map(|t| (Target::Tag(tag_hash(t)), false))
            .collect();
        table.apply(&store, &targets, 5_000_000).unwrap();
        let view = table.view(&store, table.epoch(&store));
        let allowed = Lifetimes {
            ttl_seconds: 300,
            ..Lifetimes::default()
        };
        let headers = vec![("content-type".to_string(), b"application/json".to_vec())];
        let verdict = |representation: &str, born_us: u64| {
            let src = Source {
                born_us,
                ..source(&headers)
            };
            let key = CacheKey { digest: [7; 32] };
            let raw = r#"{"name":"Product 3"}"#;
            let bytes =
                entity_entry(&key, &rep(representation), raw, &src, &config, &allowed).unwrap();
            let e = Entry::decode(&bytes).unwrap();
            view.verdict(e.born_us, e.tag_hashes.iter().copied())
        };
        assert_eq!(
            verdict(r#"{"__typename":"Product","id":"3"}"#, 4_000_000),
            Verdict::Purged
        );
        assert_eq!(
            verdict(r#"{"__typename":"Product","id":3}"#, 4_000_000),
            Verdict::Purged,
            "an id sent as a number is the same entity"
        );
        assert_eq!(
            verdict(r#"{"__typename":"Product","id":"4"}"#, 4_000_000),
            Verdict::Fresh,
            "another entity of the type is kept"
        );
        assert_eq!(
            verdict(r#"{"__typename":"Product","id":"3"}"#, 6_000_000),
            Verdict::Fresh,
            "fetched after the mutation"
        );
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
