//! What-if, before a change: the recent traffic (`ring`) replayed through a model of the store
//! (`simulate`) under the configuration in force and under a candidate (`candidate`), per
//! operation. The model's figure for today is set beside the hit ratio really measured over the
//! same records; the candidate's prediction is the measured figure moved by the difference the
//! model sees between the two configurations, so that what the model does not capture (the
//! admission policy, hits on entries stored before the records begin) cancels out.

pub mod candidate;
pub mod ring;
pub mod simulate;

use crate::whatif::candidate::{ByOperation, Settings};
use crate::whatif::ring::Record;
use crate::whatif::simulate::{replay, Figures};
use serde_json::{json, Value};
use std::collections::BTreeSet;

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
    let today = ByOperation {
        now,
        settings: now,
        names,
    };
    let then = ByOperation {
        now,
        settings: candidate,
        names,
    };
    let a = replay(records, now.cache_bytes, &today);
    let b = replay(records, candidate.cache_bytes, &then);
    let mut ops: Vec<u16> = a.keys().copied().collect();
    ops.sort_unstable();
    let mut total = (Figures::default(), Figures::default());
    let mut rows = Vec::new();
    for op in ops {
        let (x, y) = (a[&op], b.get(&op).copied().unwrap_or_default());
        total.0 = add(total.0, x);
        total.1 = add(total.1, y);
        let name = names.get(usize::from(op)).cloned().flatten();
        rows.push(row(name.as_deref().unwrap_or(bucket_label(op)), x, y));
    }
    let span = match (records.first(), records.last()) {
        (Some(f), Some(l)) => l.at_ms.saturating_sub(f.at_ms) / 1000,
        _ => 0,
    };
    let (becomes, stops) = cacheable_changes(now, candidate, names);
    json!({
        "records": records.len(),
        "seconds": span,
        "now": settings_json(now),
        "candidate": settings_json(candidate),
        "operations": rows,
        "total": row("all", total.0, total.1),
        "becomes_cacheable": becomes,
        "stops_cacheable": stops,
        "notes": notes(now, candidate),
    })
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

/// One operation's row: measured today, and predicted under the candidate.
fn row(name: &str, now: Figures, then: Figures) -> Value {
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
    json!({ "cache_bytes": s.cache_bytes, "ttl_seconds": s.ttl_seconds, "rules": s.rules.len() })
}

/// Operations (named by a counter bucket or a rule) cached under one configuration and not the
/// other: (becoming cacheable, ceasing to be).
fn cacheable_changes(
    now: &Settings,
    candidate: &Settings,
    names: &[Option<String>],
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
    (becomes, stops)
}

fn notes(now: &Settings, candidate: &Settings) -> Vec<&'static str> {
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
}
