//! The properties every fuzz target checks, shared with `tests/fuzz_corpus.rs`, which replays the
//! kept corpus on the stable toolchain in `make test`. A property that fails panics: that is what
//! libFuzzer reports as a crash. Every function takes arbitrary bytes from outside.
#![allow(clippy::panic)]

use graphql_cache::cache::entry::Entry;
use graphql_cache::cache::peer::{vetted, Bounds};
use graphql_cache::coalesce::flights::FlightRecord;
use graphql_cache::coalesce::liveness;
use graphql_cache::coalesce::wakeup::Message;
use graphql_cache::config::Config;
use graphql_cache::config::KeyFields;
use graphql_cache::config::Lifetimes;
use graphql_cache::fleet::purge_log::{
    read_page, valid_cursor, valid_generation, PurgeRecord, Reader,
};
use graphql_cache::fleet::seal::FleetKey;
use graphql_cache::fleet::wire::{read_lookup, Looked};
use graphql_cache::invalidate::marks::PurgeView;
use graphql_cache::invalidate::purge_request::parse_selectors;
use graphql_cache::invalidate::shape::find_in_shaped_answer;
use graphql_cache::invalidate::tags::{entry_tags, find_in_answer, MAX_TAGS};
use graphql_cache::request::apq;
use graphql_cache::request::canonical::{canonicalize, mutation_shape, Limits};
use graphql_cache::request::classify::{
    classify_body, classify_get, no_persisted_queries, RequestHead,
};
use graphql_cache::request::http::{parse_get_query, parse_post_body};
use graphql_cache::request::key::CacheKey;
use graphql_cache::request::route_metadata::pairs;

/// One property check over arbitrary bytes.
pub type Check = fn(&[u8]);

pub const TARGETS: &[(&str, Check)] = &[
    ("post_body", post_body),
    ("get_query", get_query),
    ("canonical", canonical),
    ("entry", entry),
    ("flight_record", flight_record),
    ("wakeup", wakeup),
    ("apq_record", apq_record),
    ("purge_body", purge_body),
    ("purge_marks", purge_marks),
    ("answer_tags", answer_tags),
    ("mutation_shape", mutation_answer),
    ("liveness", liveness_record),
    ("config", config),
    ("l2_envelopes", l2_envelopes),
    ("host_pairs", host_pairs),
];

fn head(method: &str, path: &str) -> RequestHead {
    RequestHead {
        method: method.as_bytes().to_vec(),
        path: path.as_bytes().to_vec(),
        authority: b"fuzz.example".to_vec(),
        content_type: Some(b"application/json".to_vec()),
        vary: vec![None, None],
        ..RequestHead::default()
    }
}

/// Canonical printing is a fixed point: printing the printed text gives the same text.
fn assert_canonical_fixed_point(text: &str) {
    let limits = Limits {
        max_depth: 32,
        max_fields: 2000,
    };
    if let Ok(op) = canonicalize(text, None, limits) {
        let again = canonicalize(&op.text, None, limits);
        match again {
            Ok(second) => assert_eq!(second.text, op.text, "canonical text is not a fixed point"),
            Err(e) => panic!(
                "the canonical text does not parse again: {e:?}\n{}",
                op.text
            ),
        }
    }
}

pub fn post_body(data: &[u8]) {
    let config = Config::default();
    let h = head("POST", "/graphql");
    let first = classify_body(&config, &h, data);
    let second = classify_body(&config, &h, data);
    assert_eq!(
        first.as_ref().map(|c| c.key).ok(),
        second.as_ref().map(|c| c.key).ok(),
        "one request, two keys"
    );
    if let Ok(req) = parse_post_body(data) {
        assert_canonical_fixed_point(&req.query);
    }
}

pub fn get_query(data: &[u8]) {
    let Ok(query) = std::str::from_utf8(data) else {
        return;
    };
    let config = Config::default();
    let h = head("GET", "/graphql");
    let a = classify_get(&config, &h, "/graphql", Some(query), &no_persisted_queries);
    let b = classify_get(&config, &h, "/graphql", Some(query), &no_persisted_queries);
    assert_eq!(a.map(|c| c.key).ok(), b.map(|c| c.key).ok());
    if let Ok(req) = parse_get_query(query) {
        assert_canonical_fixed_point(&req.query);
    }
}

