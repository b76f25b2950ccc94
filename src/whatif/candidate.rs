//! A candidate configuration for the what-if route: a fragment of the filter's configuration,
//! read by the configuration's own parser (so a bad value is refused with the field's name),
//! of which only the fields the replay can model are accepted.

use crate::config::{Config, Entities, Matcher, Rule};
use crate::entities::mode::listener_settings;
use crate::request::variant::MAX_VARY;
use crate::whatif::ring::type_bucket;
use crate::whatif::simulate::{Group, Keying, Lifetimes};

/// The fields a candidate may change: what the recorded traffic can be replayed under.
pub const FIELDS: [&str; 5] = [
    "cache_bytes",
    "ttl_seconds",
    "rules",
    "vary_headers",
    "entities",
];

/// What the replay models of a configuration.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Settings {
    pub cache_bytes: u64,
    pub ttl_seconds: u64,
    pub rules: Vec<Rule>,
    pub vary_headers: Vec<String>,
    /// The listener's entity settings (the defaults where none are configured).
    pub entities: Entities,
}

impl Settings {
    pub fn of(config: &Config) -> Settings {
        Settings {
            cache_bytes: config.cache_bytes,
            ttl_seconds: config.ttl_seconds,
            rules: config.rules.clone(),
            vary_headers: config.vary_headers.clone(),
            entities: listener_settings(config).into_owned(),
        }
    }

    /// How traffic recorded under `now` is keyed under these settings: as recorded, or merged
    /// where they drop vary headers.
    pub fn keying(&self, now: &Settings) -> Keying {
        if self.vary_headers == now.vary_headers {
            return Keying::AsRecorded;
        }
        let kept = now
            .vary_headers
            .iter()
            .take(MAX_VARY)
            .enumerate()
            .filter(|(_, h)| self.vary_headers.contains(h))
            .fold(0u8, |mask, (i, _)| mask | (1 << i));
        Keying::Keeping(kept)
    }

    /// The TTL of entities of the type whose bucket is `bucket` (`None`: not cached): a type
    /// either configuration lists by name, else the default.
    pub fn entity_ttl(&self, bucket: u16, known: &[&str]) -> Option<u64> {
        let ttl = match known.iter().find(|n| type_bucket(n) == bucket) {
            Some(name) => self.entities.policy(name).0,
            None => self.entities.ttl_seconds,
        };
        Some(ttl).filter(|t| *t > 0)
    }

    /// The entity types this configuration names.
    pub fn entity_types(&self) -> impl Iterator<Item = &str> {
        self.entities.types.keys().map(String::as_str)
    }

    /// The TTL the operation named `name` gets (`None`: not cached): the shortest of the
    /// operation rules naming it, else the global TTL (as `request::rules` decides). Field rules
    /// need the query's root fields, which the records do not keep: they are left out (see
    /// [`Settings::field_rules`]).
    pub fn ttl_of(&self, name: Option<&str>) -> Option<u64> {
        let mut ttl: Option<u64> = None;
        for rule in &self.rules {
            let Matcher::Operation(n) = &rule.matcher else {
                continue;
            };
            if name != Some(n.as_str()) {
                continue;
            }
            if rule.cache == Some(false) {
                return None;
            }
            if let Some(t) = rule.ttl_seconds {
                ttl = Some(ttl.map_or(t, |old| old.min(t)));
            }
        }
        Some(ttl.unwrap_or(self.ttl_seconds))
    }

    /// Whether any rule matches by root field (not modelled).
    pub fn field_rules(&self) -> bool {
        self.rules
            .iter()
            .any(|r| matches!(r.matcher, Matcher::Field(_)))
    }
}

/// Why a candidate was refused (the route answers 400 with it).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Refused(pub String);

