//! A fleet of Envoys on the shipped `envoy/fleet.yaml` sharing one L2 (the `graphql-cache-l2`
//! service in front of Redis): one origin fetch per key for the whole fleet, answers shared across
//! Envoys, purges that reach every Envoy, private entries that stay with their user, and an L2
//! outage no client notices. Every case runs on one Redis node and on a 3-master Cluster.
//!
//! Each check is one that a fleet of Envoys each with only its own cache fails: a second Envoy
//! would answer MISS from the origin, not HIT from the L2.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

mod support;

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};
use support::*;

const USERS: &str = "{ users { id name } requestCount }";
const USER1: &str = "query GetUser { user(id: 1) { __typename id name } requestCount }";
const USER2: &str = "query GetUser { user(id: 2) { __typename id name } requestCount }";
const ALL_USERS: &str = "query AllUsers { users { __typename id name } requestCount }";
/// Tagged `type:User` (each query above with `__typename` is).
const PURGE_USERS: &str = r#"[{"kind":"type","type":"User"}]"#;
/// How soon a purge sent to one Envoy must hold on every other.
const PURGE_SPREAD: Duration = Duration::from_secs(1);

/// Each case as two tests: `<case>::single` on one Redis node, `<case>::cluster` on a 3-master
/// Redis Cluster.
macro_rules! on_one_node_and_on_a_cluster {
    ($($case:ident),* $(,)?) => {$(
        mod $case {
            #[test]
            fn single() {
                super::$case(super::Backend::Single);
            }

            #[test]
            fn cluster() {
                super::$case(super::Backend::Cluster);
            }
        }
    )*};
}

on_one_node_and_on_a_cluster!(
    one_origin_fetch_for_the_whole_fleet,
    an_answer_stored_through_one_envoy_is_a_hit_on_another,
    a_purge_sent_to_one_envoy_holds_on_the_others_within_a_second,
    an_envoy_started_after_a_purge_does_not_serve_what_it_purged,
    redis_killed_mid_load_every_answer_is_200_and_the_l2_comes_back,
    private_entries_stay_with_their_user_across_envoys,
);

fn fleet(backend: Backend, envoys: usize) -> Fleet {
    Fleet::start(&FleetOptions::new(backend, envoys))
}

fn assert_miss(r: &Resp, what: &str) {
    assert_eq!((r.status, r.cache()), (200, "MISS"), "{what}: {}", r.text());
}

fn assert_l2_hit(r: &Resp, what: &str) {
    assert_eq!(
        (r.status, r.cache(), r.reason()),
        (200, "HIT", Some("l2")),
        "{what}: {:?} {}",
        r.headers,
        r.text()
    );
}

// --- one origin fetch per key for the whole fleet ---------------------------------------------

/// 40 identical requests at once, 20 on each of two Envoys, on concurrent connections (so both
/// workers of each Envoy take part), in front of an origin slow enough that they all overlap.
fn one_origin_fetch_for_the_whole_fleet(backend: Backend) {
    let origin_args = vec!["--delay-ms".to_string(), "300".to_string()];
    let fleet = Fleet::start(&FleetOptions {
        origin_args,
        ..FleetOptions::new(backend, 2)
    });
    let ports = [fleet.envoys[0].port, fleet.envoys[1].port];
    let responses = concurrently(40, move |i| (i % 2, http(ports[i % 2], Req::query(USERS))));

    assert_eq!(
        fleet.origin.count(),
        1,
        "one origin fetch for both Envoys (labels {:?})",
        responses.iter().map(|(_, r)| r.cache()).collect::<Vec<_>>()
    );
    let first = &responses[0].1;
    for (_, r) in &responses {
        assert_eq!(r.status, 200, "{}", r.text());
        assert_eq!(r.body, first.body, "byte-identical bodies");
    }
    let misses: Vec<usize> = responses
        .iter()
        .filter(|(_, r)| r.cache() == "MISS")
        .map(|(e, _)| *e)
        .collect();
    assert_eq!(misses.len(), 1, "one MISS in the fleet");
    // On the other Envoy nobody went to the origin: its leader waited on the L2 and its
    // followers on their leader (a request delayed past the fetch on a busy machine is a HIT).
    let waiting = 1 - misses[0];
    for (e, r) in &responses {
        if *e == waiting {
            assert!(
                matches!(r.cache(), "COALESCED" | "HIT"),
                "on the Envoy that waited on the other: {}",
                r.cache()
            );
        }
    }
    assert!(
        responses.iter().any(|(e, r)| *e == waiting && r.via_l2()),
        "the waiting Envoy's leader was answered through the L2"
    );
    assert_eq!(fleet.counter("l2_leads"), 1);
    assert!(fleet.envoys[waiting].counter("l2_waits") >= 1);
    for envoy in &fleet.envoys {
        let per_worker = envoy.public_worker_connections();
        assert_eq!(per_worker.len(), 2, "{per_worker:?}");
        assert!(per_worker.iter().all(|&n| n > 0), "{per_worker:?}");
    }
}

