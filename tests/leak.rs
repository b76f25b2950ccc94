//! No answer ever reaches the wrong user, under concurrent load: many users' private queries and
//! a shared public one, from many clients at once for a bounded time, through a real Envoy with
//! two workers and coalescing on, every answer checked against the user who asked.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

mod support;

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};
use support::*;

const USERS: usize = 24;
const CLIENTS: usize = 16;
const SECONDS: u64 = 4;

#[test]
fn no_cross_user_answer_under_concurrent_load() {
    // The identity comes from a header set by an auth filter; vary_headers are empty, so only the
    // identity scope separates users. The origin answers with the header it saw.
    let config = r#"{
        "ttl_seconds": 1,
        "vary_headers": [],
        "identity": {"source": "header", "header": "x-user"},
        "rules": [{"field": "users", "scope": "public"}],
        "debug_headers": true
    }"#;
    let origin = Origin::start_with(&["--delay-ms", "5"]);
    let envoy = Envoy::start(&EnvoyOptions::config(config), &origin);
    let port = envoy.port;
    let private = r#"{ who: headerValue(name: "x-user") }"#;
    let public = "{ users { id name } }";
    let checked = Arc::new(AtomicU64::new(0));
    let shared = Arc::new(AtomicU64::new(0));
    let deadline = Instant::now() + Duration::from_secs(SECONDS);
    let results = concurrently(CLIENTS, {
        let checked = checked.clone();
        let shared = shared.clone();
        move |client| {
            let mut n = client;
            while Instant::now() < deadline {
                n = n.wrapping_mul(1_103_515_245).wrapping_add(12_345);
                let user = format!("user-{}", (n >> 8) % USERS);
                let is_public = (n >> 4) % 4 == 0;
                let q = if is_public { public } else { private };
                let r = http(port, Req::query(q).header("x-user", &user));
                assert_eq!(r.status, 200, "{}", r.text());
                let v = r.json();
                if is_public {
                    assert_eq!(v["data"]["users"][0]["name"], "Alice", "{}", r.text());
                } else {
                    assert_eq!(
                        v["data"]["who"],
                        user,
                        "{user} got another user's answer ({}): {}",
                        r.cache(),
                        r.text()
                    );
                }
                if matches!(r.cache(), "HIT" | "COALESCED" | "STALE") {
                    shared.fetch_add(1, Ordering::Relaxed);
                }
                checked.fetch_add(1, Ordering::Relaxed);
            }
        }
    });
    assert_eq!(results.len(), CLIENTS);
    let checked = checked.load(Ordering::Relaxed);
    let shared = shared.load(Ordering::Relaxed);
    eprintln!(
        "leak test: {checked} answers checked, {shared} from the cache or another's fetch, \
         {} origin requests, 0 cross-user",
        origin.count()
    );
    assert!(checked > 500, "the load was real: {checked}");
    assert!(
        shared > checked / 4,
        "the cache took part: {shared} of {checked}"
    );
    let per_worker = envoy.worker_connections();
    assert!(per_worker.iter().all(|&n| n > 50), "{per_worker:?}");
    assert!(envoy.counter("coalesced") + envoy.counter("hits") > 0);
}
