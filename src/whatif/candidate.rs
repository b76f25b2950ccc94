//! A candidate configuration for the what-if route: a fragment of the filter's configuration,
//! read by the configuration's own parser (so a bad value is refused with the field's name),
//! of which only the fields the replay can model are accepted.

use crate::config::{Config, Matcher, Rule};
use crate::whatif::simulate::Lifetimes;

/// The fields a candidate may change: what the recorded traffic can be replayed under.
pub const FIELDS: [&str; 3] = ["cache_bytes", "ttl_seconds", "rules"];

/// What the replay models of a configuration.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Settings {
    pub cache_bytes: u64,
    pub ttl_seconds: u64,
    pub rules: Vec<Rule>,
}

impl Settings {
    pub fn of(config: &Config) -> Settings {
        Settings {
            cache_bytes: config.cache_bytes,
            ttl_seconds: config.ttl_seconds,
            rules: config.rules.clone(),
        }
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
            "{other}: the what-if replays only {} (the recorded traffic keeps no headers or entities)",
            FIELDS.join(", ")
        )));
    }
    let parsed = Config::parse(fragment).map_err(|e| Refused(e.to_string()))?;
    let mut out = now.clone();
    if fields.contains_key("cache_bytes") {
        out.cache_bytes = parsed.cache_bytes;
    }
    if fields.contains_key("ttl_seconds") {
        out.ttl_seconds = parsed.ttl_seconds;
    }
    if fields.contains_key("rules") {
        out.rules = parsed.rules;
    }
    Ok(out)
}

/// The lifetimes of `settings`, for traffic recorded under `now`, by operation bucket (`names`).
pub struct ByOperation<'a> {
    pub now: &'a Settings,
    pub settings: &'a Settings,
    /// Bucket to operation name (`None`: anonymous, unread or other).
    pub names: &'a [Option<String>],
}

impl Lifetimes for ByOperation<'_> {
    fn lifetime_s(&self, op: u16, recorded_s: u32) -> Option<u32> {
        let name = self.names.get(usize::from(op)).and_then(|n| n.as_deref());
        let then = self.now.ttl_of(name).unwrap_or(u64::from(recorded_s));
        let ttl = u32::try_from(self.settings.ttl_of(name)?).unwrap_or(u32::MAX);
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
        let err = candidate(&now(), br#"{"vary_headers": []}"#).unwrap_err();
        assert!(err.0.starts_with("vary_headers:"), "{}", err.0);
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
        };
        assert_eq!(by.lifetime_s(0, 10), Some(60), "the global TTL gave it");
        assert_eq!(by.lifetime_s(0, 3), Some(3), "max-age 3 from the origin");
        assert_eq!(by.lifetime_s(1, 5), Some(60), "its rule is gone");
        assert_eq!(by.lifetime_s(2, 10), None, "not cached any more");
        let longer = candidate(
            &now(),
            br#"{"rules": [{"operation": "Slow", "ttl_seconds": 30}]}"#,
        )
        .unwrap();
        let by = ByOperation {
            now: &n,
            settings: &longer,
            names: &names,
        };
        assert_eq!(
            by.lifetime_s(1, 5),
            Some(30),
            "a rule overrides the global TTL"
        );
        assert_eq!(by.lifetime_s(0, 10), Some(10));
    }
}