// --- an answer stored through one Envoy serves the others -------------------------------------

fn an_answer_stored_through_one_envoy_is_a_hit_on_another(backend: Backend) {
    let fleet = fleet(backend, 2);
    let (a, b) = (&fleet.envoys[0], &fleet.envoys[1]);
    let miss = a.send(Req::query(USERS));
    assert_miss(&miss, "first request, through A");
    fleet.wait_l2_stores(1);

    let hit = b.send(Req::query(USERS));
    assert_l2_hit(&hit, "the same query through B, which never saw it");
    assert_eq!(hit.body, miss.body);
    assert_eq!(fleet.origin.count(), 1, "B did not ask the origin");
    assert_eq!(b.counter("l2_hits"), 1);
    assert_eq!(a.counter("l2_stores"), 1);

    // B keeps it in its own cache: the next request does not ask the L2 again.
    let lookups = fleet.l2_lookup_hits();
    let again = b.send(Req::query(USERS));
    assert_eq!(again.cache(), "HIT");
    assert_eq!(again.body, miss.body);
    assert_eq!(fleet.l2_lookup_hits(), lookups, "served from B's L1");
    assert_eq!(fleet.origin.count(), 1);
}

// --- purges reach every Envoy -----------------------------------------------------------------

/// Caches `queries` through `envoy` (each a MISS) and waits until the L2 holds them all.
fn store_through(fleet: &Fleet, envoy: &Envoy, queries: &[&str]) -> Vec<Vec<u8>> {
    let before = fleet.l2_stores();
    let bodies = queries
        .iter()
        .map(|q| {
            let r = envoy.send(Req::query(q));
            assert_miss(&r, q);
            r.body
        })
        .collect();
    fleet.wait_l2_stores(before + queries.len() as i64);
    bodies
}

/// Sends a purge through `envoy`'s internal listener, waiting until the fleet's purge log holds
/// it; returns when it was answered.
fn purge_users(envoy: &Envoy) -> Instant {
    let r = envoy.purge_committed(PURGE_USERS);
    let answered = Instant::now();
    assert_eq!(r.status, 200, "{}", r.text());
    assert_eq!(r.json()["purged"], 1);
    assert_eq!(r.json()["fleet"], "committed");
    answered
}

/// Asks for a purged query once, `PURGE_SPREAD` after the purge: it must come from the origin.
fn assert_purged_later(fleet: &Fleet, envoy: &Envoy, query: &str, old: &[u8], purged: Instant) {
    std::thread::sleep(PURGE_SPREAD.saturating_sub(purged.elapsed()));
    let (before, stores) = (fleet.origin.count(), fleet.l2_stores());
    let r = envoy.send(Req::query(query));
    assert_miss(&r, "an entry the L2 held from before the purge");
    assert_ne!(r.body, old, "the purged answer was served");
    assert_eq!(fleet.origin.count(), before + 1);
    // The new answer goes to the L2 too, after it was answered: wait for it, so that the next
    // `store_through` counts its own stores.
    fleet.wait_l2_stores(stores + 1);
}

