//! Storing an upstream answer in the cache: the one place, for the shared fetch and for a plain
//! miss captured as it streamed to its client.

use crate::cache::entry::Entry;
use crate::cache::storable::{storable_entry, Answer, Asked, Stamp};
use crate::effects::counters::Counter;
use crate::effects::host::Host;
use crate::request::key::CacheKey;
use crate::worker::state::Plugin;

/// What storing did, for the debug headers.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Stored {
    /// Why the answer was not stored (`None`: stored).
    pub not_stored: Option<&'static str>,
    /// The stored entry's tags, comma-separated (with `debug_headers` only).
    pub tags: String,
    /// The entry as stored (empty when not stored), for the fleet's L2.
    pub entry: Vec<u8>,
}

impl Stored {
    fn not(why: &'static str) -> Stored {
        Stored {
            not_stored: Some(why),
            ..Stored::default()
        }
    }
}

/// Stores the answer under `key` if policy allows, counting what happened; otherwise says why
/// not (the debug reason).
pub fn store_answer(
    plugin: &Plugin,
    host: &impl Host,
    key: &CacheKey,
    answer: Answer<'_>,
    asked: &Asked,
) -> Stored {
    let now_ms = host.now_ms();
    let stamp = Stamp {
        born_us: asked.born_us,
        now_ms,
        operation: &asked.operation,
    };
    let entry = storable_entry(key, &answer, &plugin.config, &asked.lifetimes, &stamp);
    let bytes = match entry {
        Ok(bytes) => bytes,
        Err(why) => {
            host.count(Counter::StoreSkipped);
            return Stored::not(why.as_str());
        }
    };
    match plugin.table.insert(host, key, &bytes, now_ms) {
        Ok(stored) => {
            host.count(Counter::Stores);
            if stored.evicted {
                host.count(Counter::Evictions);
            }
            let tags = Entry::decode(&bytes)
                .map(|e| e.tags.to_string())
                .unwrap_or_default();
            Stored {
                not_stored: None,
                tags,
                entry: bytes,
            }
        }
        Err(_) => {
            host.count(Counter::StoreFailures);
            Stored::not("store-failed")
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::cache::table::Lookup;
    use crate::invalidate::tags::OperationTags;
    use std::rc::Rc;

    fn asked() -> Asked {
        Asked {
            lifetimes: crate::config::Lifetimes {
                ttl_seconds: 60,
                ..Default::default()
            },
            born_us: 0,
            operation: Rc::new(OperationTags::default()),
        }
    }
    use crate::effects::fake::FakeHost;
    use crate::effects::host::status;

    fn json() -> Vec<(String, Vec<u8>)> {
        vec![
            (":status".into(), b"200".to_vec()),
            ("content-type".into(), b"application/json".to_vec()),
        ]
    }

    #[test]
    fn status_is_read_once_and_strictly() {
        assert_eq!(status(&json()), Some(200));
        assert_eq!(status(&[(":status".into(), b"2x".to_vec())]), None);
        assert_eq!(status(&[]), None);
    }

    #[test]
    fn stores_counts_and_explains() {
        let host = FakeHost::new();
        let plugin = Plugin::default();
        let key = CacheKey { digest: [1; 32] };
        let headers = json();
        let ok = Answer {
            status: 200,
            headers: &headers,
            body: br#"{"data":{}}"#,
        };
        assert_eq!(
            store_answer(&plugin, &host, &key, ok, &asked()).not_stored,
            None
        );
        assert_eq!(host.counted(Counter::Stores), 1);
        let now_ms = host.now_ms();
        assert!(matches!(
            plugin.table.lookup(&host, &key, now_ms),
            Lookup::Hit(_)
        ));
        let errors = Answer {
            status: 200,
            headers: &headers,
            body: br#"{"errors":[]}"#,
        };
        assert_eq!(
            store_answer(&plugin, &host, &key, errors, &asked()).not_stored,
            Some("graphql-errors")
        );
        assert_eq!(host.counted(Counter::StoreSkipped), 1);
    }

    #[test]
    fn a_failed_write_is_counted_not_fatal() {
        let host = FakeHost::new();
        host.fail_writes.set(true);
        let headers = json();
        let answer = Answer {
            status: 200,
            headers: &headers,
            body: br#"{"data":{}}"#,
        };
        let why = store_answer(
            &Plugin::default(),
            &host,
            &CacheKey { digest: [2; 32] },
            answer,
            &asked(),
        );
        assert_eq!(why.not_stored, Some("store-failed"));
        assert_eq!(host.counted(Counter::StoreFailures), 1);
    }
}
