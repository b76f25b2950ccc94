//! The properties every fuzz target checks, shared with `tests/fuzz_corpus.rs`, which replays the
//! kept corpus on the stable toolchain in `make test`. A property that fails panics: that is what
//! libFuzzer reports as a crash. Every function takes arbitrary bytes from outside.
#![allow(clippy::panic)]

use graphql_cache::cache::conditional::not_modified;
use graphql_cache::cache::entry::Entry;
use graphql_cache::cache::headers::{is_end_to_end, replayed};
use graphql_cache::cache::peer::{vetted, Bounds};
use graphql_cache::cache::storable::{body_storable, storable_entry, Answer, Stamp};
use graphql_cache::coalesce::flights::FlightRecord;
use graphql_cache::coalesce::liveness;
use graphql_cache::coalesce::relay::{NotShareable, Response};
use graphql_cache::coalesce::wakeup::Message;
use graphql_cache::config::Config;
use graphql_cache::config::KeyFields;
use graphql_cache::config::Lifetimes;
use graphql_cache::config::{MutationInvalidation, MutationPurges};
use graphql_cache::effects::header_block::{pairs, HeaderBlock};
use graphql_cache::effects::store::{SharedStore, StoreError};
use graphql_cache::entities::answer::{assemble, Fetched};
use graphql_cache::entities::prefetch::{may_name, named, Template, MAX_PREFETCH};
use graphql_cache::entities::request::EntitiesRequest;
use graphql_cache::fleet::follower::{self, FeedState, FEED_KEY};
use graphql_cache::fleet::outbox::{self, Outbox, MAX_PENDING, MAX_PENDING_BYTES, OUTBOX_KEY};
use graphql_cache::fleet::purge_log::{
    marks, read_page, read_snapshot, valid_cursor, valid_generation, PurgeRecord, Reader,
};
use graphql_cache::fleet::seal::FleetKey;
use graphql_cache::fleet::wire::{read_lookup, Looked};
use graphql_cache::invalidate::marks::{PurgeView, Target};
use graphql_cache::invalidate::mutation::{
    extension_tags, header_tags, Coarse, PurgePlan, MAX_PURGE_TAGS,
};
use graphql_cache::invalidate::purge_request::{authorized, parse_selectors};
use graphql_cache::invalidate::shape::find_in_shaped_answer;
use graphql_cache::invalidate::tags::{entry_tags, find_in_answer, OperationTags, MAX_TAGS};
use graphql_cache::request::apq;
use graphql_cache::request::canonical::{canonicalize, mutation_shape, Limits};
use graphql_cache::request::classify::{
    classify_body, classify_get, classify_headers, HeadersVerdict, Known, RequestHead,
};
use graphql_cache::request::http::{
    is_json_content_type, parse_get_query, parse_post_body, split_path,
};
use graphql_cache::request::key::CacheKey;
use std::cell::RefCell;
use std::collections::HashMap;

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
    ("outbox", outbox_record),
    ("feed_state", feed_state),
    ("sealed", sealed),
    ("origin_answer", origin_answer),
    ("set_index", set_index),
    ("request_head", request_head),
    ("entities_request", entities_request),
    ("entities_answer", entities_answer),
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
    let a = classify_get(&config, &h, "/graphql", Some(query), Known::nothing());
    let b = classify_get(&config, &h, "/graphql", Some(query), Known::nothing());
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
        // The same bytes in a flight record: relayed as the entry's answer, for its key only.
        let key = CacheKey { digest: e.digest };
        let relayed = Response::decode_from_flight(data, &key)
            .unwrap_or_else(|| panic!("an entry is no flight answer"));
        assert_eq!((relayed.status, &relayed.body[..]), (e.status, e.body));
        assert!(relayed
            .headers
            .iter()
            .map(|(n, v)| (n.as_str(), v.as_str()))
            .eq(e.headers.iter().copied()));
        let mut other = key;
        other.digest[0] ^= 1;
        assert_eq!(Response::decode_from_flight(data, &other), None);
    }
}

pub fn flight_record(data: &[u8]) {
    if let Some(r) = FlightRecord::decode(data) {
        assert_eq!(r.encode(), data);
    }
}

