//! Coalescing in a real Envoy with two workers (connections spread evenly over them), in front of
//! an origin slowed down so that requests overlap.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

mod support;

use std::io::Write;
use std::net::TcpStream;
use std::time::{Duration, Instant};
use support::*;

const Q: &str = "{ users { id name } requestCount }";

fn slow_stack(config: &str, delay_ms: u32) -> (Origin, Envoy) {
    let origin = Origin::start_with(&["--delay-ms", &delay_ms.to_string()]);
    let envoy = Envoy::start(&EnvoyOptions::config(config), &origin);
    (origin, envoy)
}

/// Fires `n` copies of `req` at once; returns the responses and the wall time.
fn burst(
    envoy: &Envoy,
    n: usize,
    req: impl Fn(usize) -> Req + Send + Sync + 'static,
) -> (Vec<Resp>, Duration) {
    let port = envoy.port;
    let start = Instant::now();
    let out = concurrently(n, move |i| http(port, req(i)));
    (out, start.elapsed())
}

fn count_label(responses: &[Resp], label: &str) -> usize {
    responses.iter().filter(|r| r.cache() == label).count()
}

/// 50 identical requests at once, in front of an origin that takes 300 ms per request and serves
/// 8 at a time (the rest queue), like a busy GraphQL gateway.
fn fifty_identical(config: &str) -> (Origin, Envoy, Vec<Resp>, Duration) {
    let origin = Origin::start_with(&["--delay-ms", "300", "--max-inflight", "8"]);
    let envoy = Envoy::start(&EnvoyOptions::config(config), &origin);
    let (responses, took) = burst(&envoy, 50, |_| Req::query(Q));
    (origin, envoy, responses, took)
}

fn assert_one_fetch_for_all(origin: &Origin, envoy: &Envoy, responses: &[Resp]) {
    assert_eq!(origin.count(), 1, "the origin served exactly one request");
    let first = &responses[0];
    for r in responses {
        assert_eq!(r.status, 200, "{}", r.text());
        assert_eq!(r.body, first.body, "byte-identical bodies");
    }
    assert_eq!(count_label(responses, "MISS"), 1);
    assert_eq!(count_label(responses, "COALESCED"), 49);
    assert_eq!(envoy.counter("leaders"), 1);
    assert_eq!(envoy.counter("coalesced"), 49);
    // Both workers took part, and followers on the other worker were woken by the queue, not
    // found later by the fallback timer.
    let per_worker = envoy.worker_connections();
    assert_eq!(per_worker.len(), 2, "{per_worker:?}");
    assert!(per_worker.iter().all(|&n| n >= 20), "{per_worker:?}");
    assert_eq!(envoy.counter("late_wakeups"), 0);
}

