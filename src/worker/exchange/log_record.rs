//! What a handled request leaves for Envoy's access log (`access_log: true`): one line of
//! `name=value` fields in the filter state `wasm.graphql_cache`, printed by
//! `%FILTER_STATE(wasm.graphql_cache:PLAIN)%`. Values never hold a space, so the line splits
//! on spaces; an absent value is `-`.

use crate::cache::status::CacheStatus;
use crate::request::key::CacheKey;

/// The longest operation name written; longer ones are cut (a client picks the name).
const MAX_OPERATION: usize = 64;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct LogRecord<'a> {
    /// What `x-cache` says.
    pub status: CacheStatus,
    pub reason: Option<&'static str>,
    /// Why the lookup missed (`MISS` and `PARTIAL` only): `MissReason`'s words.
    pub miss: Option<&'static str>,
    pub operation: Option<&'a str>,
    pub key: Option<&'a CacheKey>,
    /// Seconds, of an answer served from an entry.
    pub age_s: Option<u64>,
    /// The served entry's size (encoded, as stored).
    pub bytes: Option<usize>,
}

impl LogRecord<'_> {
    /// A record that says `status` and nothing else yet.
    pub fn new(status: CacheStatus) -> Self {
        LogRecord {
            status,
            reason: None,
            miss: None,
            operation: None,
            key: None,
            age_s: None,
            bytes: None,
        }
    }

    pub fn render(&self) -> String {
        let mut out = String::with_capacity(96);
        out.push_str("status=");
        out.push_str(self.status.as_str());
        out.push_str(" reason=");
        out.push_str(self.reason.unwrap_or("-"));
        if let Some(miss) = self.miss {
            out.push_str(" miss=");
            out.push_str(miss);
        }
        out.push_str(" operation=");
        match self.operation.map(operation_name) {
            Some(name) if !name.is_empty() => out.push_str(&name),
            _ => out.push('-'),
        }
        out.push_str(" key=");
        match self.key {
            Some(k) => out.push_str(&k.hex()[..16]),
            None => out.push('-'),
        }
        out.push_str(" age=");
        push_number(&mut out, self.age_s);
        out.push_str(" bytes=");
        push_number(&mut out, self.bytes.map(|b| b as u64));
        out
    }
}

/// A GraphQL name is `[_A-Za-z][_0-9A-Za-z]*`; anything else in it (the parser accepted it, a
/// log line must not carry it) is dropped.
fn operation_name(name: &str) -> String {
    name.chars()
        .filter(|c| c.is_ascii_alphanumeric() || *c == '_')
        .take(MAX_OPERATION)
        .collect()
}

fn push_number(out: &mut String, n: Option<u64>) {
    match n {
        Some(n) => out.push_str(&n.to_string()),
        None => out.push('-'),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_hit_with_every_field() {
        let key = CacheKey { digest: [0xab; 32] };
        let r = LogRecord {
            status: CacheStatus::Hit,
            reason: None,
            miss: None,
            operation: Some("GetUser"),
            key: Some(&key),
            age_s: Some(12),
            bytes: Some(463),
        };
        assert_eq!(
            r.render(),
            "status=HIT reason=- operation=GetUser key=abababababababab age=12 bytes=463"
        );
    }

    #[test]
    fn absent_fields_are_dashes_and_names_cannot_break_the_line() {
        let r = LogRecord {
            reason: Some("mutation"),
            ..LogRecord::new(CacheStatus::Bypass)
        };
        assert_eq!(
            r.render(),
            "status=BYPASS reason=mutation operation=- key=- age=- bytes=-"
        );
        let odd = LogRecord {
            operation: Some("a b\"c\nd"),
            ..LogRecord::new(CacheStatus::Miss)
        };
        assert!(odd.render().contains(" operation=abcd "));
        let missed = LogRecord {
            miss: Some("not-stored"),
            ..LogRecord::new(CacheStatus::Miss)
        };
        assert_eq!(
            missed.render(),
            "status=MISS reason=- miss=not-stored operation=- key=- age=- bytes=-"
        );
        let long = "x".repeat(500);
        let r = LogRecord {
            operation: Some(&long),
            ..LogRecord::new(CacheStatus::Miss)
        };
        assert!(r
            .render()
            .contains(&format!(" operation={} ", "x".repeat(64))));
    }
}
