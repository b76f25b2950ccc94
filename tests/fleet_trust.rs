//! A fleet whose L2 is hostile: whoever holds Redis (or the L2 service) writes what it likes
//! there. Two Envoys on the shipped `envoy/fleet.yaml`, a real L2 service and a real Redis; the
//! attacker writes into Redis directly. Forged entries (unsigned, signed with another key,
//! replayed under another key's name, a 302/HTML answer, born in the future) are never served; a
//! purge record from the future does not disable the cache; secrets do not show in Envoy's
//! `/config_dump`; L2 names do not reveal the keys they hold.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

mod support;

use std::time::{Duration, Instant};

use graphql_cache::cache::entry::Entry;
use graphql_cache::config::FleetKey;
use graphql_cache::fleet::purge_log::PurgeRecord;
use graphql_cache::invalidate::marks::Target;
use graphql_cache::request::key::CacheKey;
use support::*;

/// The L2 service's value layout: a version byte, then what the filter stored.
const VALUE_VERSION: u8 = 1;
/// A sealed value: magic and MAC, then the entry.
const SEAL_HEADER: usize = 4 + 32;

fn query(n: u32) -> String {
    format!("query Q{n} {{ user(id: {n}) {{ __typename id name }} }}")
}

fn redis(fleet: &Fleet) -> &Redis {
    match &fleet.redis {
        RedisBackend::Single(r) => r,
        RedisBackend::Cluster(_) => panic!("these tests run on one node"),
    }
}

fn get(r: &Redis, name: &[u8]) -> Vec<u8> {
    redis::from_redis_value::<Vec<u8>>(&r.cmd(&[b"GET", name])).unwrap()
}

fn set(r: &Redis, name: &[u8], value: &[u8]) {
    r.cmd(&[b"SET", name, value, b"PX", b"60000"]);
}

/// Stores query `n` through Envoy A: its L2 name and the value the L2 holds.
fn stored_through_a(fleet: &Fleet, n: u32) -> (Vec<u8>, Vec<u8>) {
    let before = l2_value_names(redis(fleet));
    let stores = fleet.l2_stores();
    let miss = fleet.envoys[0].send(Req::query(&query(n)));
    assert_eq!(
        (miss.status, miss.cache()),
        (200, "MISS"),
        "{}",
        miss.text()
    );
    fleet.wait_l2_stores(stores + 1);
    // The store counted may be B's of the query before (B stores what it fetched after refusing a
    // forgery): wait for this query's own value to appear.
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(5);
    let added = loop {
        let added: Vec<Vec<u8>> = l2_value_names(redis(fleet))
            .difference(&before)
            .cloned()
            .collect();
        if !added.is_empty() || std::time::Instant::now() > deadline {
            break added;
        }
        std::thread::sleep(std::time::Duration::from_millis(10));
    };
    assert_eq!(added.len(), 1, "one new L2 value for query {n}");
    let value = get(redis(fleet), &added[0]);
    (added[0].clone(), value)
}

fn versioned(bytes: &[u8]) -> Vec<u8> {
    let mut v = vec![VALUE_VERSION];
    v.extend_from_slice(bytes);
    v
}

fn fleet_key() -> FleetKey {
    FleetKey::new(FLEET_KEY.as_bytes()).unwrap()
}

/// What B answers for query `n`: never the forgery, and from the origin.
fn b_refuses(fleet: &Fleet, n: u32, what: &str) {
    let origin_before = fleet.origin.count();
    let r = fleet.envoys[1].send(Req::query(&query(n)));
    assert_eq!(r.status, 200, "{what}: {}", r.text());
    assert_ne!(r.cache(), "HIT", "{what}: served from the L2: {}", r.text());
    let body = r.text();
    assert!(
        !body.contains("forged") && !body.contains("<html>"),
        "{what}: {body}"
    );
    assert_eq!(
        fleet.origin.count(),
        origin_before + 1,
        "{what}: went to the origin"
    );
}

