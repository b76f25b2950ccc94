//! What-if, before a change: the recent traffic (`ring`) replayed through a model of the store
//! (`simulate`) under the configuration in force and under a candidate (`candidate`), per
//! operation. The model's figure for today is set beside the hit ratio really measured over the
//! same records; the candidate's prediction is the measured figure moved by the difference the
//! model sees between the two configurations, so that what the model does not capture (the
//! admission policy, hits on entries stored before the records begin) cancels out. A candidate
//! that drops vary headers is also told which keys it merges answered differently (`merge`).

pub mod candidate;
pub mod merge;
pub mod ring;
pub mod simulate;

use crate::whatif::candidate::{ByOperation, Settings};
use crate::whatif::merge::{merges, Merged};
use crate::whatif::ring::{type_bucket, Record};
use crate::whatif::simulate::{replay, Figures, Group, Keying};
use serde_json::{json, Value};
use std::collections::{BTreeMap, BTreeSet};

/// The most records one what-if call replays (the newest): a call's work is bounded whatever
/// the workers and `what_if_records` (about 20 ms natively for both runs of the model).
pub const MAX_REPLAYED: usize = 1 << 18;

/// The what-if answer for `records` (any order), recorded under `now`, against `candidate`;
/// `names` maps operation buckets to names.
pub fn report(
    records: &mut [Record],
    now: &Settings,
    candidate: &Settings,
    names: &[Option<String>],
) -> Value {
    records.sort_by_key(|r| r.at_ms);
    let records = &records[records.len().saturating_sub(MAX_REPLAYED)..];
    let types: BTreeSet<&str> = now.entity_types().chain(candidate.entity_types()).collect();
    let types: Vec<&str> = types.into_iter().collect();
    let under = |settings| ByOperation {
        now,
        settings,
        names,
        types: &types,
    };
    let a = replay(records, now.cache_bytes, &under(now), Keying::AsRecorded);
    let keying = candidate.keying(now);
    let b = replay(records, candidate.cache_bytes, &under(candidate), keying);
    let merged = merges(records, keying);
    let mut rows: BTreeMap<(bool, String), Sums> = BTreeMap::new();
    let mut total = Sums::default();
    for (group, x) in &a {
        let y = b.get(group).copied().unwrap_or_default();
        let m = merged.get(group).copied().unwrap_or_default();
        total = total.add(*x, y, m);
        let sum = rows.entry(label(*group, names, &types)).or_default();
        *sum = sum.add(*x, y, m);
    }
    let shares = keying != Keying::AsRecorded;
    let span = match (records.first(), records.last()) {
        (Some(f), Some(l)) => l.at_ms.saturating_sub(f.at_ms) / 1000,
        _ => 0,
    };
    let (becomes, stops) = cacheable_changes(now, candidate, names, &types);
    json!({
        "records": records.len(),
        "seconds": span,
        "now": settings_json(now),
        "candidate": settings_json(candidate),
        "operations": rows.iter().map(|((_, name), s)| row(name, s, shares)).collect::<Vec<_>>(),
        "total": row("all", &total, shares),
        "becomes_cacheable": becomes,
        "stops_cacheable": stops,
        "notes": notes(now, candidate, keying),
    })
}

/// A group's row name: the operation's (or its bucket's), or `entity:` and the type's name when
/// a configuration names it (every other type in one row: they share the default TTL).
fn label((entity, bucket): Group, names: &[Option<String>], types: &[&str]) -> (bool, String) {
    if !entity {
        let name = names.get(usize::from(bucket)).cloned().flatten();
        return (
            false,
            name.unwrap_or_else(|| bucket_label(bucket).to_string()),
        );
    }
    let name = types.iter().find(|t| type_bucket(t) == bucket);
    let name = name.map_or("(other types)", |t| t);
    (true, format!("{ENTITY_ROW}{name}"))
}

/// What an entity type's row name starts with.
const ENTITY_ROW: &str = "entity:";

/// A row's figures: the model today, under the candidate, and the keys the candidate merges.
#[derive(Debug, Clone, Copy, Default)]
struct Sums {
    now: Figures,
    then: Figures,
    merged: Merged,
}