#[test]
fn fifty_identical_requests_one_origin_fetch_with_ttl_zero() {
    let (origin, envoy, responses, took) = fifty_identical(r#"{"ttl_seconds": 0}"#);
    assert_one_fetch_for_all(&origin, &envoy, &responses);
    eprintln!(
        "coalescing on, ttl 0: 50 concurrent identical requests, origin requests {}, wall {took:?}",
        origin.count()
    );
    // Dedupe only: nothing is kept once the waiters are answered.
    let next = envoy.send(Req::query(Q));
    assert_eq!(next.cache(), "MISS");
    assert_eq!(origin.count(), 2);
    assert_eq!(envoy.counter("stores"), 0);
}

#[test]
fn fifty_identical_requests_one_origin_fetch_with_ttl() {
    let (origin, envoy, responses, _) = fifty_identical(r#"{"ttl_seconds": 30}"#);
    assert_one_fetch_for_all(&origin, &envoy, &responses);
    let next = envoy.send(Req::query(Q));
    assert_eq!(next.cache(), "HIT");
    assert_eq!(next.body, responses[0].body);
    assert_eq!(origin.count(), 1);
}

#[test]
fn without_coalescing_every_request_reaches_the_origin() {
    let (origin, _envoy, responses, took) =
        fifty_identical(r#"{"ttl_seconds": 0, "coalesce": false}"#);
    assert!(responses
        .iter()
        .all(|r| r.status == 200 && r.cache() == "MISS"));
    assert_eq!(origin.count(), 50);
    eprintln!("coalescing off, ttl 0: 50 concurrent identical requests, origin requests 50, wall {took:?}");
}

#[test]
fn different_keys_are_fetched_separately() {
    let (origin, envoy) = slow_stack(r#"{"ttl_seconds": 0}"#, 300);
    let (responses, _) = burst(&envoy, 40, |i| {
        Req::query(if i % 2 == 0 {
            "{ a: requestCount users { id } }"
        } else {
            "{ b: requestCount users { id } }"
        })
    });
    assert_eq!(origin.count(), 2);
    for (i, r) in responses.iter().enumerate() {
        let field = if i % 2 == 0 { "a" } else { "b" };
        assert!(
            r.json()["data"][field].is_number(),
            "request {i} got {}",
            r.text()
        );
    }
}

#[test]
fn get_requests_coalesce_too() {
    let (origin, envoy) = slow_stack(r#"{"ttl_seconds": 0}"#, 300);
    let path = "/graphql?query=%7B%20users%20%7B%20id%20%7D%20requestCount%20%7D";
    let (responses, _) = burst(&envoy, 20, move |_| Req::get(path));
    assert!(responses
        .iter()
        .all(|r| r.status == 200 && r.body == responses[0].body));
    assert_eq!(count_label(&responses, "COALESCED"), 19);
    assert_eq!(origin.count(), 1);
}

#[test]
fn different_users_never_share_a_response() {
    let (origin, envoy) = slow_stack(
        r#"{"ttl_seconds": 0, "vary_headers": ["authorization"]}"#,
        300,
    );
    let users = ["alice", "bob"];
    let (responses, _) = burst(&envoy, 40, move |i| {
        Req::query("{ me { id name } }")
            .header("authorization", &format!("Bearer {}", users[i % 2]))
    });
    assert_eq!(origin.count(), 2, "one fetch per user");
    for (i, r) in responses.iter().enumerate() {
        let expected = if i % 2 == 0 { "Alice" } else { "Bob" };
        assert_eq!(r.json()["data"]["me"]["name"], expected, "request {i}");
    }
}

#[test]
fn followers_get_the_answer_when_the_leader_disconnects() {
    let (origin, envoy) = slow_stack(r#"{"ttl_seconds": 0}"#, 600);
    // The leader: sends its request and hangs up before the origin answers.
    let mut leader = TcpStream::connect(("127.0.0.1", envoy.port)).unwrap();
    leader.write_all(&Req::query(Q).to_bytes()).unwrap();
    std::thread::sleep(Duration::from_millis(100));
    let (responses, _) = burst(&envoy, 10, |_| Req::query(Q));
    drop(leader);
    for r in &responses {
        assert_eq!(r.status, 200, "{}", r.text());
        assert_eq!(r.cache(), "COALESCED");
    }
    assert_eq!(origin.count(), 1);
}

#[test]
fn a_slow_origin_times_out_every_waiter_promptly_and_nothing_is_stored() {
    let config = r#"{"ttl_seconds": 30, "fetch_timeout_ms": 500}"#;
    let (origin, envoy) = slow_stack(config, 0);
    let slow = |_| Req::query(Q).header("x-origin-delay-ms", "3000");
    let (responses, took) = burst(&envoy, 20, slow);
    for r in &responses {
        assert_eq!(r.status, 504, "{}", r.text());
    }
    assert!(
        took < Duration::from_millis(2500),
        "waiters answered promptly, took {took:?}"
    );
    assert_eq!(origin.count(), 1);
    assert_eq!(envoy.counter("stores"), 0);
    assert!(envoy.counter("fetch_failures") >= 1);
    // The next request tries the origin again (the delay header is not part of the key).
    let next = envoy.send(Req::query(Q));
    assert_eq!((next.status, next.cache()), (200, "MISS"));
    assert_eq!(origin.count(), 2);
}

#[test]
fn origin_down_fails_every_waiter_and_the_next_request_tries_again() {
    // A port nothing listens on.
    let dead_port = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let envoy =
        Envoy::try_start(&EnvoyOptions::config(r#"{"ttl_seconds": 30}"#), dead_port).unwrap();
    let (responses, took) = burst(&envoy, 20, |_| Req::query(Q));
    for r in &responses {
        assert_eq!(r.status, 503, "{}", r.text());
    }
    assert!(took < Duration::from_secs(3), "took {took:?}");
    let leaders = envoy.counter("leaders");
    assert!(leaders >= 1);
    assert_eq!(envoy.counter("stores"), 0);
    let next = envoy.send(Req::query(Q));
    assert_eq!(next.status, 503);
    assert_eq!(
        envoy.counter("leaders"),
        leaders + 1,
        "a new fetch, not a stored failure"
    );
}

#[test]
fn a_waiter_past_max_wait_goes_upstream_alone() {
    let config = r#"{"ttl_seconds": 0, "max_wait_ms": 300, "debug_headers": true}"#;
    let (origin, envoy) = slow_stack(config, 0);
    let slow = |_| Req::query(Q).header("x-origin-delay-ms", "1200");
    let (responses, _) = burst(&envoy, 6, slow);
    for r in &responses {
        assert_eq!(r.status, 200, "{}", r.text());
    }
    let timed_out = responses
        .iter()
        .filter(|r| r.header("x-cache-reason") == Some("wait-timeout"))
        .count();
    assert!(
        timed_out >= 1,
        "some waiters gave up: {:?}",
        responses.iter().map(|r| r.cache()).collect::<Vec<_>>()
    );
    assert_eq!(envoy.counter("wait_timeouts") as usize, timed_out);
    assert_eq!(
        origin.count() as usize,
        1 + timed_out,
        "each one that gave up went upstream itself"
    );
}

#[test]
fn an_answer_that_varies_on_an_unkeyed_header_is_not_shared() {
    let config = r#"{"ttl_seconds": 0, "debug_headers": true}"#;
    let (origin, envoy) = slow_stack(config, 300);
    let (responses, _) = burst(&envoy, 10, |i| {
        Req::query(Q)
            .header("x-origin-header", "vary: x-tenant")
            .header("x-tenant", &format!("t{i}"))
    });
    assert!(responses.iter().all(|r| r.status == 200));
    assert_eq!(count_label(&responses, "COALESCED"), 0);
    let released = responses
        .iter()
        .filter(|r| r.header("x-cache-reason") == Some("not-shareable"))
        .count();
    assert_eq!(released, 9, "followers went upstream themselves");
    assert_eq!(origin.count(), 10);
}

#[test]
fn waiters_per_key_are_bounded() {
    let origin = Origin::start_with(&["--delay-ms", "300"]);
    let opts = EnvoyOptions {
        concurrency: 1,
        ..EnvoyOptions::config(r#"{"ttl_seconds": 0, "max_waiters": 3}"#)
    };
    let envoy = Envoy::start(&opts, &origin);
    let (responses, _) = burst(&envoy, 10, |_| Req::query(Q));
    assert!(responses.iter().all(|r| r.status == 200));
    assert_eq!(
        count_label(&responses, "COALESCED"),
        2,
        "the leader plus two followers share one fetch"
    );
    assert_eq!(origin.count(), 8, "the other seven went upstream alone");
}

#[test]
fn the_shared_fetch_goes_to_the_configured_cluster() {
    let route_origin = Origin::start();
    let fetch_origin = Origin::start();
    let opts = EnvoyOptions {
        extra_clusters: cluster_yaml("shared_fetch", fetch_origin.port),
        ..EnvoyOptions::config(r#"{"ttl_seconds": 0, "upstream_cluster": "shared_fetch"}"#)
    };
    let envoy = Envoy::start(&opts, &route_origin);
    let r = envoy.send(Req::query(Q));
    assert_eq!((r.status, r.cache()), (200, "MISS"));
    assert_eq!(fetch_origin.count(), 1);
    assert_eq!(route_origin.count(), 0);
    // Not coalescable (a mutation): the route's cluster as usual.
    envoy.send(Req::query("mutation { bump }"));
    assert_eq!(route_origin.count(), 1);
}

#[test]
fn answers_that_may_depend_on_the_caller_are_shared_only_when_the_key_names_the_caller() {
    // No vary headers, public: followers may be other users with other credentials.
    let (origin, envoy) = slow_stack(r#"{"ttl_seconds": 0, "vary_headers": []}"#, 300);
    let forbidden = |_| Req::query(Q).header("x-origin-status", "403");
    let (responses, _) = burst(&envoy, 6, forbidden);
    assert!(responses.iter().all(|r| r.status == 403));
    assert_eq!(count_label(&responses, "COALESCED"), 0);
    assert_eq!(origin.count(), 6, "a 403 is nobody else's answer");
    let (responses, _) = burst(&envoy, 6, |_| Req::query("{ fail requestCount }"));
    assert_eq!(
        count_label(&responses, "COALESCED"),
        0,
        "nor are GraphQL errors"
    );
    assert_eq!(origin.count(), 12);
    let (responses, _) = burst(&envoy, 6, |_| Req::query(Q));
    assert_eq!(
        count_label(&responses, "COALESCED"),
        5,
        "a clean answer is shared"
    );
    assert_eq!(origin.count(), 13);

    // With the credentials in the key, followers are the same caller: errors are shared too.
    let (origin, envoy) = slow_stack(
        r#"{"ttl_seconds": 0, "vary_headers": ["authorization"]}"#,
        300,
    );
    let (responses, _) = burst(&envoy, 6, |_| {
        Req::query(Q)
            .header("x-origin-status", "403")
            .header("authorization", "Bearer a")
    });
    assert!(responses.iter().all(|r| r.status == 403));
    assert_eq!(count_label(&responses, "COALESCED"), 5);
    assert_eq!(origin.count(), 1);
}

#[test]
fn the_shared_fetch_carries_only_the_key_s_and_the_configured_headers() {
    // The route strips `x-secret`, which Envoy never applies to a callout: the shared fetch must
    // not carry it (nor any other header outside the key and `forward_headers`).
    let origin = Origin::start_with(&["--delay-ms", "300"]);
    let opts = EnvoyOptions {
        extra_routes: r#"              - match: { prefix: "/graphql" }
                route: { cluster: origin, timeout: 15s }
                request_headers_to_remove: ["x-secret"]"#
            .to_string(),
        ..EnvoyOptions::config(
            r#"{"ttl_seconds": 0, "debug_headers": true, "vary_headers": ["x-tenant"],
                "forward_headers": ["user-agent"]}"#,
        )
    };
    let envoy = Envoy::start(&opts, &origin);
    const SEEN: &str = r#"{ secret: headerValue(name: "x-secret") other: headerValue(name: "x-other")
        tenant: headerValue(name: "x-tenant") agent: headerValue(name: "user-agent") requestCount }"#;
    let req = || {
        Req::query(SEEN)
            .header("x-secret", "s3cret")
            .header("x-other", "o")
            .header("x-tenant", "t1")
            .header("user-agent", "test-agent")
    };
    let (responses, _) = burst(&envoy, 4, move |_| req());
    assert_eq!(origin.count(), 1, "one shared fetch");
    assert_eq!(count_label(&responses, "COALESCED"), 3);
    for r in &responses {
        let seen = &r.json()["data"];
        assert_eq!(seen["secret"], serde_json::Value::Null, "{}", r.text());
        assert_eq!(seen["other"], serde_json::Value::Null, "{}", r.text());
        assert_eq!(seen["tenant"], "t1", "the key's headers are carried");
        assert_eq!(seen["agent"], "test-agent", "forward_headers are carried");
    }
    // The route's own way (a bypass) strips it as configured and carries everything else.
    let mut plain_text = req();
    plain_text.headers[0].1 = "text/plain".into();
    let bypassed = envoy.send(plain_text);
    assert_eq!(bypassed.cache(), "BYPASS");
    let seen = &bypassed.json()["data"];
    assert_eq!(
        seen["secret"],
        serde_json::Value::Null,
        "{}",
        bypassed.text()
    );
    assert_eq!(seen["other"], "o");
}
