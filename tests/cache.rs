//! The cache end to end: the built `.wasm` in a real Envoy, in front of the real origin, asserted
//! over HTTP and by the origin's own request count.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

mod support;

use serde_json::json;
use support::*;

/// Every query selects `requestCount`, which the origin fills with its own counter: a body that
/// comes back unchanged must have come from the cache.
const Q: &str = "{ users { id name } requestCount }";

#[test]
fn miss_then_hit_with_age_and_no_origin_request() {
    let (origin, envoy) = stack(r#"{"debug_headers": true}"#);
    let first = envoy.send(Req::query(Q));
    assert_eq!(first.status, 200);
    assert_eq!(first.cache(), "MISS");
    assert_eq!(origin.count(), 1);
    let key = first.header("x-cache-key").unwrap().to_string();
    assert_eq!(key.len(), 64);

    std::thread::sleep(std::time::Duration::from_millis(1100));
    let second = envoy.send(Req::query(Q));
    assert_eq!(second.status, 200);
    assert_eq!(second.cache(), "HIT");
    assert_eq!(
        second.body, first.body,
        "a hit is byte-for-byte the stored answer"
    );
    assert_eq!(second.header("content-type"), first.header("content-type"));
    let age: u64 = second.header("age").unwrap().parse().unwrap();
    assert!(age >= 1, "age {age}");
    assert_eq!(second.header("x-cache-key"), Some(key.as_str()));
    assert_eq!(origin.count(), 1, "the hit never reached the origin");

    assert_eq!(envoy.counter("misses"), 1);
    assert_eq!(envoy.counter("hits"), 1);
    assert_eq!(envoy.counter("stores"), 1);
    // No upstream connection was opened for the hit: one request reached the cluster.
    assert_eq!(envoy.stat("cluster.origin.upstream_rq_total"), 1);
}

#[test]
fn get_requests_are_cached_too() {
    let (origin, envoy) = stack("{}");
    let path = "/graphql?query=%7B%20users%20%7B%20id%20%7D%20requestCount%20%7D";
    let first = envoy.send(Req::get(path));
    assert_eq!(
        (first.status, first.cache()),
        (200, "MISS"),
        "{}",
        first.text()
    );
    let second = envoy.send(Req::get(path));
    assert_eq!(second.cache(), "HIT");
    assert_eq!(second.body, first.body);
    assert_eq!(origin.count(), 1);
}

/// Sends `a` then `b`; returns whether `b` was served from `a`'s entry. Each case gets its own
/// `x-case` header (a vary header in these tests) so that cases cannot hit each other's entries.
fn shares_key(envoy: &Envoy, origin: &Origin, case: &str, a: Req, b: Req) -> bool {
    let (a, b) = (a.header("x-case", case), b.header("x-case", case));
    let before = origin.count();
    let first = envoy.send(a);
    assert_eq!(first.status, 200, "{}", first.text());
    assert_eq!(
        first.cache(),
        "MISS",
        "first request must be new: {}",
        first.text()
    );
    let second = envoy.send(b);
    assert_eq!(second.status, 200, "{}", second.text());
    let hit = second.cache() == "HIT";
    assert_eq!(origin.count() - before, if hit { 1 } else { 2 });
    if hit {
        assert_eq!(second.body, first.body);
    }
    hit
}

#[test]
fn equivalent_requests_share_a_key() {
    let (origin, envoy) = stack(r#"{"vary_headers": ["x-case"]}"#);
    let p = |body: &str| Req::post_json(body);
    let cases: Vec<(&str, String, String)> = vec![
        (
            "whitespace, comments, commas",
            gql("{ user(id: \"1\") { id name } requestCount }", None, None),
            gql("# hi\n{user(id:\"1\"){id,name},requestCount # bye\n}", None, None),
        ),
        (
            "argument order",
            gql("{ posts(authorId: \"1\", first: 2) { id } requestCount }", None, None),
            gql("{ posts(first: 2, authorId: \"1\") { id } requestCount }", None, None),
        ),
        (
            "input object field order",
            gql("{ echoInput(input: {a: \"x\", b: 1}) requestCount }", None, None),
            gql("{ echoInput(input: {b: 1, a: \"x\"}) requestCount }", None, None),
        ),
        (
            "variable definition order",
            gql(
                "query Q($a: ID!, $n: Int) { user(id: $a) { id } posts(first: $n) { id } requestCount }",
                Some(json!({"a": "2", "n": 1})),
                None,
            ),
            gql(
                "query Q($n: Int, $a: ID!) { user(id: $a) { id } posts(first: $n) { id } requestCount }",
                Some(json!({"a": "2", "n": 1})),
                None,
            ),
        ),
        (
            "shorthand query",
            gql("{ users { name } requestCount }", None, None),
            gql("query { users { name } requestCount }", None, None),
        ),
        (
            "unused fragments and unselected operations",
            gql("query A { users { email } requestCount }", None, Some("A")),
            gql(
                "query B { x: requestCount } query A { users { email } requestCount } fragment U on User { id }",
                None,
                Some("A"),
            ),
        ),
        (
            "variables key order",
            gql(
                "query($i: EchoInput) { echoInput(input: $i) requestCount }",
                Some(json!({"i": {"a": "k", "nested": {"b": 2, "a": "n"}}})),
                None,
            ),
            r#"{"variables":{"i":{"nested":{"a":"n","b":2},"a":"k"}},"query":"query($i: EchoInput) { echoInput(input: $i) requestCount }"}"#.to_string(),
        ),
        (
            "variables absent vs {}",
            gql("{ post(id: \"3\") { title } requestCount }", None, None),
            gql("{ post(id: \"3\") { title } requestCount }", Some(json!({})), None),
        ),
    ];
    for (rule, a, b) in cases {
        assert!(
            shares_key(&envoy, &origin, rule, p(&a), p(&b)),
            "should share a key: {rule}"
        );
    }
}

#[test]
fn requests_that_may_differ_never_share_a_key() {
    let (origin, envoy) = stack(r#"{"vary_headers": ["authorization", "x-tenant", "x-case"]}"#);
    let p = |body: String| Req::post_json(&body);
    let var_q = "query($v: String) { echo(value: $v) requestCount }";
    let cases: Vec<(&str, Req, Req)> = vec![
        (
            "selection order",
            p(gql("{ requestCount users { id } }", None, None)),
            p(gql("{ users { id } requestCount }", None, None)),
        ),
        (
            "aliases",
            p(gql("{ u: users { id } requestCount }", None, None)),
            p(gql("{ users { id } requestCount }", None, None)),
        ),
        (
            "literal value",
            p(gql("{ user(id: \"1\") { id } requestCount }", None, None)),
            p(gql("{ user(id: \"2\") { id } requestCount }", None, None)),
        ),
        (
            "strings compared exactly",
            p(gql("{ echo(value: \"abc\") requestCount }", None, None)),
            p(gql("{ echo(value: \"ABC\") requestCount }", None, None)),
        ),
        (
            "enum vs string",
            p(gql(
                "{ posts(orderBy: OLDEST) { id } requestCount }",
                None,
                None,
            )),
            p(gql(
                "{ posts(orderBy: \"OLDEST\") { id } requestCount }",
                None,
                None,
            )),
        ),
        (
            "variable value",
            p(gql(var_q, Some(json!({"v": "a"})), None)),
            p(gql(var_q, Some(json!({"v": "b"})), None)),
        ),
        (
            "explicit null vs absent variable",
            p(gql(var_q, Some(json!({"v": null})), None)),
            p(gql(var_q, None, None)),
        ),
        (
            "selected operation",
            p(gql(
                "query A { a: requestCount } query B { b: requestCount }",
                None,
                Some("A"),
            )),
            p(gql(
                "query A { a: requestCount } query B { b: requestCount }",
                None,
                Some("B"),
            )),
        ),
        (
            "directives",
            p(gql("{ users { id } requestCount }", None, None)),
            p(gql(
                "{ users @include(if: true) { id } requestCount }",
                None,
                None,
            )),
        ),
        (
            "directive arguments",
            p(gql(
                "{ users @include(if: true) { id } email: requestCount @skip(if: false) }",
                None,
                None,
            )),
            p(gql(
                "{ users @include(if: true) { id } email: requestCount @skip(if: true) }",
                None,
                None,
            )),
        ),
        (
            "vary header value",
            p(gql("{ me { id } requestCount }", None, None))
                .header("authorization", "Bearer alice"),
            p(gql("{ me { id } requestCount }", None, None)).header("authorization", "Bearer bob"),
        ),
        (
            "vary header present vs absent",
            p(gql("{ users { id } v: requestCount }", None, None)).header("x-tenant", "t1"),
            p(gql("{ users { id } v: requestCount }", None, None)),
        ),
        (
            "host",
            p(gql("{ users { name } h: requestCount }", None, None)).header("host", "a.example"),
            p(gql("{ users { name } h: requestCount }", None, None)).header("host", "b.example"),
        ),
        (
            "path",
            p(gql("{ users { name } p: requestCount }", None, None)),
            p(gql("{ users { name } p: requestCount }", None, None)).path("/v2/graphql"),
        ),
        (
            "POST query string",
            p(gql("{ users { name } q: requestCount }", None, None)),
            p(gql("{ users { name } q: requestCount }", None, None)).path("/graphql?tenant=b"),
        ),
        // Not `accept-encoding`: the origin is asked for identity and Envoy's compressor encodes
        // per client (tests/http_caching.rs shows one entry serving every encoding).
    ];
    for (rule, a, b) in cases {
        assert!(
            !shares_key(&envoy, &origin, rule, a, b),
            "must not share a key: {rule}"
        );
    }
}

#[test]
fn users_with_different_credentials_get_their_own_answers() {
    let (origin, envoy) = stack("{}"); // default vary_headers: authorization, cookie
    let me = || Req::query("{ me { id name } }");
    let alice = envoy.send(me().header("authorization", "Bearer alice"));
    let bob = envoy.send(me().header("authorization", "Bearer bob"));
    assert_eq!(alice.json()["data"]["me"]["name"], "Alice");
    assert_eq!(bob.json()["data"]["me"]["name"], "Bob");
    let alice2 = envoy.send(me().header("authorization", "Bearer alice"));
    assert_eq!(alice2.cache(), "HIT");
    assert_eq!(alice2.json()["data"]["me"]["name"], "Alice");
    let anon = envoy.send(me());
    assert_eq!(anon.cache(), "MISS");
    assert!(anon.json()["data"]["me"].is_null());
    assert_eq!(origin.count(), 3);
}

#[test]
fn entries_expire_after_the_ttl() {
    let (origin, envoy) = stack(r#"{"ttl_seconds": 1}"#);
    assert_eq!(envoy.send(Req::query(Q)).cache(), "MISS");
    assert_eq!(envoy.send(Req::query(Q)).cache(), "HIT");
    std::thread::sleep(std::time::Duration::from_millis(1300));
    let again = envoy.send(Req::query(Q));
    assert_eq!(again.cache(), "MISS");
    assert_eq!(origin.count(), 2);
    assert_eq!(envoy.send(Req::query(Q)).cache(), "HIT");
}

#[test]
fn upstream_max_age_shorter_than_the_ttl_wins() {
    let (origin, envoy) = stack(r#"{"ttl_seconds": 60}"#);
    let req = || Req::query(Q).header("x-origin-header", "cache-control: public, max-age=1");
    assert_eq!(envoy.send(req()).cache(), "MISS");
    let hit = envoy.send(req());
    assert_eq!(hit.cache(), "HIT");
    assert_eq!(hit.header("cache-control"), Some("public, max-age=1"));
    std::thread::sleep(std::time::Duration::from_millis(1300));
    assert_eq!(envoy.send(req()).cache(), "MISS");
    assert_eq!(origin.count(), 2);
}

#[test]
fn ttl_zero_stores_nothing() {
    let (origin, envoy) = stack(r#"{"ttl_seconds": 0}"#);
    for _ in 0..3 {
        let r = envoy.send(Req::query(Q));
        assert_eq!((r.status, r.cache()), (200, "MISS"));
    }
    assert_eq!(origin.count(), 3);
    assert_eq!(envoy.counter("stores"), 0);
}

/// Sends `req` twice; both must reach the origin.
fn never_stored(envoy: &Envoy, origin: &Origin, req: impl Fn() -> Req, expect_cache: &str) -> Resp {
    let before = origin.count();
    let first = envoy.send(req());
    let second = envoy.send(req());
    assert_eq!(first.cache(), expect_cache, "{}", first.text());
    assert_eq!(second.cache(), expect_cache, "{}", second.text());
    assert_eq!(origin.count() - before, 2, "both reached the origin");
    second
}

#[test]
fn uncacheable_answers_are_never_stored() {
    let (origin, envoy) = stack(r#"{"debug_headers": true}"#);
    let m = never_stored(
        &envoy,
        &origin,
        || Req::query("mutation { bump }"),
        "BYPASS",
    );
    assert_eq!(m.header("x-cache-reason"), Some("mutation"));
    assert_ne!(m.json()["data"]["bump"], json!(1), "the mutation ran twice");

    let e = never_stored(
        &envoy,
        &origin,
        || Req::query("{ fail requestCount }"),
        "MISS",
    );
    assert!(e.json()["errors"].is_array());

    let s = never_stored(
        &envoy,
        &origin,
        || Req::query(Q).header("x-origin-status", "500"),
        "MISS",
    );
    assert_eq!(s.status, 500);
    assert_eq!(s.header("x-cache-reason"), Some("status"));

    for (header, reason) in [
        ("cache-control: no-store", "no-store"),
        ("cache-control: private, max-age=60", "private"),
        ("cache-control: no-cache", "no-cache"),
        ("set-cookie: session=abc", "set-cookie"),
        ("content-encoding: gzip", "content-encoding"),
        ("vary: x-unkeyed", "vary"),
    ] {
        let r = never_stored(
            &envoy,
            &origin,
            || Req::query(Q).header("x-origin-header", header),
            "MISS",
        );
        assert_eq!(r.header("x-cache-reason"), Some(reason), "{header}");
    }
    assert_eq!(envoy.counter("stores"), 0);

    // After all of that, the same query without the test headers is still cached normally.
    assert_eq!(envoy.send(Req::query(Q)).cache(), "MISS");
    assert_eq!(envoy.send(Req::query(Q)).cache(), "HIT");
}

#[test]
fn entries_over_the_size_limit_are_not_stored_and_large_answers_stream_through() {
    // One worker: what a worker remembers about a key is per worker.
    let origin = Origin::start();
    let opts = EnvoyOptions {
        concurrency: 1,
        ..EnvoyOptions::config(r#"{"max_entry_bytes": 65536}"#)
    };
    let envoy = Envoy::start(&opts, &origin);
    let small = || Req::query("{ big(size: 1000) }");
    assert_eq!(envoy.send(small()).cache(), "MISS");
    assert_eq!(envoy.send(small()).cache(), "HIT");
    let large = || Req::query("{ big(size: 100000) }");
    // The first large answer arrives by the shared fetch, too large to copy into the filter:
    // its request goes upstream itself (once more). The worker remembers, and the next request
    // for that key goes upstream alone at once.
    let before = origin.count();
    let first = envoy.send(large());
    let second = envoy.send(large());
    assert_eq!((first.cache(), second.cache()), ("MISS", "MISS"));
    assert_eq!(origin.count() - before, 3);
    assert_eq!(
        second.json()["data"]["big"].as_str().unwrap().len(),
        100_000
    );
    assert_eq!(envoy.counter("stores"), 1, "only the small one");
    // Larger than Envoy's 1 MiB buffer limit: must stream, not stall or 413.
    let huge = envoy.send(Req::query("{ big(size: 3000000) }"));
    assert_eq!(huge.status, 200);
    assert_eq!(
        huge.json()["data"]["big"].as_str().unwrap().len(),
        3_000_000
    );
}

#[test]
fn a_full_cache_keeps_what_is_asked_for_most() {
    // One worker (one frequency sketch) and no per-worker copies: every answer comes from the
    // one-entry table, and only a key asked for more often than the resident displaces it.
    let origin = Origin::start();
    let opts = EnvoyOptions {
        concurrency: 1,
        ..EnvoyOptions::config(
            r#"{"cache_slots": 1, "local_cache_bytes": 0, "debug_headers": true}"#,
        )
    };
    let envoy = Envoy::start(&opts, &origin);
    let a = || Req::query("{ a: requestCount }");
    let b = || Req::query("{ b: requestCount }");
    assert_eq!(envoy.send(a()).cache(), "MISS");
    assert_eq!(envoy.send(a()).cache(), "HIT");
    for asked in 1..=2 {
        let r = envoy.send(b());
        assert_eq!(
            (r.cache(), r.header("x-cache-reason")),
            ("MISS", Some("not-admitted")),
            "b asked {asked} times, a twice"
        );
    }
    let third = envoy.send(b());
    assert_eq!(
        (third.cache(), third.header("x-cache-reason")),
        ("MISS", None)
    );
    assert_eq!(envoy.send(b()).cache(), "HIT", "b displaced a");
    assert_eq!(envoy.send(a()).cache(), "MISS");
    assert_eq!(origin.count(), 5);
    assert_eq!(envoy.counter("evictions"), 1);
    assert_eq!(envoy.counter("admissions_rejected"), 3);
}

#[test]
fn paths_outside_the_configuration_are_left_alone() {
    let (origin, envoy) = stack(r#"{"paths": ["/graphql"]}"#);
    let other = || Req::query(Q).path("/other");
    let r = envoy.send(other());
    assert_eq!(r.header("x-cache"), None);
    envoy.send(other());
    assert_eq!(origin.count(), 2);
    assert_eq!(envoy.send(Req::query(Q)).cache(), "MISS");
    assert_eq!(envoy.send(Req::query(Q)).cache(), "HIT");
}

#[test]
fn operation_rules_set_ttl_and_turn_caching_off() {
    let config = r#"{"ttl_seconds": 60, "debug_headers": true, "rules": [
        {"operation": "Short", "ttl_seconds": 1},
        {"operation": "Never", "cache": false}]}"#;
    let (origin, envoy) = stack(config);
    let short = || Req::query("query Short { s: requestCount }");
    let long = || Req::query("query Long { l: requestCount }");
    assert_eq!(envoy.send(short()).cache(), "MISS");
    assert_eq!(envoy.send(long()).cache(), "MISS");
    assert_eq!(envoy.send(short()).cache(), "HIT");
    std::thread::sleep(std::time::Duration::from_millis(1300));
    assert_eq!(envoy.send(short()).cache(), "MISS", "the rule's 1 s TTL");
    assert_eq!(envoy.send(long()).cache(), "HIT", "the global 60 s TTL");
    let never = envoy.send(Req::query("query Never { n: requestCount }"));
    assert_eq!(never.cache(), "BYPASS");
    assert_eq!(never.header("x-cache-reason"), Some("rule-no-cache"));
    assert_eq!(origin.count(), 4);
}

#[test]
fn routes_to_different_clusters_never_share_entries() {
    // A canary route chosen by a header that is not part of the key.
    let stable = Origin::start();
    let canary = Origin::start();
    let opts = EnvoyOptions {
        extra_routes: r#"              - match: { prefix: "/", headers: [{ name: x-canary, present_match: true }] }
                route: { cluster: canary }"#
            .to_string(),
        extra_clusters: cluster_yaml("canary", canary.port),
        ..EnvoyOptions::config(r#"{"vary_headers": []}"#)
    };
    let envoy = Envoy::start(&opts, &stable);
    assert_eq!(envoy.send(Req::query(Q)).cache(), "MISS");
    assert_eq!(envoy.send(Req::query(Q)).cache(), "HIT");
    let to_canary = envoy.send(Req::query(Q).header("x-canary", "1"));
    assert_eq!(to_canary.cache(), "MISS", "the canary's answer is its own");
    assert_eq!((stable.count(), canary.count()), (1, 1));
    assert_eq!(
        envoy.send(Req::query(Q).header("x-canary", "1")).cache(),
        "HIT"
    );
}

#[test]
fn numbers_spelled_differently_are_different_requests() {
    // Read as doubles, each pair is one value; the origin may read them apart (a Decimal or a
    // big-integer scalar), so each text is its own request, and the same text hits.
    let (origin, envoy) = stack(r#"{"debug_headers": true}"#);
    let body = |n: &str| {
        format!(
            r#"{{"query":"{{ users {{ id }} requestCount }}","extensions":{{"n":{n},"l":[{n}]}}}}"#
        )
    };
    let pairs = [
        ("0.10", "0.1"),
        ("1e2", "100.0"),
        ("18446744073709551617", "18446744073709551616"),
        ("9007199254740993", "9007199254740992"),
    ];
    for (a, b) in pairs {
        let first = envoy.send(Req::post_json(&body(a)));
        assert_eq!(first.cache(), "MISS", "{a}: {}", first.text());
        let other = envoy.send(Req::post_json(&body(b)));
        assert_eq!(other.cache(), "MISS", "{b} is not {a}");
        assert_ne!(
            other.header("x-cache-key"),
            first.header("x-cache-key"),
            "{a} vs {b}"
        );
        assert_eq!(envoy.send(Req::post_json(&body(a))).cache(), "HIT", "{a}");
        assert_eq!(envoy.send(Req::post_json(&body(b))).cache(), "HIT", "{b}");
    }
    assert_eq!(origin.count(), 2 * pairs.len() as u64);
}

/// The shipped minimal configuration's access log: one line per request, with what the cache did.
#[test]
fn the_access_log_line_says_what_the_cache_did() {
    let origin = Origin::start();
    let envoy = Envoy::start_shipped("minimal.yaml", &origin);
    let query = "query Home { users { id } requestCount }";
    let miss = envoy.send(Req::query(query));
    assert_eq!(miss.cache(), "MISS");
    let key = miss.header("x-cache-key").unwrap()[..16].to_string();
    let hit = envoy.send(Req::query(query));
    assert_eq!(hit.cache(), "HIT");
    let mutation = envoy.send(Req::query(
        r#"mutation { updateUser(id: "2", name: "Robert") { id name } }"#,
    ));
    assert_eq!(mutation.cache(), "BYPASS");
    // Envoy writes access logs out on its own schedule (file_flush_interval, 10 s by default).
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(20);
    let lines = loop {
        let log = envoy.log();
        let lines: Vec<String> = log
            .lines()
            .filter(|l| l.contains("\"POST /graphql\""))
            .map(str::to_string)
            .collect();
        if lines.len() >= 3 || std::time::Instant::now() > deadline {
            break lines;
        }
        std::thread::sleep(std::time::Duration::from_millis(200));
    };
    assert_eq!(lines.len(), 3, "{lines:#?}");
    assert!(lines.iter().all(|l| l.contains("\" 200 ")), "{lines:#?}");
    assert!(
        lines[0].ends_with(&format!(
            " status=MISS reason=- miss=cold operation=Home key={key} age=- bytes=-"
        )),
        "{}",
        lines[0]
    );
    let hit_line = &lines[1];
    assert!(
        hit_line.contains(&format!(
            " status=HIT reason=- operation=Home key={key} age="
        )),
        "{hit_line}"
    );
    let bytes: usize = hit_line.rsplit("bytes=").next().unwrap().parse().unwrap();
    assert!(bytes > hit.body.len(), "{hit_line}");
    assert!(
        lines[2].ends_with(" status=BYPASS reason=mutation operation=- key=- age=- bytes=-"),
        "{}",
        lines[2]
    );
    // The shipped configuration turns the per-operation counters into tagged metrics: `Home`,
    // or `other` while it has not been asked twice on one worker (`min_requests`).
    let tagged: Vec<_> = envoy
        .prometheus("graphql_cache_op_")
        .into_iter()
        .filter(|s| matches!(s.label("graphql_operation"), Some("Home" | "other")))
        .map(|s| {
            let reason = s.label("graphql_cache_reason").map(str::to_string);
            (s.name, reason, s.value)
        })
        .collect();
    assert!(
        tagged.contains(&(
            "graphql_cache_op_misses".into(),
            Some("cold".into()),
            "1".into()
        )),
        "{tagged:?}"
    );
    assert!(
        tagged
            .iter()
            .any(|(name, reason, _)| name == "graphql_cache_op_hits" && reason.is_none()),
        "{tagged:?}"
    );
}

/// Per-operation counters in `/stats/prometheus`: one metric per counter, tagged with the
/// operation and the reason, for a mix of operations with more distinct names than `top_k`
/// (the names past it are `other`). Counts are Envoy-wide: the two workers add into one stat.
#[test]
fn per_operation_counters_match_what_was_sent() {
    let origin = Origin::start();
    let opts = EnvoyOptions {
        plugin_config: r#"{"operation_stats":{"top_k":5,"min_requests":1},
            "rules":[{"operation":"NoCache","cache":false}]}"#
            .into(),
        bootstrap_extra: OPERATION_STATS_TAGS.into(),
        ..Default::default()
    };
    let envoy = Envoy::start(&opts, &origin);
    let send = |q: &str| envoy.send(Req::query(q)).cache().to_string();
    // The first five names take the five places.
    let a: Vec<_> = (0..3).map(|_| send("query A { users { id } }")).collect();
    assert_eq!(a, ["MISS", "HIT", "HIT"]);
    assert_eq!(send("query B { users { name } }"), "MISS");
    assert_eq!(
        send(r#"mutation C { updateUser(id: "2", name: "Bo") { id } }"#),
        "BYPASS"
    );
    for _ in 0..2 {
        assert_eq!(send("query NoCache { users { id } }"), "BYPASS");
        // An answer with errors is never stored: the second request is a miss again.
        assert_eq!(send("query Errs { fail }"), "MISS");
    }
    // Past the five: `other`.
    for q in [
        "query D { users { email } }",
        "query E { users { id name } }",
    ] {
        assert_eq!(send(q), "MISS");
        assert_eq!(send(q), "HIT");
    }
    assert_eq!(send("{ users { id email } }"), "MISS");
    let bad = envoy.send(Req::post_raw("application/json", b"{nope"));
    assert_eq!(bad.cache(), "BYPASS");

    // The second `Errs` says why it missed, on whichever worker it lands: its last answer was
    // not stored (`not-stored`, not `evicted`: shared data remembers the answer's fate).
    let read = || {
        let mut got = std::collections::BTreeMap::<(String, String, String), u64>::new();
        for s in envoy.prometheus("graphql_cache_op_") {
            // The origin's time depends on the machine; checked below.
            if s.name == "graphql_cache_op_origin_ms_saved" {
                continue;
            }
            let op = s.label("graphql_operation").unwrap_or("?").to_string();
            let reason = s.label("graphql_cache_reason").unwrap_or("").to_string();
            *got.entry((s.name.clone(), op, reason)).or_default() +=
                s.value.parse::<u64>().unwrap();
        }
        got
    };
    let want: std::collections::BTreeMap<_, _> = [
        ("bypasses", "C", "mutation", 1),
        ("bypasses", "NoCache", "rule-no-cache", 2),
        ("bypasses", "unknown", "malformed-json", 1),
        ("hits", "A", "", 2),
        ("hits", "other", "", 2),
        ("misses", "A", "cold", 1),
        ("misses", "B", "cold", 1),
        ("misses", "Errs", "cold", 1),
        ("misses", "Errs", "not-stored", 1),
        ("misses", "anonymous", "cold", 1),
        ("misses", "other", "cold", 2),
        ("not_stored", "Errs", "graphql-errors", 2),
        ("stores", "A", "", 1),
        ("stores", "B", "", 1),
        ("stores", "anonymous", "", 1),
        ("stores", "other", "", 2),
    ]
    .iter()
    .map(|(c, op, r, n)| {
        let key = (
            format!("graphql_cache_op_{c}"),
            op.to_string(),
            r.to_string(),
        );
        (key, *n as u64)
    })
    .collect();
    // Each worker adds its counts to Envoy's stats on its 100 ms timer.
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(5);
    let mut got = read();
    while got != want && std::time::Instant::now() < deadline {
        std::thread::sleep(std::time::Duration::from_millis(100));
        got = read();
    }
    assert_eq!(got, want);
    // Hits saved what the origin took for their entries (a few ms here, possibly 0).
    let saved = envoy.prometheus("graphql_cache_op_origin_ms_saved");
    assert!(saved
        .iter()
        .all(|s| matches!(s.label("graphql_operation"), Some("A" | "other"))));
}
