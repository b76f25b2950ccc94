//! HTTP caching as real clients need it, in a real Envoy with two workers: stale serving
//! (while revalidating, and instead of errors), answers a browser accepts (CORS headers, `Vary:
//! Origin`), freshness from `age`/`expires`/`pragma`, conditional requests, and compression done
//! by Envoy's compressor in front of the cache.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

mod support;

use std::io::Read;
use std::net::TcpListener;
use std::time::{Duration, Instant};
use support::*;

const Q: &str = "{ users { id name } requestCount }";

fn data(r: &Resp) -> serde_json::Value {
    serde_json::from_slice(&body_of(r)).unwrap_or_else(|_| panic!("not JSON: {}", r.text()))
}

/// The body, gunzipped if the response says so.
fn body_of(r: &Resp) -> Vec<u8> {
    if r.header("content-encoding") == Some("gzip") {
        let mut out = Vec::new();
        flate2::read::GzDecoder::new(&r.body[..])
            .read_to_end(&mut out)
            .unwrap();
        out
    } else {
        r.body.clone()
    }
}

fn count(r: &Resp) -> u64 {
    data(r)["data"]["requestCount"].as_u64().unwrap()
}

fn url_encode(s: &str) -> String {
    s.bytes()
        .map(|b| match b {
            b'a'..=b'z' | b'A'..=b'Z' | b'0'..=b'9' | b'-' | b'_' | b'.' | b'~' => {
                (b as char).to_string()
            }
            _ => format!("%{b:02X}"),
        })
        .collect()
}

fn get(q: &str) -> Req {
    Req::get(&format!("/graphql?query={}", url_encode(q)))
}

// ---- stale-while-revalidate ------------------------------------------------------------------

#[test]
fn stale_while_revalidate_answers_at_once_and_refreshes_once() {
    let origin = Origin::start_with(&["--delay-ms", "400"]);
    let config =
        r#"{"ttl_seconds": 1, "stale_while_revalidate_seconds": 10, "debug_headers": true}"#;
    let envoy = Envoy::start(&EnvoyOptions::config(config), &origin);
    let first = envoy.send(Req::query(Q));
    assert_eq!(first.cache(), "MISS");
    std::thread::sleep(Duration::from_millis(1100));
    // Expired: twenty clients at once, on both workers, are answered from the stale entry without
    // waiting for the slow origin, and the origin is asked once.
    let port = envoy.port;
    let started = Instant::now();
    let stale = concurrently(20, move |_| http(port, Req::query(Q)));
    let took = started.elapsed();
    for r in &stale {
        assert_eq!(r.cache(), "STALE", "{:?}", r.headers);
        assert_eq!(r.body, first.body);
        let age: u64 = r.header("age").unwrap().parse().unwrap();
        assert!(age >= 1, "age counts from the origin's answer");
    }
    assert!(
        took < Duration::from_millis(350),
        "answered at once: {took:?}"
    );
    std::thread::sleep(Duration::from_millis(600));
    assert_eq!(origin.count(), 2, "exactly one refresh for the whole Envoy");
    assert_eq!(envoy.counter("refreshes"), 1);
    let fresh = envoy.send(Req::query(Q));
    assert_eq!(
        fresh.cache(),
        "HIT",
        "the refreshed answer replaced the entry"
    );
    assert_eq!(count(&fresh), count(&first) + 1);
    let per_worker = envoy.worker_connections();
    assert!(per_worker.iter().all(|&n| n > 0), "{per_worker:?}");
}

// ---- stale-if-error --------------------------------------------------------------------------

fn sie_stack(window: u64) -> (Origin, Envoy, Resp) {
    let origin = Origin::start();
    let config = format!(
        r#"{{"ttl_seconds": 1, "stale_if_error_seconds": {window}, "debug_headers": true, "fetch_timeout_ms": 500}}"#
    );
    let envoy = Envoy::start(&EnvoyOptions::config(&config), &origin);
    let first = envoy.send(Req::query(Q));
    assert_eq!(first.cache(), "MISS");
    std::thread::sleep(Duration::from_millis(1100));
    (origin, envoy, first)
}