#[test]
fn forged_entries_are_never_served() {
    let fleet = Fleet::start(&FleetOptions::new(Backend::Single, 2));
    let (name1, genuine1) = stored_through_a(&fleet, 1);
    let sealed = &genuine1[1..];
    let entry = Entry::decode(&sealed[SEAL_HEADER..]).unwrap();
    let key = CacheKey {
        digest: entry.digest,
    };
    assert!(
        !String::from_utf8_lossy(&name1).contains(&key.hex()),
        "the L2 name is keyed, not the cache key"
    );
    let other_fleet = FleetKey::new(b"another-fleet-key-0123456789abcdef!!").unwrap();
    let forgeries = [
        "unsigned",
        "signed with another fleet's key",
        "a 302 HTML answer with a cookie, signed",
        "born in the far future, signed",
    ];
    // Each forgery under its own query's name (B keeps what it served in L1).
    for (i, what) in forgeries.iter().enumerate() {
        let n = 11 + i as u32;
        let (name, value) = stored_through_a(&fleet, n);
        let genuine = Entry::decode(&value[1 + SEAL_HEADER..]).unwrap();
        let this = CacheKey {
            digest: genuine.digest,
        };
        let forged = Entry {
            body: br#"{"data":{"forged":true}}"#,
            ..genuine.clone()
        };
        let value = match i {
            0 => versioned(&forged.encode()),
            1 => versioned(&other_fleet.seal_entry(&this, &forged.encode())),
            2 => {
                let html = Entry {
                    status: 302,
                    headers: vec![
                        ("content-type", "text/html"),
                        ("location", "https://evil.example/"),
                        ("set-cookie", "session=attacker"),
                    ],
                    body: b"<html>",
                    ..genuine.clone()
                };
                versioned(&fleet_key().seal_entry(&this, &html.encode()))
            }
            _ => {
                let future = Entry {
                    born_us: u64::MAX,
                    stored_at_ms: u64::MAX / 2000,
                    expires_at_ms: u64::MAX / 2,
                    ..forged
                };
                versioned(&fleet_key().seal_entry(&this, &future.encode()))
            }
        };
        set(redis(&fleet), &name, &value);
        b_refuses(&fleet, n, what);
    }
    // A genuine value, replayed under another key's name.
    let (victim, _) = stored_through_a(&fleet, 30);
    set(redis(&fleet), &victim, &genuine1);
    b_refuses(&fleet, 30, "another key's genuine entry");
    assert_eq!(fleet.envoys[1].counter("l2_rejected"), 5);
    // The untouched value still serves B: the checks refuse forgeries, not the L2.
    let hit = fleet.envoys[1].send(Req::query(&query(1)));
    assert_eq!((hit.cache(), hit.reason()), ("HIT", Some("l2")));
}

#[test]
fn a_purge_record_from_the_future_does_not_disable_the_cache() {
    let fleet = Fleet::start(&FleetOptions::new(Backend::Single, 2));
    let far = PurgeRecord {
        at_us: u64::MAX,
        targets: vec![(Target::All, false)],
    }
    .encode()
    .unwrap();
    let records: [(&str, Vec<u8>); 2] = [
        ("unsigned", far.clone()),
        ("signed by a fleet member", fleet_key().seal_record(&far)),
    ];
    for (what, record) in records {
        let r = redis(&fleet);
        r.cmd(&[b"XADD", b"gc:purges", b"*", b"d", &record]);
        // Both Envoys read it (a gap, or a record dated now + 1 s): then the cache works again.
        std::thread::sleep(Duration::from_millis(1_500));
        for (i, envoy) in fleet.envoys.iter().enumerate() {
            let q = Req::query(&query(100 + i as u32));
            let first = envoy.send(q.clone());
            assert_eq!(first.status, 200, "{what}");
            let deadline = Instant::now() + Duration::from_secs(2);
            loop {
                let again = envoy.send(q.clone());
                if again.cache() == "HIT" {
                    break;
                }
                assert!(
                    Instant::now() < deadline,
                    "{what}: Envoy {i} still purges everything: {}",
                    again.cache()
                );
                std::thread::sleep(Duration::from_millis(100));
            }
        }
    }
    assert!(
        fleet.counter("l2_purge_gaps") >= 2,
        "the unsigned record is a gap on each"
    );
}