/// B holds USER1 in its L1 (from the L2); a purge sent to A makes B miss within a second. An
/// entry that only the L2 held (USER2, never asked on C) is not served by C after the purge.
fn a_purge_sent_to_one_envoy_holds_on_the_others_within_a_second(backend: Backend) {
    let fleet = fleet(backend, 3);
    let (a, b, c) = (&fleet.envoys[0], &fleet.envoys[1], &fleet.envoys[2]);
    let old = store_through(&fleet, a, &[USER1, USER2]);
    assert_l2_hit(&b.send(Req::query(USER1)), "USER1 through B, from the L2");
    let lookups = fleet.l2_lookup_hits();
    let cached = b.send(Req::query(USER1));
    assert_eq!((cached.cache(), &cached.body), ("HIT", &old[0]));
    assert_eq!(
        fleet.l2_lookup_hits(),
        lookups,
        "B now holds USER1 in its L1"
    );
    let fetched = fleet.origin.count();

    let purged = purge_users(a);
    loop {
        let r = b.send(Req::query(USER1));
        if r.cache() == "MISS" {
            assert_ne!(r.body, old[0]);
            assert_eq!(fleet.origin.count(), fetched + 1);
            break;
        }
        assert_eq!(r.cache(), "HIT", "{}", r.text());
        assert_eq!(r.body, old[0]);
        assert!(
            purged.elapsed() < PURGE_SPREAD,
            "B still served the purged entry {:?} after the purge was answered on A \
             (l2_purges_sent on A {}, l2_purges_applied on B {})",
            purged.elapsed(),
            a.counter("l2_purges_sent"),
            b.counter("l2_purges_applied")
        );
        std::thread::sleep(Duration::from_millis(20));
    }
    eprintln!("purge on A held on B after {:?}", purged.elapsed());
    assert_purged_later(&fleet, c, USER2, &old[1], purged);
    assert_eq!(a.counter("l2_purges_sent"), 1);
    assert!(b.counter("l2_purges_applied") >= 1);
    assert!(c.counter("l2_purges_applied") >= 1);
}

/// An Envoy that joins the fleet after a purge must not serve what the purge removed from the L2
/// (its own purge marks start empty).
fn an_envoy_started_after_a_purge_does_not_serve_what_it_purged(backend: Backend) {
    let mut fleet = fleet(backend, 1);
    let old = store_through(&fleet, &fleet.envoys[0], &[ALL_USERS]);
    let purged = purge_users(&fleet.envoys[0]);
    fleet.add_envoy();
    assert_purged_later(&fleet, &fleet.envoys[1], ALL_USERS, &old[0], purged);
    // Not vacuous: what the L2 holds from after the purge is shared with the new Envoy.
    let fresh = store_through(&fleet, &fleet.envoys[0], &[USER1]);
    let r = fleet.envoys[1].send(Req::query(USER1));
    assert_l2_hit(&r, "stored after the purge, through the other Envoy");
    assert_eq!(r.body, fresh[0]);
}

// --- Redis down: nobody notices, and the L2 comes back ----------------------------------------