pub fn canonical(data: &[u8]) {
    if let Ok(text) = std::str::from_utf8(data) {
        assert_canonical_fixed_point(text);
    }
}

/// A decoder accepts exactly what its encoder writes.
pub fn entry(data: &[u8]) {
    if let Ok(e) = Entry::decode(data) {
        assert_eq!(
            e.encode(),
            data,
            "entry decoded from bytes it would not write"
        );
        let peeked = Entry::peek(data).unwrap_or_else(|e| panic!("decodes but peek fails: {e:?}"));
        assert_eq!(peeked.expires_at_ms, e.expires_at_ms);
    }
}

pub fn flight_record(data: &[u8]) {
    if let Some(r) = FlightRecord::decode(data) {
        assert_eq!(r.encode(), data);
    }
}

pub fn wakeup(data: &[u8]) {
    if let Some(m) = Message::decode(data) {
        assert_eq!(m.encode(), data);
    }
}

pub fn apq_record(data: &[u8]) {
    if let Some((hash, query)) = apq::decode(data) {
        assert_eq!(apq::encode(hash, query), data);
    }
}

pub fn purge_body(data: &[u8]) {
    if let Ok(selectors) = parse_selectors(data) {
        assert!(!selectors.is_empty());
        for s in &selectors {
            for tag in &s.tags {
                assert!(
                    [
                        "entity:",
                        "entities:",
                        "type:",
                        "operation:",
                        "field:",
                        "overflow"
                    ]
                    .iter()
                    .any(|p| tag.starts_with(p)),
                    "{tag}"
                );
            }
        }
    }
}

pub fn purge_marks(data: &[u8]) {
    for slots in [1, 4096] {
        if let Some(view) = PurgeView::decode(data, slots) {
            assert!(
                view.slots.len() <= data.len() / 20,
                "allocated past the input"
            );
            // Decoded with the count it was written with, it encodes back to the same bytes.
            if view.slot_count == slots && data.get(5..9) == Some(&slots.to_le_bytes()[..]) {
                let mut sorted = view.clone();
                sorted.epoch = 0;
                let again = PurgeView::decode(&sorted.encode(), slots);
                assert_eq!(again, Some(sorted));
            }
        }
    }
}

pub fn answer_tags(data: &[u8]) {
    if let Some(found) = find_in_answer(data, &KeyFields::default()) {
        let tags = entry_tags(Some("Op"), &["f".to_string()], &found);
        assert!(tags.len() <= MAX_TAGS);
        let first = if found.truncated { 1 } else { 0 };
        assert_eq!(tags[first], "operation:Op", "coarse tags first");
    }
}

/// A mutation and its answer, split at the first NUL: the client writes one, the origin the
/// other. Mapping and reading never panic, and every entity read is of a type read.
pub fn mutation_answer(data: &[u8]) {
    let (doc, answer) = match data.iter().position(|&b| b == 0) {
        Some(i) => (&data[..i], &data[i + 1..]),
        None => (data, &b"{}"[..]),
    };
    let Ok(doc) = std::str::from_utf8(doc) else {
        return;
    };
    let limits = Limits {
        max_depth: 32,
        max_fields: 2000,
    };
    let Some(shape) = mutation_shape(doc, None, limits) else {
        return;
    };
    let Ok(answer) = serde_json::from_slice::<serde_json::Value>(answer) else {
        return;
    };
    if let Some(found) = find_in_shaped_answer(&answer, &shape, &KeyFields::default()) {
        for (t, _) in &found.entities {
            assert!(found.types.contains(t), "{t} read as an entity, not a type");
        }
    }
}

pub fn liveness_record(data: &[u8]) {
    let entries = liveness::decode(data);
    if !entries.is_empty() {
        assert_eq!(liveness::encode(&entries), data[..5 + entries.len() * 16]);
    }
}