fn assert_stale(r: &Resp, first: &Resp) {
    assert_eq!((r.status, r.cache()), (200, "STALE"), "{}", r.text());
    assert_eq!(r.body, first.body);
}

#[test]
fn stale_if_error_on_a_5xx_then_not_after_the_window() {
    let (_origin, envoy, first) = sie_stack(2);
    let failing = || Req::query(Q).header("x-origin-status", "500");
    assert_stale(&envoy.send(failing()), &first);
    assert_eq!(envoy.counter("stale_served"), 1);
    std::thread::sleep(Duration::from_millis(2100));
    let after = envoy.send(failing());
    assert_eq!(
        after.status, 500,
        "past the window the origin's answer passes"
    );
    assert_eq!(after.cache(), "MISS");
}

#[test]
fn stale_if_error_on_a_reset_and_on_a_dead_origin() {
    let (origin, envoy, first) = sie_stack(30);
    // The origin's port now accepts and drops every connection: a reset.
    let port = origin.port;
    drop(origin);
    let dropper = TcpListener::bind(("127.0.0.1", port)).unwrap();
    let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
    let stop2 = stop.clone();
    dropper.set_nonblocking(true).unwrap();
    let t = std::thread::spawn(move || {
        while !stop2.load(std::sync::atomic::Ordering::Relaxed) {
            if let Ok((conn, _)) = dropper.accept() {
                drop(conn);
            }
            std::thread::sleep(Duration::from_millis(5));
        }
    });
    assert_stale(&envoy.send(Req::query(Q)), &first);
    stop.store(true, std::sync::atomic::Ordering::Relaxed);
    t.join().unwrap();
    // Nothing listens any more: connection refused.
    std::thread::sleep(Duration::from_millis(50));
    let started = Instant::now();
    assert_stale(&envoy.send(Req::query(Q)), &first);
    assert!(
        started.elapsed() < Duration::from_millis(450),
        "no wait for a timeout"
    );
}

#[test]
fn must_revalidate_turns_stale_serving_off() {
    let origin = Origin::start();
    let config = r#"{"ttl_seconds": 10, "stale_if_error_seconds": 30, "stale_while_revalidate_seconds": 30}"#;
    let envoy = Envoy::start(&EnvoyOptions::config(config), &origin);
    let strict = |status: Option<&str>| {
        let r = Req::query(Q).header(
            "x-origin-header",
            "cache-control: max-age=1, must-revalidate",
        );
        match status {
            Some(s) => r.header("x-origin-status", s),
            None => r,
        }
    };
    assert_eq!(envoy.send(strict(None)).cache(), "MISS");
    assert_eq!(envoy.send(strict(None)).cache(), "HIT");
    std::thread::sleep(Duration::from_millis(1100));
    let failed = envoy.send(strict(Some("500")));
    assert_eq!(
        (failed.status, failed.cache()),
        (500, "MISS"),
        "no stale answer"
    );
}

// ---- answers a browser accepts ---------------------------------------------------------------

#[test]
fn a_cors_origin_s_headers_are_on_hits_and_vary_origin_is_stored_per_origin() {
    let origin = Origin::start();
    let config = r#"{"vary_headers": ["authorization", "cookie", "origin"]}"#;
    let envoy = Envoy::start(&EnvoyOptions::config(config), &origin);
    let cors = |site: &str| {
        Req::query(Q)
            .header("origin", site)
            .header(
                "x-origin-header",
                &format!("access-control-allow-origin: {site}"),
            )
            .header("x-origin-header", "vary: Origin")
    };
    let miss = envoy.send(cors("https://a.example"));
    let hit = envoy.send(cors("https://a.example"));
    assert_eq!((miss.cache(), hit.cache()), ("MISS", "HIT"));
    for r in [&miss, &hit] {
        assert_eq!(
            r.header("access-control-allow-origin"),
            Some("https://a.example")
        );
        assert_eq!(r.header("vary"), Some("Origin"));
    }
    let other = envoy.send(cors("https://b.example"));
    assert_eq!(other.cache(), "MISS", "another origin, another entry");
    assert_eq!(
        other.header("access-control-allow-origin"),
        Some("https://b.example")
    );
    assert_eq!(
        envoy.send(cors("https://b.example")).cache(),
        "HIT",
        "stored per origin"
    );
    // Vary on a header the key does not hold stays unstored.
    let tenant = || Req::query(Q).header("x-origin-header", "vary: x-tenant");
    assert_eq!(envoy.send(tenant()).cache(), "MISS");
    assert_eq!(envoy.send(tenant()).cache(), "MISS");
}

