//! Invalidation in a real Envoy with two workers: the purge API, mutations that purge what they
//! change, and the race of a purge with a fetch in flight. Every answer carries the origin's
//! `requestCount`, so a body that did not change came from the cache.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

mod support;

use std::time::{Duration, Instant};
use support::*;

const TOKEN: &str = "test-purge-token-0123456789";
const PURGE: &str = "/graphql-cache/purge";

/// 16384 tag slots: with the default 4096, `operation:GetUser` and `operation:Posts` share a slot
/// (a purge of one is then a purge of both: too much, never too little, but not this test's point).
fn config() -> String {
    format!(
        r#"{{"debug_headers": true, "purge_path": "{PURGE}", "purge_token": "{TOKEN}", "tag_slots": 16384}}"#
    )
}

fn purging_stack() -> (Origin, Envoy) {
    stack(&config())
}

const USER1: &str = "query GetUser { user(id: 1) { __typename id name } requestCount }";
const USER2: &str = "query GetUser { user(id: 2) { __typename id name } requestCount }";
const POSTS: &str = "query Posts { posts { __typename id title } requestCount }";

fn purge(envoy: &Envoy, token: &str, body: &str) -> Resp {
    envoy.send(
        Req::post_json(body)
            .path(PURGE)
            .header("authorization", &format!("Bearer {token}")),
    )
}

/// Sends `query` `n` times, one connection each, on both workers: Envoy balances a connection to
/// the worker with the fewest open ones, so the second half is sent while an idle connection
/// holds the worker the first half went to.
fn reads(envoy: &Envoy, query: &str, n: usize) -> Vec<Resp> {
    let mut out: Vec<Resp> = (0..n / 2).map(|_| envoy.send(Req::query(query))).collect();
    let idle = std::net::TcpStream::connect(("127.0.0.1", envoy.port)).unwrap();
    std::thread::sleep(Duration::from_millis(20));
    out.extend((n / 2..n).map(|_| envoy.send(Req::query(query))));
    drop(idle);
    out
}

/// Stores `query` and warms both workers' copies; returns the cached body.
fn cached(envoy: &Envoy, query: &str) -> Vec<u8> {
    let first = envoy.send(Req::query(query));
    assert_eq!(first.cache(), "MISS", "{}", first.text());
    for r in reads(envoy, query, 8) {
        assert_eq!(r.cache(), "HIT");
        assert_eq!(r.body, first.body);
    }
    first.body
}

/// After a purge of `query`'s entry: the next read is fresh from the origin on whichever worker it
/// lands, and no worker ever returns the old body again.
fn assert_purged(envoy: &Envoy, query: &str, old: &[u8]) {
    let after = reads(envoy, query, 8);
    assert_eq!(after[0].cache(), "MISS", "{}", after[0].text());
    for r in &after {
        assert_ne!(r.body, old, "a purged entry was served ({})", r.cache());
    }
}

fn assert_kept(envoy: &Envoy, query: &str, old: &[u8]) {
    for r in reads(envoy, query, 4) {
        assert_eq!(
            r.cache(),
            "HIT",
            "{query}: {:?} purged_misses {} stale_misses {}",
            r.headers,
            envoy.counter("purged_misses"),
            envoy.counter("stale_misses")
        );
        assert_eq!(r.body, old);
    }
}