/// `now` with the fields `fragment` (a JSON object) gives replaced.
pub fn candidate(now: &Settings, fragment: &[u8]) -> Result<Settings, Refused> {
    let value: serde_json::Value = serde_json::from_slice(fragment)
        .map_err(|e| Refused(format!("the body must be a JSON object: {e}")))?;
    let Some(fields) = value.as_object() else {
        return Err(Refused("the body must be a JSON object".into()));
    };
    if fields.is_empty() {
        return Err(Refused(format!(
            "give at least one of {}",
            FIELDS.join(", ")
        )));
    }
    if let Some(other) = fields.keys().find(|k| !FIELDS.contains(&k.as_str())) {
        return Err(Refused(format!(
            "{other}: the what-if replays only {}",
            FIELDS.join(", ")
        )));
    }
    // An `entities` block without its own TTL inherits the global one: today's, unless the
    // candidate changes it too.
    let mut whole = fields.clone();
    whole
        .entry("ttl_seconds")
        .or_insert_with(|| now.ttl_seconds.into());
    let whole = serde_json::Value::Object(whole).to_string();
    let parsed = Config::parse(whole.as_bytes()).map_err(|e| Refused(e.to_string()))?;
    let mut out = now.clone();
    if fields.contains_key("cache_bytes") {
        out.cache_bytes = parsed.cache_bytes;
    }
    if fields.contains_key("ttl_seconds") {
        out.ttl_seconds = parsed.ttl_seconds;
    }
    if fields.contains_key("rules") {
        out.rules = parsed.rules.clone();
    }
    if fields.contains_key("vary_headers") {
        out.vary_headers = replayable_vary(now, parsed.vary_headers.clone())?;
    }
    if fields.contains_key("entities") {
        out.entities = listener_settings(&parsed).into_owned();
    }
    Ok(out)
}

/// `candidate` (normalized by the parser) if the records can replay it: it may only drop some of
/// the first [`MAX_VARY`] headers varied on today (the records keep no value of any other).
fn replayable_vary(now: &Settings, candidate: Vec<String>) -> Result<Vec<String>, Refused> {
    if let Some(added) = candidate.iter().find(|h| !now.vary_headers.contains(h)) {
        return Err(Refused(format!(
            "vary_headers: {added} is not varied on today, and the records keep no value of it: \
             the what-if can only drop headers"
        )));
    }
    let dropped = now.vary_headers.iter().enumerate();
    let beyond = dropped.filter(|(i, h)| *i >= MAX_VARY && !candidate.contains(h));
    if let Some((_, h)) = beyond.into_iter().next() {
        return Err(Refused(format!(
            "vary_headers: the records keep the values of the first {MAX_VARY} headers varied on \
             ({}) only, not {h}",
            now.vary_headers[..MAX_VARY].join(", ")
        )));
    }
    Ok(candidate)
}

/// The lifetimes of `settings`, for traffic recorded under `now`, by operation bucket (`names`)
/// or entity type (`types`: the types either configuration names).
pub struct ByOperation<'a> {
    pub now: &'a Settings,
    pub settings: &'a Settings,
    /// Bucket to operation name (`None`: anonymous, unread or other).
    pub names: &'a [Option<String>],
    pub types: &'a [&'a str],
}

impl ByOperation<'_> {
    /// The TTL of `group` under today's settings and under the candidate's.
    fn ttls(&self, (entity, bucket): Group) -> (Option<u64>, Option<u64>) {
        if entity {
            let of = |s: &Settings| s.entity_ttl(bucket, self.types);
            return (of(self.now), of(self.settings));
        }
        let name = self
            .names
            .get(usize::from(bucket))
            .and_then(|n| n.as_deref());
        (self.now.ttl_of(name), self.settings.ttl_of(name))
    }
}