impl Sums {
    fn add(self, now: Figures, then: Figures, merged: Merged) -> Sums {
        Sums {
            now: add(self.now, now),
            then: add(self.then, then),
            merged: Merged {
                keys: self.merged.keys + merged.keys,
                differing: self.merged.differing + merged.differing,
            },
        }
    }
}

fn add(a: Figures, b: Figures) -> Figures {
    Figures {
        lookups: a.lookups + b.lookups,
        hits: a.hits + b.hits,
        coalesced: a.coalesced + b.coalesced,
        simulated: a.simulated + b.simulated,
    }
}

/// The special buckets' names (`effects::operation_stats`).
fn bucket_label(op: u16) -> &'static str {
    match op {
        1 => "anonymous",
        2 => "unknown",
        _ => "other",
    }
}

/// One operation's row: measured today, and predicted under the candidate (with the keys it
/// merges, when it `shares` entries among requests today's keys separate).
fn row(name: &str, sums: &Sums, shares: bool) -> Value {
    let mut out = figures_row(name, sums.now, sums.then);
    if let (true, Some(row)) = (shares, out.as_object_mut()) {
        let m = sums.merged;
        row.insert(
            "merged_keys".into(),
            json!({ "keys": m.keys, "answering_differently": m.differing }),
        );
    }
    out
}

fn figures_row(name: &str, now: Figures, then: Figures) -> Value {
    let lookups = now.lookups;
    let servable = lookups.saturating_sub(now.coalesced);
    let delta = i128::from(then.simulated) - i128::from(now.simulated);
    let predicted = (i128::from(now.hits) + delta).clamp(0, i128::from(servable));
    let predicted = u64::try_from(predicted).unwrap_or(0);
    let ratio = |hits: u64| match lookups {
        0 => 0.0,
        n => round3(hits as f64 / n as f64),
    };
    json!({
        "operation": name,
        "lookups": lookups,
        "hit_ratio": { "now": ratio(now.hits), "candidate": ratio(predicted) },
        "simulated_hit_ratio": { "now": ratio(now.simulated), "candidate": ratio(then.simulated) },
        "origin_requests": { "now": servable - now.hits.min(servable), "candidate": servable - predicted },
        "origin_requests_saved": { "now": now.hits, "candidate": predicted },
    })
}

fn round3(x: f64) -> f64 {
    (x * 1000.0).round() / 1000.0
}

fn settings_json(s: &Settings) -> Value {
    let types: BTreeMap<&str, u64> = s
        .entity_types()
        .map(|t| (t, s.entities.policy(t).0))
        .collect();
    json!({
        "cache_bytes": s.cache_bytes,
        "ttl_seconds": s.ttl_seconds,
        "rules": s.rules.len(),
        "vary_headers": s.vary_headers,
        "entities": { "ttl_seconds": s.entities.ttl_seconds, "types": types },
    })
}

/// Operations (named by a counter bucket or a rule) and entity types (named by a configuration)
/// cached under one configuration and not the other: (becoming cacheable, ceasing to be).
fn cacheable_changes(
    now: &Settings,
    candidate: &Settings,
    names: &[Option<String>],
    types: &[&str],
) -> (Vec<String>, Vec<String>) {
    let mut all: BTreeSet<&str> = names.iter().flatten().map(String::as_str).collect();
    for rule in now.rules.iter().chain(&candidate.rules) {
        if let crate::config::Matcher::Operation(n) = &rule.matcher {
            all.insert(n);
        }
    }
    let cached = |s: &Settings, n: &str| s.ttl_of(Some(n)).is_some_and(|t| t > 0);
    let (mut becomes, mut stops) = (Vec::new(), Vec::new());
    for name in all {
        match (cached(now, name), cached(candidate, name)) {
            (false, true) => becomes.push(name.to_string()),
            (true, false) => stops.push(name.to_string()),
            _ => {}
        }
    }
    let entity = |s: &Settings, t: &str| s.entity_ttl(type_bucket(t), &[t]).is_some();
    for t in types {
        match (entity(now, t), entity(candidate, t)) {
            (false, true) => becomes.push(format!("{ENTITY_ROW}{t}")),
            (true, false) => stops.push(format!("{ENTITY_ROW}{t}")),
            _ => {}
        }
    }
    (becomes, stops)
}