/// Load on both Envoys (distinct queries and a repeated one) while Redis is killed and started
/// again on its port. For the Cluster all three masters die: the whole L2 is gone.
fn redis_killed_mid_load_every_answer_is_200_and_the_l2_comes_back(backend: Backend) {
    let mut fleet = fleet(backend, 2);
    let ports: Vec<u16> = fleet.envoys.iter().map(|e| e.port).collect();
    let stop = Arc::new(AtomicBool::new(false));
    let statuses = Arc::new(Mutex::new(Vec::new()));
    let load: Vec<_> = (0..4)
        .map(|t| {
            let (port, stop, statuses) = (ports[t % 2], stop.clone(), statuses.clone());
            std::thread::spawn(move || {
                let mut n = 0;
                while !stop.load(Ordering::Relaxed) {
                    let q = if n % 2 == 0 {
                        format!("{{ t{t}_{n}: requestCount }}")
                    } else {
                        USERS.to_string()
                    };
                    let status = try_http(port, Req::query(&q)).map_or(0, |r| r.status);
                    statuses.lock().unwrap().push((n, status));
                    n += 1;
                    // Load, not a flood: the tests running beside this one need the CPU too.
                    std::thread::sleep(Duration::from_millis(2));
                }
            })
        })
        .collect();
    std::thread::sleep(Duration::from_millis(700));
    fleet.redis.kill();
    let killed = Instant::now();
    std::thread::sleep(Duration::from_millis(1500));
    fleet.redis.restart();
    eprintln!("Redis down for {:?}", killed.elapsed());
    std::thread::sleep(Duration::from_millis(800));
    stop.store(true, Ordering::Relaxed);
    load.into_iter().for_each(|h| h.join().unwrap());

    let statuses = statuses.lock().unwrap();
    let failed: Vec<_> = statuses.iter().filter(|(_, s)| *s != 200).collect();
    eprintln!(
        "{} requests under load, {} not 200",
        statuses.len(),
        failed.len()
    );
    assert!(statuses.len() >= 40, "only {} requests", statuses.len());
    assert!(failed.is_empty(), "not 200: {failed:?}");
    assert!(
        fleet.counter("l2_failures") > 0,
        "the filter never found the L2 failing, so it did not use it"
    );

    // The service reconnects on its own ...
    wait_l2_service_healthy(&fleet.l2);
    // ... and Envoy sends to it again once its health check passes (and any ejection ends): a
    // new answer stored through A becomes an L2 hit on B.
    let recovered = Instant::now();
    for round in 0.. {
        let q = format!("{{ resumed{round}: requestCount }}");
        let before = fleet.l2_stores();
        let stored = fleet.envoys[0].send(Req::query(&q));
        assert_eq!(stored.status, 200);
        let until = Instant::now() + Duration::from_millis(500);
        while fleet.l2_stores() == before && Instant::now() < until {
            std::thread::sleep(Duration::from_millis(10));
        }
        let r = fleet.envoys[1].send(Req::query(&q));
        assert_eq!(r.status, 200);
        if (r.cache(), r.via_l2()) == ("HIT", true) {
            assert_eq!(r.body, stored.body);
            break;
        }
        assert!(
            recovered.elapsed() < Duration::from_secs(15),
            "no L2 hit {:?} after the service recovered (last: {} {:?}, l2_failures {})",
            recovered.elapsed(),
            r.cache(),
            r.reason(),
            fleet.counter("l2_failures")
        );
    }
    eprintln!("L2 hits again {:?} after /health", recovered.elapsed());
}

// --- private entries stay with their user across the fleet ------------------------------------

/// The origin echoes the request's `x-user`: an answer that differs per user.
const WHO: &str = r#"{ who: headerValue(name: "x-user") requestCount }"#;

fn ask_as(envoy: &Envoy, user: &str) -> Resp {
    envoy.send(Req::query(WHO).header("x-user", user))
}

fn assert_answer_for(r: &Resp, user: &str) {
    assert_eq!(r.status, 200, "{}", r.text());
    assert_eq!(r.json()["data"]["who"], user, "{}", r.text());
}

/// With an identity source, operations are private by default: the key holds the user.
fn private_entries_stay_with_their_user_across_envoys(backend: Backend) {
    let fleet = Fleet::start(&FleetOptions {
        extra_config: r#""identity": {"source": "header", "header": "x-user"},"#.into(),
        ..FleetOptions::new(backend, 2)
    });
    let (a, b) = (&fleet.envoys[0], &fleet.envoys[1]);
    let alice = ask_as(a, "alice");
    assert_miss(&alice, "alice through A");
    assert_answer_for(&alice, "alice");
    fleet.wait_l2_stores(1);

    let bob = ask_as(b, "bob");
    assert_miss(&bob, "bob's same query through B: alice's entry is not his");
    assert_answer_for(&bob, "bob");
    assert_eq!(fleet.origin.count(), 2);
    fleet.wait_l2_stores(2);

    let alice_on_b = ask_as(b, "alice");
    assert_l2_hit(&alice_on_b, "alice through B");
    assert_eq!(alice_on_b.body, alice.body);
    let bob_on_a = ask_as(a, "bob");
    assert_l2_hit(&bob_on_a, "bob through A");
    assert_eq!(bob_on_a.body, bob.body);
    assert_eq!(fleet.origin.count(), 2);
}