#[test]
fn each_selector_purges_what_it_names_and_nothing_else() {
    let cases = [
        (
            r#"[{"kind":"entity","type":"User","id":"1"}]"#,
            vec![USER1],
            vec![USER2, POSTS],
        ),
        (
            r#"[{"kind":"entity","type":"User","id":1}]"#,
            vec![USER1],
            vec![USER2, POSTS],
        ),
        (
            r#"[{"kind":"type","type":"Post"}]"#,
            vec![POSTS],
            vec![USER1, USER2],
        ),
        (
            r#"[{"kind":"operation","name":"GetUser"}]"#,
            vec![USER1, USER2],
            vec![POSTS],
        ),
        (
            r#"[{"kind":"field","name":"posts"}]"#,
            vec![POSTS],
            vec![USER1, USER2],
        ),
        (r#"[{"kind":"all"}]"#, vec![USER1, USER2, POSTS], vec![]),
    ];
    for (selectors, purged, kept) in cases {
        let (origin, envoy) = purging_stack();
        let bodies: Vec<(&str, Vec<u8>)> = [USER1, USER2, POSTS]
            .iter()
            .map(|q| (*q, cached(&envoy, q)))
            .collect();
        let before = origin.count();
        let started = Instant::now();
        let r = purge(&envoy, TOKEN, selectors);
        let took = started.elapsed();
        assert_eq!(r.status, 200, "{selectors}: {}", r.text());
        assert_eq!(r.json()["purged"], 1);
        assert_eq!(r.header("content-type"), Some("application/json"));
        assert_eq!(origin.count(), before, "a purge never reaches the origin");
        for (q, old) in &bodies {
            if purged.contains(q) {
                assert_purged(&envoy, q, old);
            } else {
                assert!(kept.contains(q));
                assert_kept(&envoy, q, old);
            }
        }
        assert_eq!(envoy.counter("purges"), 1);
        let per_worker = envoy.worker_connections();
        assert!(per_worker.iter().all(|&n| n > 0), "{per_worker:?}");
        eprintln!("{selectors}: purge answered in {took:?}; next read on any worker is a miss");
    }
}

/// The signal lookups read is an Envoy counter; purges must cross workers through it, and through
/// shared data when a stats matcher takes that counter away.
#[test]
fn a_purge_crosses_workers_with_and_without_the_purge_signal() {
    const SIGNAL: &str = "wasmcustom.graphql_cache.purge_signal";
    for filtered in [false, true] {
        let origin = Origin::start();
        let mut opts = EnvoyOptions::config(&config());
        if filtered {
            opts.bootstrap_extra = format!(
                "stats_config:\n  stats_matcher:\n    exclusion_list:\n      patterns: [ {{ exact: \"{SIGNAL}\" }} ]\n"
            );
        }
        let envoy = Envoy::start(&opts, &origin);
        let before = envoy.stat(SIGNAL);
        // Each VM raised it once, checking that it counts.
        assert_eq!(before > 0, !filtered, "the matcher applies to it");
        let old = cached(&envoy, USER1);
        let r = purge(&envoy, TOKEN, r#"[{"kind":"type","type":"User"}]"#);
        assert_eq!(r.status, 200, "{}", r.text());
        assert_purged(&envoy, USER1, &old);
        if !filtered {
            assert_eq!(envoy.stat(SIGNAL), before + 1, "one purge, one move");
        }
        let per_worker = envoy.worker_connections();
        assert!(per_worker.iter().all(|&n| n > 0), "{per_worker:?}");
    }
}

#[test]
fn entries_carry_their_tags() {
    let (_origin, envoy) = purging_stack();
    let miss = envoy.send(Req::query(USER1));
    let tags = "operation:GetUser,field:user,field:requestCount,type:User,entity:User:1";
    assert_eq!(miss.header("x-cache-tags"), Some(tags));
    let hit = envoy.send(Req::query(USER1));
    assert_eq!(hit.cache(), "HIT");
    assert_eq!(hit.header("x-cache-tags"), Some(tags));
}

#[test]
fn a_mutation_purges_the_entity_it_changed_and_only_that() {
    let (_origin, envoy) = purging_stack();
    let user1 = cached(&envoy, USER1);
    let user2 = cached(&envoy, USER2);
    let m = envoy.send(Req::query(
        r#"mutation { updateUser(id: 1, name: "Alicia") { __typename id name } }"#,
    ));
    assert_eq!(m.status, 200, "{}", m.text());
    assert_eq!(m.cache(), "BYPASS");
    assert_eq!(
        m.json()["data"]["updateUser"]["name"],
        "Alicia",
        "passed through untouched"
    );
    assert_eq!(envoy.counter("mutation_purges"), 1);
    let next = envoy.send(Req::query(USER1));
    assert_eq!(next.cache(), "MISS");
    assert_eq!(next.json()["data"]["user"]["name"], "Alicia");
    assert_ne!(next.body, user1);
    assert_kept(&envoy, USER2, &user2);
}

#[test]
fn refused_purges_change_nothing() {
    let (origin, envoy) = purging_stack();
    let user1 = cached(&envoy, USER1);
    let before = origin.count();
    let all = r#"[{"kind":"all"}]"#;
    let wrong = purge(&envoy, "test-purge-token-0123456780", all);
    assert_eq!(wrong.status, 401);
    let missing = envoy.send(Req::post_json(all).path(PURGE));
    assert_eq!(missing.status, 401);
    for bad in [
        "{not json",
        r#"{"kind":"all"}"#,
        r#"[{"kind":"all"},{"kind":"tenant","name":"x"}]"#,
        r#"[{"kind":"entity","type":"User"}]"#,
    ] {
        let r = purge(&envoy, TOKEN, bad);
        assert_eq!(r.status, 400, "{bad}: {}", r.text());
        assert!(r.json()["error"].is_string());
    }
    let r = purge(&envoy, TOKEN, r#"[{"kind":"all"},{"kind":"nope"}]"#);
    assert!(r.text().contains("selector 1"), "{}", r.text());
    let get = envoy.send(Req::get(PURGE).header("authorization", &format!("Bearer {TOKEN}")));
    assert_eq!(get.status, 405);
    assert_eq!(
        origin.count(),
        before,
        "no purge request reached the origin"
    );
    assert_kept(&envoy, USER1, &user1);
    assert_eq!(envoy.counter("purges"), 0);
    assert_eq!(envoy.counter("purge_rejected"), 8);
}

#[test]
fn a_purge_racing_a_fetch_in_flight_does_not_let_the_old_answer_be_stored() {
    let (origin, envoy) = purging_stack();
    let port = envoy.port;
    // The origin reads the old data at once, and answers 600 ms later.
    let slow = std::thread::spawn(move || {
        http(port, Req::query(USER1).header("x-origin-delay-ms", "600"))
    });
    std::thread::sleep(Duration::from_millis(200));
    let r = purge(
        &envoy,
        TOKEN,
        r#"[{"kind":"entity","type":"User","id":"1"}]"#,
    );
    assert_eq!(r.status, 200);
    let old = slow.join().unwrap();
    assert_eq!(old.cache(), "MISS");
    assert_eq!(origin.count(), 1);
    let next = envoy.send(Req::query(USER1));
    assert_eq!(
        next.cache(),
        "MISS",
        "the answer read before the purge was not kept"
    );
    assert_ne!(next.body, old.body);
    assert_eq!(
        envoy.send(Req::query(USER1)).cache(),
        "HIT",
        "the fresh one is"
    );
}

#[test]
fn a_soft_purge_leaves_a_stale_entry_not_served_as_fresh() {
    let (_origin, envoy) = purging_stack();
    let user1 = cached(&envoy, USER1);
    let r = purge(
        &envoy,
        TOKEN,
        r#"[{"kind":"entity","type":"User","id":"1","soft":true}]"#,
    );
    assert_eq!(r.status, 200);
    assert_purged(&envoy, USER1, &user1);
    assert_eq!(envoy.counter("stale_misses"), 1);
    assert_eq!(envoy.counter("purged_misses"), 0);
}

const POST1: &str = "query GetPost { post(id: 1) { __typename id title } requestCount }";

/// `config()` with `extra` members (`"name": value, ...`).
fn config_with(extra: &str) -> String {
    format!(
        r#"{{"debug_headers": true, "purge_path": "{PURGE}", "purge_token": "{TOKEN}", "tag_slots": 16384, {extra}}}"#
    )
}

/// A client renames fields of its own mutation's answer to `__typename` and `id`: the answer then
/// reads like post 1 (`{"__typename": "Post", "id": "1"}`), but the operation shows neither is
/// the real field, so no post is purged; a genuine `{ __typename id }` still purges its entity.
#[test]
fn aliases_in_a_mutation_do_not_steer_its_purge() {
    for mode in ["entity", "type"] {
        let (_origin, envoy) = stack(&config_with(&format!(
            r#""mutation_invalidation": "{mode}""#
        )));
        let post1 = cached(&envoy, POST1);
        let user2 = cached(&envoy, USER2);
        for attack in [
            r#"mutation { updateUser(id: 1, name: "Post") { __typename: name id } }"#,
            r#"mutation { updateUser(id: 1, name: "Post") { ...F } } fragment F on User { __typename: name id }"#,
            r#"mutation { updateUser(id: 1, name: "Post") { ... on User { __typename: name } id } }"#,
        ] {
            let m = envoy.send(Req::query(attack));
            assert_eq!(m.status, 200, "{}", m.text());
            assert_eq!(
                m.json()["data"]["updateUser"],
                serde_json::json!({"__typename": "Post", "id": "1"}),
                "the answer reads like post 1"
            );
        }
        assert_eq!(envoy.counter("mutation_purges"), 0, "{mode}");
        assert_kept(&envoy, POST1, &post1);
        let genuine = envoy.send(Req::query(
            r#"mutation { updateUser(id: 2, name: "Robert") { __typename id name } }"#,
        ));
        assert_eq!(genuine.status, 200, "{}", genuine.text());
        assert_eq!(envoy.counter("mutation_purges"), 1, "{mode}");
        assert_purged(&envoy, USER2, &user2);
        assert_kept(&envoy, POST1, &post1);
    }
}

/// Tags the origin declares (here `Surrogate-Key`, space-separated, one of them its CDN's own)
/// are purged instead of the objects of the answer.
#[test]
fn a_mutation_purges_the_tags_its_origin_declares() {
    let (_origin, envoy) = purging_stack();
    let post1 = cached(&envoy, POST1);
    let user2 = cached(&envoy, USER2);
    let m = envoy.send(
        Req::query(r#"mutation { updateUser(id: 2, name: "Bobby") { __typename id } }"#)
            .header("x-origin-header", "surrogate-key: cdn-post-1 entity:Post:1"),
    );
    assert_eq!(m.status, 200, "{}", m.text());
    assert_eq!(envoy.counter("mutation_purges"), 1);
    assert_purged(&envoy, POST1, &post1);
    assert_kept(&envoy, USER2, &user2);
}

/// Past `mutation_purge_burst` (per worker), a mutation purges its types whole, and says so.
#[test]
fn mutation_purges_past_the_budget_collapse_to_their_types() {
    let (_origin, envoy) = stack(&config_with(
        r#""mutation_purges_per_second": 1, "mutation_purge_burst": 1"#,
    ));
    let post1 = cached(&envoy, POST1);
    let user2 = cached(&envoy, USER2);
    // Two workers, one purge each at once: the third mutation finds one spent.
    for name in ["A", "B", "C"] {
        let m = envoy.send(Req::query(&format!(
            r#"mutation {{ updateUser(id: 1, name: "{name}") {{ __typename id }} }}"#
        )));
        assert_eq!(m.status, 200, "{}", m.text());
    }
    assert_eq!(envoy.counter("mutation_purges"), 3);
    assert!(envoy.counter("mutation_purges_collapsed") >= 1);
    assert_purged(&envoy, USER2, &user2);
    assert_kept(&envoy, POST1, &post1);
}

/// `cdn_tags`: the answer's tags in Fastly's and Cloudflare's headers, on the miss and on hits,
/// the same names a purge takes.
#[test]
fn a_cdn_in_front_gets_the_entry_s_tags() {
    let (_origin, envoy) = stack(&format!(
        r#"{{"purge_path": "{PURGE}", "purge_token": "{TOKEN}", "cdn_tags": {{"headers": ["Surrogate-Key", "Cache-Tag"]}}}}"#
    ));
    let tags = [
        "operation:GetUser",
        "field:user",
        "field:requestCount",
        "type:User",
        "entity:User:1",
    ];
    for expected in ["MISS", "HIT"] {
        let r = envoy.send(Req::query(USER1));
        assert_eq!(r.cache(), expected);
        assert_eq!(
            r.header("surrogate-key"),
            Some(tags.join(" ").as_str()),
            "{expected}"
        );
        assert_eq!(
            r.header("cache-tag"),
            Some(tags.join(",").as_str()),
            "{expected}"
        );
        assert_eq!(r.header("x-cache-tags"), None, "no debug headers asked for");
    }
    // The entity selector purges what the CDN knows as `entity:User:1`.
    let old = envoy.send(Req::query(USER1)).body;
    assert_eq!(
        purge(
            &envoy,
            TOKEN,
            r#"[{"kind":"entity","type":"User","id":"1"}]"#
        )
        .status,
        200
    );
    assert_purged(&envoy, USER1, &old);
    assert_eq!(envoy.counter("cdn_tags_left_out"), 0);
}