/// A set's index record from shared data: it decodes only as written, and placing a key in it
/// always names one of its ways (or refuses).
pub fn set_index(data: &[u8]) {
    use graphql_cache::cache::set_index::{Placement, SetIndex};
    let (ways, rest) = match data.split_first() {
        Some((w, rest)) => (usize::from(*w % 17).max(1), rest),
        None => return,
    };
    let Ok(index) = SetIndex::decode(rest, ways) else {
        return;
    };
    assert_eq!(index.encode(), rest);
    assert_eq!(index.ways.len(), ways);
    let fingerprint = index.ways.first().map_or(1, |w| w.fingerprint ^ 1).max(1);
    let now_ms = index.ways.last().map_or(0, |w| w.keep_until_ms);
    for frequency in [0, 1, 15] {
        let way = match index.place(fingerprint, frequency, now_ms, |w| w.frequency) {
            Placement::Same { way, .. } | Placement::Free { way, .. } => way,
            Placement::Displace { way, victim } => {
                assert!(victim.is_live(now_ms));
                way
            }
            Placement::Reject => continue,
        };
        assert!(way < ways);
    }
    if let Some((way, _)) = index.coldest(now_ms, |w| w.frequency) {
        assert!(index.ways[way].is_live(now_ms));
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
    // A batch of marks (what the service takes) and a page of the snapshot (what it answers).
    if let Ok(batch) = marks::MarksBatch::decode(data) {
        assert!(!batch.marks.is_empty() && batch.marks.len() <= marks::MAX_MARKS_PER_BATCH);
        assert!((marks::MIN_KEEP_MS..=marks::MAX_KEEP_MS).contains(&batch.keep_ms));
        assert!(batch
            .marks
            .iter()
            .all(|m| m.sealed.len() == marks::MARK_BYTES));
    }
    if let Some(page) = read_snapshot(data, &reader) {
        assert!(marks::valid_scan_cursor(&page.cursor) && valid_cursor(&page.tip));
        assert!(page
            .records
            .iter()
            .all(|r| r.at_us <= reader.now_us + reader.skew_us && r.targets.len() == 1));
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
        // Either gate: an entity's (no headers needed) when the input's length is odd.
        entity: data.len() % 2 == 1,
    };
    if let Ok(bytes) = vetted(data, &bounds) {
        let entry =
            Entry::decode(&bytes).unwrap_or_else(|e| panic!("vetted entries decode: {e:?}"));
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
        // The request's header map refuses the same buffers (an empty one: no headers).
        assert!(data.is_empty() || HeaderBlock::parse(data.to_vec()).is_none());
        return;
    };
    assert!(fields.len() <= data.len() / 10);
    let encoded = HeaderBlock::from_pairs(fields.iter().copied());
    assert_eq!(
        encoded.as_bytes(),
        data,
        "decode accepts only what encode writes"
    );
    // The request's header map reads the same format in place: the same pairs, in order.
    let block = HeaderBlock::parse(data.to_vec()).expect("a map pairs() reads");
    assert_eq!(block.iter().collect::<Vec<_>>(), fields);
    assert_eq!(block.len(), fields.len());
}

/// Envoy's shared data with one value in it, for the functions that read and update it there:
/// CAS as Envoy checks it (only on keys that exist), an emptied value still present.
struct Store(RefCell<HashMap<String, (Vec<u8>, u32)>>);

impl Store {
    fn holding(key: &str, value: &[u8]) -> Store {
        Store(RefCell::new(HashMap::from([(
            key.to_string(),
            (value.to_vec(), 1),
        )])))
    }
}

impl SharedStore for Store {
    fn get_cas(&self, key: &str) -> (Option<Vec<u8>>, Option<u32>) {
        match self.0.borrow().get(key) {
            None => (None, None),
            Some((v, cas)) => (Some(v.clone()).filter(|v| !v.is_empty()), Some(*cas)),
        }
    }

    fn set_cas(&self, key: &str, value: &[u8], cas: Option<u32>) -> Result<(), StoreError> {
        let mut map = self.0.borrow_mut();
        let next = match map.get(key) {
            Some((_, current)) if cas.is_some_and(|c| c != *current) => {
                return Err(StoreError::CasMismatch)
            }
            Some((_, current)) => current + 1,
            None => 1,
        };
        map.insert(key.to_string(), (value.to_vec(), next));
        Ok(())
    }
}

/// The purge outbox as shared data holds it: decoded, it encodes back to the same bytes, and
/// holds no more records than the bytes can; a purge pushed onto it is never lost nor dated
/// earlier (the outbox after the push owes every target it owed and the new ones, each at its
/// instant or later, or within a purge of everything no earlier) and the outbox stays bounded.
pub fn outbox_record(data: &[u8]) {
    let before = Outbox::decode(Some(data)).ok();
    if let Some(o) = &before {
        if !data.is_empty() {
            assert_eq!(o.encode(), data, "decode accepts only what encode writes");
        }
        assert!(
            o.pending.len() <= data.len() / 31,
            "allocated past the input"
        );
    }
    let store = Store::holding(OUTBOX_KEY, data);
    assert_eq!(
        outbox::pending(&store),
        before.as_ref().map_or(0, |o| o.pending.len())
    );
    let at_us = 1_764_582_000_000_000;
    let targets = [(Target::Tag(7), true), (Target::Tag(8), false)];
    let pushed = outbox::push(&store, at_us, &targets)
        .unwrap_or_else(|e| panic!("an uncontended push fails: {e:?}"));
    let stored = store.get(OUTBOX_KEY).unwrap_or_default();
    assert!(
        stored.len() <= 13 + MAX_PENDING_BYTES,
        "the outbox outgrew its bound"
    );
    let after = Outbox::decode(Some(&stored))
        .unwrap_or_else(|()| panic!("push wrote an outbox it cannot read"));
    assert_eq!(pushed.pending, after.pending.len());
    assert!(after.pending.len() <= MAX_PENDING);
    let new = PurgeRecord {
        at_us,
        targets: targets.to_vec(),
    };
    // Never less: every target owed before, and the new ones, is still owed at its instant or
    // later (merged, or within a purge of everything); an unreadable outbox owes everything.
    let owed: Vec<&PurgeRecord> = match &before {
        Some(b) => b.pending.iter().map(|p| &p.record).chain([&new]).collect(),
        None => vec![&new],
    };
    for record in owed {
        for &(target, soft) in &record.targets {
            let covered = after.pending.iter().any(|p| {
                p.record.at_us >= record.at_us
                    && p.record
                        .targets
                        .iter()
                        .any(|&(t, s)| t == Target::All && !s || (t, s) == (target, soft))
            });
            assert!(
                covered,
                "{target:?} (soft: {soft}) at {} was lost",
                record.at_us
            );
        }
    }
    if before.is_none() {
        assert!(pushed.folded, "an unreadable outbox was not folded");
    }
    if !pushed.merged {
        if let Some(before) = &before {
            assert_eq!(after.pending[..before.pending.len()], before.pending[..]);
        }
    }
    // The oldest are sent first; once the log has them, they alone are no longer owed.
    let (sent, last) = after.oldest(2048);
    assert_eq!(
        sent.first().copied(),
        after.pending.first().map(|p| &p.record)
    );
    if let Some(last) = last {
        outbox::acknowledge(&store, 0, last)
            .unwrap_or_else(|e| panic!("an uncontended acknowledge fails: {e:?}"));
        let left: Vec<_> = after.pending.iter().filter(|p| p.seq > last).collect();
        let now = Outbox::decode(store.get(OUTBOX_KEY).as_deref())
            .unwrap_or_else(|()| panic!("acknowledge wrote an outbox it cannot read"));
        assert_eq!(now.pending.iter().collect::<Vec<_>>(), left);
    }
}

/// The purge-log follower's state as shared data holds it: what decodes encodes to a canonical
/// form no longer than the input that decodes to the same state; every worker reads it (junk as
/// a fresh start), and a worker takes the lease only when it is its own or has run out, keeping
/// the cursor, the generation and the flags.
pub fn feed_state(data: &[u8]) {
    let decoded = FeedState::try_decode(data);
    if let Some(state) = &decoded {
        let again = state.encode();
        assert!(again.len() <= data.len(), "encodes longer than it decoded");
        assert_eq!(FeedState::try_decode(&again).as_ref(), Some(state));
    }
    let store = Store::holding(FEED_KEY, data);
    let seen = follower::read(&store);
    assert_eq!(seen, decoded.unwrap_or_default());
    let (me, now_ms, lease_ms) = (9, 1_764_582_000_000, 3_000);
    match follower::lead(&store, me, now_ms, lease_ms) {
        Ok(Some(led)) => {
            assert!(
                seen.owner == me || seen.lease_until_ms <= now_ms,
                "lease stolen"
            );
            let expected = FeedState {
                owner: me,
                lease_until_ms: now_ms + lease_ms,
                ..seen
            };
            assert_eq!(led, expected);
            assert_eq!(follower::read(&store), expected);
        }
        Ok(None) => {
            assert!(seen.owner != me && seen.lease_until_ms > now_ms);
            assert_eq!(follower::read(&store), seen, "changed without the lease");
        }
        Err(e) => panic!("an uncontended lead fails: {e:?}"),
    }
}

/// The fleet key's seal, as values come back from the L2: what opens is exactly what the key
/// seals; a value sealed here opens here only (this fleet's key, this cache key, this kind of
/// value, unaltered); and what opens is read as the L2's readers read it.
pub fn sealed(data: &[u8]) {
    let (Some(key), Some(other)) = (FleetKey::new(&[7; 32]), FleetKey::new(&[8; 32])) else {
        return;
    };
    // The key the `origin_answer` and seed entries are stored under.
    let cache_key = CacheKey { digest: [3; 32] };
    if let Some(value) = key.open_entry(&cache_key, data) {
        assert_eq!(
            key.seal_entry(&cache_key, value),
            data,
            "opened unsealed bytes"
        );
    }
    if let Some(value) = key.open_record(data) {
        assert_eq!(key.seal_record(value), data, "opened unsealed bytes");
    }
    let entry = key.seal_entry(&cache_key, data);
    assert_eq!(key.open_entry(&cache_key, &entry), Some(data));
    assert_eq!(
        other.open_entry(&cache_key, &entry),
        None,
        "another fleet's"
    );
    let mut moved = cache_key;
    moved.digest[0] ^= 1;
    assert_eq!(
        key.open_entry(&moved, &entry),
        None,
        "replayed for another key"
    );
    assert_eq!(
        key.open_record(&entry),
        None,
        "an entry passed off as a record"
    );
    let flip = data.first().map_or(0, |&b| usize::from(b)) % entry.len();
    let mut flipped = entry.clone();
    flipped[flip] ^= 1;
    assert_eq!(key.open_entry(&cache_key, &flipped), None, "altered");
    assert_eq!(key.open_entry(&cache_key, &entry[..entry.len() - 1]), None);
    let record = key.seal_record(data);
    assert_eq!(key.open_record(&record), Some(data));
    assert_eq!(other.open_record(&record), None, "another fleet's");
    assert_eq!(
        key.open_entry(&cache_key, &record),
        None,
        "a record passed off as an entry"
    );
    // Past the seal (the value in `data` when it opens, else `data` as sealed here): a record
    // dated no later than the reader's clock allows, an entry this Envoy could have stored.
    let reader = Reader {
        key: &key,
        now_us: 1_764_582_000_000_000,
        skew_us: 1_000_000,
    };
    let value = key.open_record(data).unwrap_or(data);
    let read = reader.record(key.open_record(data).map_or(&record[..], |_| data), "");
    let mut decoded = PurgeRecord::decode(value).ok();
    if let Some(r) = &mut decoded {
        r.at_us = r.at_us.min(reader.now_us + reader.skew_us);
    }
    assert_eq!(read, decoded);
    let lifetimes = Lifetimes {
        ttl_seconds: 60,
        stale_while_revalidate_seconds: 10,
        stale_if_error_seconds: 5,
    };
    let bounds = Bounds {
        key: &cache_key,
        lifetimes: &lifetimes,
        vary_headers: &[],
        max_entry_bytes: 1 << 20,
        now_ms: 1_764_582_000_000,
        now_us: reader.now_us,
        skew_us: reader.skew_us,
        entity: data.len() % 2 == 1,
    };
    let value = key.open_entry(&cache_key, data).unwrap_or(data);
    if let Ok(bytes) = vetted(value, &bounds) {
        let e = Entry::decode(&bytes).unwrap_or_else(|e| panic!("vetted, undecodable: {e:?}"));
        assert_eq!(e.digest, cache_key.digest);
        assert!(e.born_us <= bounds.now_us && e.stored_at_ms <= bounds.now_ms);
        assert!(e.expires_at_ms <= bounds.now_ms + 60_000);
        assert!(e.stale_ms <= 10_000 && e.error_ms <= 5_000);
        assert_eq!(
            vetted(&bytes, &bounds).as_deref(),
            Ok(&bytes[..]),
            "vetting twice changes the entry"
        );
    }
}

/// An origin's answer as the filter reads it, in a line format: the status on the first line,
/// then `name:value` lines (names lower case, as Envoy hands them over), then a NUL and the body.
/// A query's answer is stored only as an entry that decodes to exactly that answer's replayed
/// headers and body, lives no longer than the configuration allows and passes another Envoy's
/// vetting from the L2; a mutation's answer declares bounded tags and purges a bounded plan.
pub fn origin_answer(data: &[u8]) {
    let (head, body) = match data.iter().position(|&b| b == 0) {
        Some(i) => (&data[..i], &data[i + 1..]),
        None => (data, &b"{\"data\":{}}"[..]),
    };
    let mut lines = head.split(|&b| b == b'\n');
    let status = lines
        .next()
        .and_then(|l| std::str::from_utf8(l).ok())
        .and_then(|l| l.trim().parse::<u16>().ok())
        .unwrap_or(200);
    let headers: Vec<(String, Vec<u8>)> = lines
        .filter_map(|line| {
            let colon = line.iter().position(|&b| b == b':')?;
            let name = std::str::from_utf8(&line[..colon]).ok()?;
            let value = line[colon + 1..].trim_ascii_start();
            Some((name.to_ascii_lowercase(), value.to_vec()))
        })
        .collect();
    let mut config = Config {
        debug_headers: true,
        vary_headers: vec!["x-tenant".to_string()],
        ..Config::default()
    };
    config.max_entry_bytes = 1 << 20;
    let allowed = Lifetimes {
        ttl_seconds: 60,
        stale_while_revalidate_seconds: 10,
        stale_if_error_seconds: 5,
    };
    let key = CacheKey { digest: [3; 32] };
    let operation = OperationTags {
        name: Some("Op".to_string()),
        root_fields: vec!["f".to_string()],
    };
    let (now_ms, born_us) = (1_764_582_000_000, 1_764_581_999_000_000);
    let stamp = Stamp {
        born_us,
        now_ms,
        operation: &operation,
    };
    let answer = Answer {
        status,
        headers: &headers,
        body,
    };
    let stored = storable_entry(&key, &answer, &config, &allowed, &stamp);
    if let Ok(bytes) = &stored {
        let bytes = &bytes[..];
        let e = Entry::decode(bytes).unwrap_or_else(|e| panic!("stored, undecodable: {e:?}"));
        assert_eq!(e.encode(), bytes);
        assert!(bytes.len() <= config.max_entry_bytes);
        assert_eq!((e.digest, e.status, e.body), (key.digest, 200, body));
        assert!(body_storable(body).is_ok());
        let replayed_headers: Vec<(&str, &[u8])> = headers
            .iter()
            .filter(|(n, _)| replayed(n))
            .map(|(n, v)| (n.as_str(), v.as_slice()))
            .collect();
        let kept: Vec<(&str, &[u8])> = e.headers.iter().map(|(n, v)| (*n, v.as_bytes())).collect();
        assert_eq!(
            kept, replayed_headers,
            "stored other headers than the answer's"
        );
        assert!(e.expires_at_ms > now_ms && e.expires_at_ms <= now_ms + 60_000);
        assert_eq!((e.stored_at_ms, e.born_us), (now_ms, born_us));
        assert!(e.tag_hashes.len() <= MAX_TAGS);
        let bounds = Bounds {
            key: &key,
            lifetimes: &allowed,
            vary_headers: &config.vary_headers,
            max_entry_bytes: config.max_entry_bytes,
            now_ms,
            now_us: now_ms * 1000,
            skew_us: 0,
            entity: false,
        };
        if let Err(refused) = vetted(bytes, &bounds) {
            panic!("an entry this Envoy stores is refused from the L2: {refused:?}");
        }
    }
    // The same answer relayed to the requests waiting on its fetch: only its end-to-end headers,
    // only when they are text; to other requests only when meant for anyone; through a flight
    // record exactly as it was.
    match Response::from_upstream(status, headers.clone(), body.to_vec()) {
        Ok(relayed) => {
            let end_to_end: Vec<(&str, &[u8])> = headers
                .iter()
                .filter(|(n, _)| is_end_to_end(n))
                .map(|(n, v)| (n.as_str(), v.as_slice()))
                .collect();
            assert!(relayed
                .headers
                .iter()
                .map(|(n, v)| (n.as_str(), v.as_bytes()))
                .eq(end_to_end));
            // What is stored for everyone is shared with everyone waiting.
            assert!(
                stored.is_err() || relayed.shareable(&config.vary_headers).is_ok(),
                "stored, yet not shared with the requests waiting on it"
            );
            if relayed.shareable(&config.vary_headers).is_ok() {
                assert!(!relayed.headers.iter().any(|(n, v)| n == "set-cookie"
                    || (n == "cache-control"
                        && v.split(',')
                            .any(|d| d.trim().eq_ignore_ascii_case("private")))));
            }
            if let Some(record) = relayed.encode_for_flight(&key, now_ms, 1 << 20) {
                assert_eq!(
                    Response::decode_from_flight(&record, &key),
                    Some(relayed),
                    "a flight record relays another answer"
                );
            }
        }
        Err(NotShareable::NonTextHeader) => assert!(headers
            .iter()
            .any(|(n, v)| is_end_to_end(n) && std::str::from_utf8(v).is_err())),
        Err(e) => panic!("refused to relay as {e:?}"),
    }
    // The same answer to a mutation: what it declares, and what that purges.
    let sources = MutationPurges::default().tags_from;
    let mut declared = header_tags(&sources, &headers);
    assert!(declared.len() <= 256 && declared.iter().all(|t| !t.is_empty()));
    assert!(declared
        .iter()
        .all(|t| !t.contains(|c: char| c == ',' || c.is_ascii_whitespace())));
    if let Ok(json) = serde_json::from_slice::<serde_json::Value>(body) {
        let from_extensions = extension_tags(&sources, &json);
        assert!(from_extensions.len() <= 256);
        declared.extend(from_extensions);
    }
    for mode in [MutationInvalidation::Entity, MutationInvalidation::Type] {
        let Some(plan) = PurgePlan::declared(&declared, mode == MutationInvalidation::Type) else {
            continue;
        };
        assert!(!plan.tags.is_empty());
        assert!(
            plan.tags.windows(2).all(|w| w[0] < w[1]),
            "tags sorted, each once"
        );
        assert!(
            plan.types.windows(2).all(|w| w[0] < w[1]),
            "types sorted, each once"
        );
        let known = ["entity:", "entities:", "type:", "operation:", "field:"];
        assert!(plan
            .tags
            .iter()
            .all(|t| t == "overflow" || known.iter().any(|p| t.starts_with(p))));
        assert!(plan.tags.len() <= 3 * declared.len());
        match plan.collapse() {
            Coarse::Tags(tags) => assert!(!tags.is_empty() && tags.len() <= MAX_PURGE_TAGS),
            Coarse::All => {}
        }
    }
}

/// A request's head as the filter decides on it before any body, in a line format: method, path,
/// `content-type`, `content-encoding`, `content-length`, `if-none-match`, `if-modified-since`,
/// `authorization` (a missing or empty line is a missing header). Deciding is deterministic and agrees with what the head
/// says; a conditional GET is answered `304` exactly as RFC 9110 13.1 compares validators.
pub fn request_head(data: &[u8]) {
    let mut fields = data.split(|&b| b == b'\n');
    let mut next = || fields.next().filter(|f| !f.is_empty()).map(<[u8]>::to_vec);
    let method = next().unwrap_or_default();
    let path = next().unwrap_or_default();
    let mut head = RequestHead {
        method,
        path,
        authority: b"fuzz.example".to_vec(),
        content_type: next(),
        content_encoding: next(),
        content_length: next(),
        if_none_match: next(),
        if_modified_since: next(),
        vary: vec![None, None],
        ..RequestHead::default()
    };
    // The purge API's bearer token: exactly `Bearer <token>`.
    let authorization = next();
    let token = "fuzz-purge-token-0123456789";
    assert_eq!(
        authorized(authorization.as_deref(), token),
        authorization.as_deref() == Some(format!("Bearer {token}").as_bytes())
    );
    let config = Config {
        paths: vec!["/graphql".to_string()],
        max_body_bytes: 1000,
        ..Config::default()
    };
    for end_of_stream in [false, true] {
        let verdict = classify_headers(&config, &head, end_of_stream);
        let again = classify_headers(&config, &head, end_of_stream);
        assert_eq!(verdict, again, "one head, two verdicts");
        let path = std::str::from_utf8(&head.path)
            .ok()
            .map(|p| split_path(p).0);
        match verdict {
            HeadersVerdict::NotHandled => {
                assert!(path.is_some_and(|p| p != "/graphql"))
            }
            HeadersVerdict::NeedBody => {
                assert_eq!(head.method, b"POST");
                assert!(!end_of_stream && path == Some("/graphql"));
                assert!(head
                    .content_type
                    .as_deref()
                    .is_some_and(is_json_content_type));
                let length = head
                    .content_length
                    .as_deref()
                    .and_then(|l| std::str::from_utf8(l).ok()?.trim().parse::<u64>().ok());
                assert!(
                    length.is_none_or(|l| l <= 1000),
                    "a body past the limit read"
                );
            }
            HeadersVerdict::Ready(_) => {
                assert_eq!(head.method, b"GET");
                assert_eq!(path, Some("/graphql"));
            }
            HeadersVerdict::Bypass(_) => {}
        }
    }
    let entry = Entry {
        digest: [3; 32],
        stored_at_ms: 0,
        expires_at_ms: 0,
        stale_ms: 0,
        error_ms: 0,
        upstream_age_s: 0,
        born_us: 0,
        status: 200,
        headers: vec![
            ("etag", "W/\"v1\""),
            ("last-modified", "Mon, 01 Dec 2025 09:40:00 GMT"),
        ],
        tag_hashes: vec![],
        tags: "",
        body: b"{}",
    };
    let fresh = not_modified(&head, &entry);
    if head.method != b"GET" {
        assert!(
            !fresh,
            "304 to a {:?}",
            String::from_utf8_lossy(&head.method)
        );
        head.method = b"GET".to_vec();
    }
    let fresh = not_modified(&head, &entry);
    match &head.if_none_match {
        Some(candidates) => {
            let tokens: Vec<&[u8]> = candidates
                .split(|&b| b == b',')
                .map(<[u8]>::trim_ascii)
                .collect();
            let matches = tokens
                .iter()
                .any(|t| *t == b"*" || t.strip_prefix(b"W/").unwrap_or(t) == b"\"v1\"");
            assert_eq!(fresh, matches, "if-none-match compared wrongly");
            // `if-modified-since` counts only without `if-none-match`.
            let mut without = head.clone();
            without.if_modified_since = None;
            assert_eq!(not_modified(&without, &entry), fresh);
        }
        None => {
            if head.if_modified_since.as_deref() == Some(&b"Mon, 01 Dec 2025 09:40:00 GMT"[..]) {
                assert!(fresh, "not modified since its own date");
            }
            if head.if_modified_since.is_none() {
                assert!(!fresh);
            }
        }
    }
}

const ENTITY_LIMITS: Limits = Limits {
    max_depth: 32,
    max_fields: 2000,
};

/// The entity a test subgraph answers for field `f`'s distinct representation `d`: an object,
/// or `null` for every third.
fn test_entity(f: usize, d: usize) -> String {
    match d % 3 {
        2 => "null".to_string(),
        _ => format!(r#"{{"f":{f},"d":{d}}}"#),
    }
}

/// An `_entities` request: split, rewritten for its misses, and answered half from entries and
/// half from a subgraph (one entity of each field failing), merges into what the subgraph would
/// have answered to the whole batch, error paths included.
pub fn entities_request(data: &[u8]) {
    let Ok(req) = EntitiesRequest::read(data, ENTITY_LIMITS) else {
        return;
    };
    let body: serde_json::Value = serde_json::from_slice(data).unwrap_or_default();
    for field in &req.fields {
        let asked = body["variables"][&field.variable]
            .as_array()
            .map_or(0, Vec::len);
        assert_eq!(field.positions.len(), asked, "a position lost");
        assert!(field.positions.iter().all(|d| *d < field.distinct.len()));
        let mut texts: Vec<&str> = field
            .distinct
            .iter()
            .map(|r| r.canonical.as_str())
            .collect();
        texts.sort_unstable();
        texts.dedup();
        assert_eq!(
            texts.len(),
            field.distinct.len(),
            "a representation asked twice"
        );
    }
    // Everything sent again: the same split.
    let all: Vec<Vec<usize>> = req
        .fields
        .iter()
        .map(|f| (0..f.distinct.len()).collect())
        .collect();
    let again = EntitiesRequest::read(&req.rewritten(&all), ENTITY_LIMITS)
        .unwrap_or_else(|e| panic!("a rewritten request does not read: {e:?}"));
    for (a, b) in req.fields.iter().zip(&again.fields) {
        assert_eq!(
            a.distinct, b.distinct,
            "rewriting changed the representations"
        );
    }
    // Odd distinct representations fetched, even ones from entries; each field's first fetched
    // one fails.
    let sent: Vec<Vec<usize>> = req
        .fields
        .iter()
        .map(|f| (0..f.distinct.len()).filter(|d| d % 2 == 1).collect())
        .collect();
    let mut answer = serde_json::Map::new();
    let mut errors = Vec::new();
    for (f, field) in req.fields.iter().enumerate() {
        let list: Vec<serde_json::Value> = sent[f]
            .iter()
            .map(|d| serde_json::from_str(&test_entity(f, *d)).unwrap())
            .collect();
        answer.insert(field.response_key.clone(), list.into());
        if !sent[f].is_empty() {
            errors.push(serde_json::json!({"message": "boom", "path": [field.response_key, 0]}));
        }
    }
    let body = serde_json::json!({"data": answer, "errors": errors}).to_string();
    let fetched = Fetched::read(body.as_bytes(), &req, &sent)
        .unwrap_or_else(|e| panic!("a well-formed answer is refused: {e:?}"));
    let texts: Vec<Vec<String>> = req
        .fields
        .iter()
        .enumerate()
        .map(|(f, field)| {
            (0..field.distinct.len())
                .map(|d| test_entity(f, d))
                .collect()
        })
        .collect();
    let entities: Vec<Vec<&str>> = texts
        .iter()
        .map(|t| t.iter().map(String::as_str).collect())
        .collect();
    let merged: serde_json::Value =
        serde_json::from_slice(&assemble(&req, &entities, Some((&fetched, &sent))))
            .unwrap_or_else(|e| panic!("a merged answer is not JSON: {e}"));
    let mut whole = serde_json::Map::new();
    let mut whole_errors = Vec::new();
    for (f, field) in req.fields.iter().enumerate() {
        let list: Vec<serde_json::Value> = field
            .positions
            .iter()
            .map(|d| serde_json::from_str(&test_entity(f, *d)).unwrap())
            .collect();
        whole.insert(field.response_key.clone(), list.into());
        if let Some(failing) = sent[f].first() {
            for (p, d) in field.positions.iter().enumerate() {
                if d == failing {
                    whole_errors.push(
                        serde_json::json!({"message": "boom", "path": [field.response_key, p]}),
                    );
                }
            }
        }
    }
    let mut expected = serde_json::json!({"data": whole});
    if !whole_errors.is_empty() {
        expected["errors"] = whole_errors.into();
    }
    assert_eq!(
        merged, expected,
        "the merge differs from the whole batch's answer"
    );
}

/// Any answer to a fixed split request (three representations, one asked twice; two sent):
/// read without panicking; when read, its merge is JSON with every position the gateway asked.
pub fn entities_answer(data: &[u8]) {
    let body = serde_json::json!({
        "query": "query($r:[_Any!]!){e:_entities(representations:$r){...on T{a}}}",
        "variables": {"r": [
            {"__typename": "T", "id": 1},
            {"__typename": "T", "id": 2},
            {"__typename": "T", "id": 1},
            {"__typename": "T", "id": 3}
        ]}
    });
    let req = EntitiesRequest::read(body.to_string().as_bytes(), ENTITY_LIMITS).unwrap();
    prefetched_from(&req, data);
    let sent = vec![vec![1, 2]];
    let Ok(fetched) = Fetched::read(data, &req, &sent) else {
        return;
    };
    assert_eq!(fetched.entities[0].len(), 2);
    let cached = r#"{"a":0}"#;
    let got: Vec<&str> = fetched.entities[0]
        .iter()
        .map(|g| g.map_or("null", |g| g.raw))
        .collect();
    let entities = vec![vec![cached, got[0], got[1]]];
    let merged: serde_json::Value =
        serde_json::from_slice(&assemble(&req, &entities, Some((&fetched, &sent))))
            .unwrap_or_else(|e| panic!("a merged answer is not JSON: {e}"));
    if let Some(list) = merged["data"]["e"].as_array() {
        assert_eq!(list.len(), 4);
        assert_eq!(list[0], list[2], "one representation, two answers");
    }
    for e in merged["errors"].as_array().into_iter().flatten() {
        if let (Some("e"), Some(p)) = (e["path"][0].as_str(), e["path"][1].as_u64()) {
            assert!(
                p < 4 || !e["path"].is_array(),
                "an error path past the batch"
            );
        }
    }
}

/// What an answer names, read for a prefetch (`entities::prefetch`): the batch asking for it
/// reads back as asking for exactly those representations, each of the template's type, once.
fn prefetched_from(req: &EntitiesRequest, data: &[u8]) {
    let t = Template::learn(req, "T").unwrap();
    let Some(answer) = std::str::from_utf8(data)
        .ok()
        .and_then(|text| graphql_cache::json::parse(text).ok())
    else {
        return;
    };
    let reps = named(&answer, &[&t]).remove(0);
    assert!(reps.len() <= MAX_PREFETCH);
    if reps.is_empty() {
        return;
    }
    assert!(
        may_name(data, &[&t]),
        "named without its type's name in the text"
    );
    let (batch, sent) = t.batch(reps.clone());
    let again = EntitiesRequest::read(&batch.rewritten(&sent), ENTITY_LIMITS)
        .unwrap_or_else(|e| panic!("a prefetch's batch does not read back: {e:?}"));
    assert_eq!(
        again.fields[0].distinct, reps,
        "asks for what the answer named, once each"
    );
    assert_eq!(again.fields[0].selection, req.fields[0].selection);
}