pub fn config(data: &[u8]) {
    match Config::parse(data) {
        Ok(c) => {
            assert!(c.cache_slots >= 1 && c.flight_slots >= 1 && c.tag_slots >= 1);
            assert!(c.max_entry_bytes >= 1024);
            assert!(c
                .purge
                .as_ref()
                .is_none_or(|p| p.token.expose().chars().count() >= 16));
        }
        Err(e) => assert!(!e.to_string().is_empty()),
    }
}

/// What the L2 service sends back: purge records (exactly what the encoder writes), pages of the
/// purge log (a cursor that is safe to put back in a path; no more records than entries), and
/// lookup answers (a hit is never empty).
pub fn l2_envelopes(data: &[u8]) {
    if let Ok(record) = PurgeRecord::decode(data) {
        assert_eq!(
            record.encode().as_deref(),
            Some(data),
            "decode accepts only what encode writes"
        );
    }
    let Some(key) = FleetKey::new(&[7; 32]) else {
        return;
    };
    let reader = Reader {
        key: &key,
        now_us: 1_764_582_000_000_000,
        skew_us: 1_000_000,
    };
    if let Some(page) = read_page(data, &reader) {
        assert!(valid_cursor(&page.cursor));
        assert!(page.generation.as_deref().is_none_or(valid_generation));
        assert!(page.records.len() <= page.entries && page.entries <= data.len() / 8 + 1);
        assert!(page
            .records
            .iter()
            .all(|r| r.at_us <= reader.now_us + reader.skew_us));
    }
    // An entry another Envoy stored: whatever comes back is an entry this Envoy could store.
    let lifetimes = Lifetimes {
        ttl_seconds: 60,
        stale_while_revalidate_seconds: 10,
        stale_if_error_seconds: 0,
    };
    let bounds = Bounds {
        key: &CacheKey {
            digest: data
                .get(5..37)
                .and_then(|d| d.try_into().ok())
                .unwrap_or([0; 32]),
        },
        lifetimes: &lifetimes,
        vary_headers: &[],
        max_entry_bytes: 1 << 20,
        now_ms: 1_764_582_000_000,
        now_us: 1_764_582_000_000_000,
        skew_us: 1_000_000,
    };
    if let Ok(bytes) = vetted(data, &bounds) {
        let entry = Entry::decode(&bytes).expect("vetted entries decode");
        assert!(entry.born_us <= bounds.now_us);
        assert!(entry.expires_at_ms <= bounds.now_ms + 60_000);
    }
    let (value, body) = data.split_at(data.iter().position(|&b| b == 0).unwrap_or(data.len()));
    let headers = vec![
        (":status".to_string(), b"200".to_vec()),
        ("x-l2".to_string(), value.to_vec()),
    ];
    match read_lookup(&headers, || Some(body.to_vec())) {
        Ok(Looked::Hit(v)) => assert!(value == b"hit" && !v.is_empty()),
        Ok(Looked::Lead) => assert_eq!(value, b"lead"),
        Ok(Looked::Busy) => assert_eq!(value, b"busy"),
        Err(_) => {}
    }
}

/// A map as Envoy hands it over (route metadata in one read): read exactly what the pairs format
/// writes, never more entries than the bytes can hold.
pub fn host_pairs(data: &[u8]) {
    let Some(fields) = pairs(data) else {
        return;
    };
    assert!(fields.len() <= data.len() / 10);
    let mut encoded = (fields.len() as u32).to_le_bytes().to_vec();
    for (name, value) in &fields {
        encoded.extend_from_slice(&(name.len() as u32).to_le_bytes());
        encoded.extend_from_slice(&(value.len() as u32).to_le_bytes());
    }
    for (name, value) in &fields {
        encoded.extend_from_slice(name);
        encoded.push(0);
        encoded.extend_from_slice(value);
        encoded.push(0);
    }
    assert_eq!(encoded, data, "decode accepts only what encode writes");
}