#[test]
fn secrets_stay_out_of_the_config_dump() {
    let fleet = Fleet::start(&FleetOptions::new(Backend::Single, 1));
    let dump = http(fleet.envoys[0].admin_port, Req::get("/config_dump")).text();
    assert!(dump.contains("GRAPHQL_CACHE_FLEET_KEY"), "the name shows");
    for (name, secret) in FLEET_SECRETS {
        assert!(!dump.contains(secret), "{name}'s value is in /config_dump");
    }
}

const WHO: &str = r#"{ who: headerValue(name: "x-user") requestCount }"#;

/// The fleet's L2 and Redis answer only those with credentials; a user's private entry cannot be
/// found in the L2 by someone who knows the user's identity (and even the L2's secret) but not
/// the fleet key.
#[test]
fn without_credentials_neither_the_l2_nor_redis_answers() {
    let fleet = Fleet::start(&FleetOptions {
        extra_config: r#""identity": {"source": "header", "header": "x-user"},"#.into(),
        ..FleetOptions::new(Backend::SingleWithPassword, 2)
    });
    let (a, b) = (&fleet.envoys[0], &fleet.envoys[1]);
    let before = l2_value_names(redis(&fleet));
    let alice = a.send(Req::query(WHO).header("x-user", "alice"));
    assert_eq!((alice.status, alice.cache()), (200, "MISS"));
    fleet.wait_l2_stores(1);
    let on_b = b.send(Req::query(WHO).header("x-user", "alice"));
    assert_eq!(
        (on_b.cache(), on_b.reason()),
        ("HIT", Some("l2")),
        "the fleet works with credentials"
    );

    // Redis: a client without the password is refused.
    let plain = redis::Client::open(redis(&fleet).url()).unwrap();
    let mut c = plain.get_connection().unwrap();
    let refused: redis::RedisResult<Option<Vec<u8>>> = redis::cmd("GET").arg("x").query(&mut c);
    let e = refused.unwrap_err();
    assert!(e.to_string().contains("NOAUTH"), "{e}");

    // The L2 service: no secret or a wrong one is 401, on every verb.
    let name: Vec<u8> = l2_value_names(redis(&fleet))
        .difference(&before)
        .next()
        .cloned()
        .unwrap();
    let name = String::from_utf8(name).unwrap();
    let hex = name.trim_start_matches("gc:{").trim_end_matches("}:v");
    let lookup = format!("/v1/lookup?key={hex}&lease_ms=1&owner=attacker");
    for auth in ["", "authorization: Bearer wrong-secret-0123456789\r\n"] {
        for (method, path) in [
            ("POST", lookup.as_str()),
            ("GET", "/v1/purges?after=0"),
            ("POST", "/v1/purge"),
        ] {
            let r = http_raw(fleet.l2.addr, method, path, b"x", auth);
            assert_eq!(r.status, 401, "{method} {path} with {auth:?}");
        }
    }

    // With the L2's secret, the name computed from alice's cache key finds nothing: names are
    // keyed with the fleet key.
    let value = get(redis(&fleet), name.as_bytes());
    let digest = Entry::decode(&value[1 + SEAL_HEADER..]).unwrap().digest;
    let computed = CacheKey { digest }.hex();
    assert_ne!(computed, hex);
    let r = fleet.l2.lookup(&computed, "attacker", 1, 0);
    assert_eq!(
        (r.status, r.header("x-l2")),
        (200, Some("lead")),
        "no value there"
    );
}