impl Lifetimes for ByOperation<'_> {
    fn lifetime_s(&self, group: Group, recorded_s: u32) -> Option<u32> {
        let (then, ttl) = self.ttls(group);
        let then = then.unwrap_or(u64::from(recorded_s));
        let ttl = u32::try_from(ttl?).unwrap_or(u32::MAX);
        // Shorter than the configuration gave: the origin's headers said so, and still would.
        match u64::from(recorded_s) < then {
            true => Some(recorded_s.min(ttl)),
            false => Some(ttl),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn now() -> Settings {
        Settings::of(
            &Config::parse(
                br#"{"ttl_seconds": 10, "rules": [{"operation": "Slow", "ttl_seconds": 5}]}"#,
            )
            .unwrap(),
        )
    }

    #[test]
    fn a_fragment_replaces_only_its_fields_and_bad_ones_name_the_field() {
        let c = candidate(&now(), br#"{"ttl_seconds": 60}"#).unwrap();
        assert_eq!((c.ttl_seconds, c.rules.len()), (60, 1));
        assert_eq!(c.cache_bytes, now().cache_bytes);
        let err = candidate(&now(), br#"{"vary_headers": ["x-new"]}"#).unwrap_err();
        assert!(err.0.starts_with("vary_headers:"), "{}", err.0);
        let err = candidate(&now(), br#"{"cdn": {}}"#).unwrap_err();
        assert!(err.0.starts_with("cdn:"), "{}", err.0);
        let err = candidate(&now(), br#"{"ttl_seconds": "x"}"#).unwrap_err();
        assert!(err.0.contains("ttl_seconds"), "{}", err.0);
        assert!(candidate(&now(), b"[1]").is_err());
        assert!(candidate(&now(), b"{}").is_err());
        assert!(candidate(&now(), b"{").is_err());
    }

    #[test]
    fn an_operation_s_lifetime_follows_the_candidate_unless_the_origin_shortened_it() {
        let names = [None, Some("Slow".to_string()), Some("Fast".to_string())];
        let cand = candidate(
            &now(),
            br#"{"ttl_seconds": 60, "rules": [{"operation": "Fast", "cache": false}]}"#,
        )
        .unwrap();
        let (n, c) = (now(), cand);
        let by = ByOperation {
            now: &n,
            settings: &c,
            names: &names,
            types: &[],
        };
        assert_eq!(
            by.lifetime_s((false, 0), 10),
            Some(60),
            "the global TTL gave it"
        );
        assert_eq!(
            by.lifetime_s((false, 0), 3),
            Some(3),
            "max-age 3 from the origin"
        );
        assert_eq!(by.lifetime_s((false, 1), 5), Some(60), "its rule is gone");
        assert_eq!(by.lifetime_s((false, 2), 10), None, "not cached any more");
        let longer = candidate(
            &now(),
            br#"{"rules": [{"operation": "Slow", "ttl_seconds": 30}]}"#,
        )
        .unwrap();
        let by = ByOperation {
            now: &n,
            settings: &longer,
            names: &names,
            types: &[],
        };
        assert_eq!(
            by.lifetime_s((false, 1), 5),
            Some(30),
            "a rule overrides the global TTL"
        );
        assert_eq!(by.lifetime_s((false, 0), 10), Some(10));
    }

    #[test]
    fn vary_headers_may_only_be_dropped_among_the_first_recorded() {
        let now = Settings::of(
            &Config::parse(br#"{"vary_headers": ["a", "b", "c", "d", "e"]}"#).unwrap(),
        );
        let c = candidate(&now, br#"{"vary_headers": ["b", "A", "c", "d", "e"]}"#).unwrap();
        assert_eq!(
            c.keying(&now),
            Keying::AsRecorded,
            "the same set, normalized"
        );
        let c = candidate(&now, br#"{"vary_headers": ["c", "d", "e"]}"#).unwrap();
        assert_eq!(c.keying(&now), Keying::Keeping(0b1100));
        let err = candidate(&now, br#"{"vary_headers": ["a", "b", "c", "d"]}"#).unwrap_err();
        assert!(err.0.contains("not e"), "{}", err.0);
        let err = candidate(&now, br#"{"vary_headers": ["a", "z"]}"#).unwrap_err();
        assert!(err.0.contains("z is not varied on today"), "{}", err.0);
        assert_eq!(
            candidate(&now, br#"{"ttl_seconds": 5}"#)
                .unwrap()
                .keying(&now),
            Keying::AsRecorded
        );
    }
}