#[test]
fn hits_and_misses_differ_only_in_x_cache_and_age() {
    let (_origin, envoy) = stack(r#"{"debug_headers": false}"#);
    let q = Req::query(Q)
        .header("x-origin-header", "etag: \"v1\"")
        .header("x-origin-header", "x-served-by: origin-1");
    let miss = envoy.send(q.clone());
    let hit = envoy.send(q);
    let names = |r: &Resp| {
        let mut n: Vec<String> = r
            .headers
            .iter()
            .map(|(n, _)| n.clone())
            .filter(|n| !matches!(n.as_str(), "date" | "server" | "connection" | "age"))
            .filter(|n| !n.starts_with("x-envoy"))
            .collect();
        n.sort();
        n
    };
    assert_eq!(names(&miss), names(&hit));
    assert_eq!(hit.header("x-served-by"), Some("origin-1"));
    assert_eq!(hit.header("etag"), Some("\"v1\""));
}

// ---- freshness -------------------------------------------------------------------------------

#[test]
fn upstream_age_expires_and_pragma_shape_freshness() {
    let (_origin, envoy) = stack(r#"{"ttl_seconds": 60, "debug_headers": true}"#);
    let aged = || {
        Req::query("{ users { id } requestCount }")
            .header("x-origin-header", "cache-control: max-age=60")
            .header("x-origin-header", "age: 58")
    };
    assert_eq!(envoy.send(aged()).cache(), "MISS");
    let hit = envoy.send(aged());
    assert_eq!(hit.cache(), "HIT");
    let age: u64 = hit.header("age").unwrap().parse().unwrap();
    assert!(
        (58..60).contains(&age),
        "the hit's age includes the upstream age: {age}"
    );
    std::thread::sleep(Duration::from_millis(2100));
    assert_eq!(
        envoy.send(aged()).cache(),
        "MISS",
        "fresh for 60 - 58 s only"
    );

    for header in ["expires: 0", "pragma: no-cache"] {
        let q = || Req::query("{ posts { id } requestCount }").header("x-origin-header", header);
        let first = envoy.send(q());
        assert_eq!(first.cache(), "MISS");
        assert!(first.header("x-cache-reason").is_some(), "{header}");
        assert_eq!(envoy.send(q()).cache(), "MISS", "{header}: not stored");
    }
}

// ---- conditional requests --------------------------------------------------------------------

#[test]
fn a_conditional_get_is_answered_for_its_own_validators() {
    let (origin, envoy) = stack("{}");
    let q = "{ user(id: 1) { id name } }";
    let plain = || get(q).header("x-origin-header", "etag: \"v1\"");
    let first = envoy.send(plain());
    assert_eq!((first.status, first.cache()), (200, "MISS"));
    let not_modified = envoy.send(plain().header("if-none-match", "\"v1\""));
    assert_eq!((not_modified.status, not_modified.cache()), (304, "HIT"));
    assert!(not_modified.body.is_empty());
    assert_eq!(not_modified.header("etag"), Some("\"v1\""));
    let changed = envoy.send(plain().header("if-none-match", "\"v0\""));
    assert_eq!((changed.status, changed.cache()), (200, "HIT"));
    assert_eq!(changed.body, first.body);
    assert_eq!(origin.count(), 1);
}

#[test]
fn a_plain_get_never_gets_another_request_s_304() {
    let origin = Origin::start_with(&["--delay-ms", "300"]);
    let envoy = Envoy::start(&EnvoyOptions::config("{}"), &origin);
    let q = "{ user(id: 2) { id name } }";
    let port = envoy.port;
    // A conditional GET whose origin answers 304, and a plain GET of the same query at once.
    let conditional = std::thread::spawn(move || {
        http(
            port,
            get(q)
                .header("if-none-match", "\"v1\"")
                .header("x-origin-status", "304"),
        )
    });
    std::thread::sleep(Duration::from_millis(50));
    let plain = envoy.send(get(q));
    let conditional = conditional.join().unwrap();
    assert_eq!(conditional.status, 304);
    assert_eq!(plain.status, 200, "{}", plain.text());
    assert!(!plain.body.is_empty());
    let again = envoy.send(get(q));
    assert_eq!(
        (again.status, again.cache()),
        (200, "HIT"),
        "a 304 is never stored"
    );
    assert_eq!(envoy.counter("coalesced"), 0);
}

// ---- compression -----------------------------------------------------------------------------

const COMPRESSOR: &str = r#"
          - name: envoy.filters.http.compressor
            typed_config:
              "@type": type.googleapis.com/envoy.extensions.filters.http.compressor.v3.Compressor
              response_direction_config:
                common_config:
                  min_content_length: 30
                  content_type: [application/json, application/graphql-response+json]
              compressor_library:
                name: gzip
                typed_config:
                  "@type": type.googleapis.com/envoy.extensions.compression.gzip.compressor.v3.Gzip"#;

fn compressing(origin_args: &[&str]) -> (Origin, Envoy) {
    let origin = Origin::start_with(origin_args);
    let opts = EnvoyOptions {
        plugin_config: r#"{"debug_headers": true}"#.into(),
        filters_before: COMPRESSOR.into(),
        ..Default::default()
    };
    let envoy = Envoy::start(&opts, &origin);
    (origin, envoy)
}

const BROWSER: &str = "gzip, deflate, br, zstd";

#[test]
fn one_entry_for_every_accept_encoding_compressed_by_envoy() {
    for origin_args in [&[][..], &["--gzip"][..]] {
        let (origin, envoy) = compressing(origin_args);
        let q = "{ users { id name email } requestCount headerValue(name: \"accept-encoding\") }";
        let browser = envoy.send(Req::query(q).header("accept-encoding", BROWSER));
        assert_eq!(
            browser.cache(),
            "MISS",
            "{origin_args:?}: {}",
            browser.text()
        );
        assert_eq!(browser.header("content-encoding"), Some("gzip"));
        let answer = data(&browser);
        assert_eq!(
            answer["data"]["headerValue"], "identity",
            "the origin is asked for identity"
        );
        let curl = envoy.send(Req::query(q));
        assert_eq!(curl.cache(), "HIT", "{origin_args:?}");
        assert_eq!(curl.header("content-encoding"), None);
        assert_eq!(data(&curl), answer);
        let browser_hit = envoy.send(Req::query(q).header("accept-encoding", "br, gzip"));
        assert_eq!(browser_hit.cache(), "HIT");
        assert_eq!(browser_hit.header("content-encoding"), Some("gzip"));
        assert_eq!(data(&browser_hit), answer);
        assert_eq!(
            origin.count(),
            1,
            "{origin_args:?}: one origin fetch, one entry"
        );
    }
}

// ---- shadow mode -----------------------------------------------------------------------------

#[test]
fn shadow_mode_forwards_everything_unchanged_and_counts_would_be_hits() {
    let (origin, envoy) = stack(r#"{"mode": "shadow"}"#);
    let stable = "{ users { id name } }";
    let direct = http(origin.port, Req::query(stable));
    for _ in 0..3 {
        let r = envoy.send(Req::query(stable));
        assert_eq!(r.status, 200);
        assert_eq!(r.body, direct.body, "byte-identical to the origin's answer");
        assert_eq!(r.header("x-cache"), None, "no header without debug_headers");
    }
    assert_eq!(origin.count(), 4, "every request reached the origin");
    assert_eq!(envoy.counter("shadow_misses"), 1);
    assert_eq!(envoy.counter("shadow_hits"), 2);
    assert_eq!(envoy.counter("shadow_mismatches"), 0);
    // An answer that changes on every request: a would-be hit that would have been wrong.
    envoy.send(Req::query(Q));
    envoy.send(Req::query(Q));
    assert_eq!(envoy.counter("shadow_mismatches"), 1);
    assert_eq!(envoy.counter("hits"), 0);
    let bypass = envoy.send(Req::query("mutation { bump }"));
    assert_eq!(bypass.header("x-cache"), None);
}