fn notes(now: &Settings, candidate: &Settings, keying: Keying) -> Vec<&'static str> {
    let mut out = vec![
        "predicted = measured hits + (model under candidate - model now); stale windows, \
         route overrides and the fleet's L2 are not modelled",
    ];
    if now.field_rules() || candidate.field_rules() {
        out.push("rules that match by root field are not modelled (the records keep no query)");
    }
    if candidate
        .rules
        .iter()
        .any(|r| matches!(&r.matcher, crate::config::Matcher::Operation(_)))
    {
        out.push(
            "an operation bypassed by a rule today has no lookups recorded: it is listed in \
             becomes_cacheable without a prediction",
        );
    }
    if keying != Keying::AsRecorded {
        out.push(
            "dropping a vary header shares one entry among requests that differed only in it, \
             and the prediction counts those as hits: merged_keys.answering_differently counts \
             the merged keys whose requests' last stored answers were not the same (with \
             authorization or cookie, one caller's data served to another); entity keys are \
             not merged",
        );
    }
    if candidate.entities != now.entities {
        out.push(
            "entity types are predicted by name where a configuration names them, every other \
             type with the default ttl_seconds; a type not cached today has no answers \
             recorded, and null_ttl_seconds and route TTLs are not modelled",
        );
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::Config;
    use crate::whatif::ring::Kind;

    fn rec(at_ms: u64, hash: u64, op: u16, kind: Kind) -> Record {
        let storable = kind == Kind::Storable;
        Record {
            at_ms,
            hash,
            op,
            kind,
            why: 0,
            size: if storable { 100 } else { 0 },
            lifetime_s: if storable { 10 } else { 0 },
            entity: false,
            variant: crate::request::variant::Variant::default(),
            answer: 0,
        }
    }

    #[test]
    fn a_longer_ttl_is_predicted_from_what_was_measured() {
        // Key 1 of operation 3 asked every 30 s and missing each time with a 10 s TTL.
        let mut records: Vec<Record> = (0..5)
            .flat_map(|i| {
                [
                    rec(i * 30_000, 1, 3, Kind::Miss),
                    rec(i * 30_000 + 2, 1, 3, Kind::Storable),
                ]
            })
            .collect();
        let now = Settings::of(&Config::parse(br#"{"ttl_seconds": 10}"#).unwrap());
        let cand = candidate::candidate(&now, br#"{"ttl_seconds": 60}"#).unwrap();
        let names = [None, None, None, Some("GetUser".to_string())];
        let out = report(&mut records, &now, &cand, &names);
        let op = &out["operations"][0];
        assert_eq!(op["operation"], "GetUser");
        assert_eq!(op["lookups"], 5);
        assert_eq!(op["hit_ratio"]["now"], 0.0);
        // Hits at 30 s and 90 s; the entries stored at 0 and 60 s expire at 60 and 120 s.
        assert_eq!(op["hit_ratio"]["candidate"], 0.4);
        assert_eq!(op["origin_requests"]["candidate"], 3);
        assert_eq!(out["total"]["hit_ratio"]["candidate"], 0.4);
        assert_eq!(out["seconds"], 120);
    }

    #[test]
    fn operations_that_change_cacheability_are_listed() {
        let now = Settings::of(
            &Config::parse(br#"{"rules": [{"operation": "A", "cache": false}]}"#).unwrap(),
        );
        let cand =
            candidate::candidate(&now, br#"{"rules": [{"operation": "B", "cache": false}]}"#)
                .unwrap();
        let names = [None, None, None, Some("B".to_string())];
        let out = report(&mut [], &now, &cand, &names);
        assert_eq!(out["becomes_cacheable"], json!(["A"]));
        assert_eq!(out["stops_cacheable"], json!(["B"]));
    }

    #[test]
    fn dropping_a_vary_header_merges_the_keys_that_differed_only_in_it() {
        use crate::request::variant::Variant;
        // One query asked in two languages, alternately, every second: never a hit today.
        let variant = |lang: u32| Variant {
            shape: 77,
            vary: [lang, 5, 0, 0],
        };
        let mut records = Vec::new();
        for i in 0..10u64 {
            let lang = 1 + (i % 2) as u32;
            let mut miss = rec(i * 1_000, 100 + u64::from(lang), 3, Kind::Miss);
            miss.variant = variant(lang);
            let mut stored = rec(i * 1_000 + 1, 100 + u64::from(lang), 3, Kind::Storable);
            // Each language answered in its own words.
            (stored.lifetime_s, stored.answer) = (1, 900 + lang);
            records.extend([miss, stored]);
        }
        let now = Settings::of(
            &Config::parse(
                br#"{"ttl_seconds": 1, "vary_headers": ["accept-language", "x-tenant"]}"#,
            )
            .unwrap(),
        );
        let cand = candidate::candidate(&now, br#"{"vary_headers": ["x-tenant"]}"#).unwrap();
        assert_eq!(cand.keying(&now), Keying::Keeping(0b10));
        let names = [None, None, None, Some("Page".to_string())];
        let out = report(&mut records.clone(), &now, &cand, &names);
        let op = &out["operations"][0];
        assert_eq!(op["hit_ratio"]["now"], 0.0);
        // Merged, but each entry lives 1 s: stored at t, expired when asked at t + 1 s.
        assert_eq!(op["hit_ratio"]["candidate"], 0.0);
        let longer =
            candidate::candidate(&now, br#"{"vary_headers": ["x-tenant"], "ttl_seconds": 2}"#)
                .unwrap();
        let out = report(&mut records.clone(), &now, &longer, &names);
        // Stored at 0, hit at 1, stored at 2 (expired), hit at 3, ...: half the lookups.
        assert_eq!(out["operations"][0]["hit_ratio"]["candidate"], 0.5);
        assert_eq!(
            out["operations"][0]["merged_keys"],
            json!({"keys": 1, "answering_differently": 1}),
            "the two languages' answers differ"
        );
        let same_ttl_only = candidate::candidate(&now, br#"{"ttl_seconds": 2}"#).unwrap();
        let out = report(&mut records, &now, &same_ttl_only, &names);
        assert_eq!(
            out["operations"][0]["hit_ratio"]["candidate"], 0.0,
            "each language alone repeats every 2 s: expired"
        );
        assert!(!out["notes"].to_string().contains("vary header"));
    }

    #[test]
    fn an_entity_type_s_ttl_is_predicted_in_its_own_row() {
        use crate::whatif::ring::type_bucket;
        // Product 9 asked every 30 s, missing each time with a 10 s TTL; Review entities too.
        let mut records = Vec::new();
        for (i, (ty, hash)) in [("Product", 9), ("Review", 8)].into_iter().enumerate() {
            for n in 0..5u64 {
                let t = n * 30_000 + i as u64;
                let mut miss = rec(t, hash, type_bucket(ty), Kind::Miss);
                let mut stored = rec(t + 2, hash, type_bucket(ty), Kind::Storable);
                (miss.entity, stored.entity) = (true, true);
                records.extend([miss, stored]);
            }
        }
        let now = Settings::of(&Config::parse(br#"{"ttl_seconds": 10, "entities": {}}"#).unwrap());
        let cand = candidate::candidate(
            &now,
            br#"{"entities": {"types": {"Product": {"ttl_seconds": 60}}}}"#,
        )
        .unwrap();
        assert_eq!(cand.entities.ttl_seconds, 10, "inherits today's global TTL");
        let out = report(&mut records, &now, &cand, &[]);
        let rows = out["operations"].as_array().unwrap();
        let row = |name: &str| {
            rows.iter()
                .find(|r| r["operation"] == name)
                .unwrap()
                .clone()
        };
        assert_eq!(row("entity:Product")["hit_ratio"]["candidate"], 0.4);
        assert_eq!(row("entity:(other types)")["hit_ratio"]["candidate"], 0.0);
        assert_eq!(out["candidate"]["entities"]["types"]["Product"], 60);
        let off = candidate::candidate(
            &now,
            br#"{"entities": {"types": {"Review": {"ttl_seconds": 0}}}}"#,
        )
        .unwrap();
        let out = report(&mut [], &now, &off, &[]);
        assert_eq!(out["stops_cacheable"], json!(["entity:Review"]));
    }
}
