//! An invalid configuration makes the plugin fail to load, with a log line naming the field.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

mod support;

use support::*;

#[test]
fn invalid_configurations_are_rejected_at_load_naming_the_field() {
    let origin = Origin::start();
    for (config, field) in [
        (r#"{"ttl_seconds": "ten"}"#, "ttl_seconds"),
        (r#"{"ttl_secnds": 10}"#, "ttl_secnds"),
        (
            r#"{"vary_headers": ["x-ok", "bad header"]}"#,
            "vary_headers[1]",
        ),
        (r#"{"cache_slots": 0}"#, "cache_slots"),
        (r#"{"max_query_depth": 99}"#, "max_query_depth"),
        (r#"{"ttl_seconds": 10"#, ""),
    ] {
        let opts = EnvoyOptions::config(config);
        match Envoy::try_start(&opts, origin.port) {
            Ok(envoy) => panic!("{config} was accepted:\n{}", envoy.log()),
            Err(log) => {
                let needle = if field.is_empty() {
                    "graphql-cache: invalid configuration".to_string()
                } else {
                    format!("invalid configuration field `{field}`")
                };
                assert!(
                    log.contains(&needle),
                    "{config}: no line with {needle:?} in\n{log}"
                );
            }
        }
    }
}

#[test]
fn an_empty_configuration_uses_the_defaults() {
    let origin = Origin::start();
    let envoy = Envoy::start(&EnvoyOptions::config(""), &origin);
    let q = || Req::query("{ users { id } requestCount }");
    assert_eq!(envoy.send(q()).cache(), "MISS");
    assert_eq!(envoy.send(q()).cache(), "HIT");
}

#[test]
fn without_allow_on_headers_stop_iteration_requests_are_late_but_never_hang() {
    use std::time::{Duration, Instant};
    let origin = Origin::start();
    let opts = EnvoyOptions {
        allow_on_headers_stop_iteration: false,
        concurrency: 1,
        ..EnvoyOptions::config("{}")
    };
    let envoy = Envoy::start(&opts, &origin);
    let port = envoy.port;
    // The first held POSTs are let go by the watchdog after about a second.
    let start = Instant::now();
    let held = concurrently(3, move |_| http(port, Req::query("{ users { id } }")));
    assert!(
        start.elapsed() < Duration::from_secs(5),
        "{:?}",
        start.elapsed()
    );
    for r in &held {
        assert_eq!((r.status, r.cache()), (200, "BYPASS"), "{}", r.text());
    }
    assert_eq!(origin.count(), 3, "each went upstream exactly once");
    // Three hung requests are proof enough: POSTs are no longer held, so no more delay.
    let start = Instant::now();
    let r = envoy.send(Req::query("{ users { id } }"));
    assert_eq!(r.cache(), "BYPASS");
    assert!(
        start.elapsed() < Duration::from_millis(900),
        "{:?}",
        start.elapsed()
    );
    // GETs are decided at the headers and still cached.
    let get = "/graphql?query=%7B%20users%20%7B%20id%20%7D%20%7D";
    envoy.send(Req::get(get));
    assert_eq!(envoy.send(Req::get(get)).cache(), "HIT");
    assert!(
        envoy
            .log()
            .contains("allow_on_headers_stop_iteration: true"),
        "the log says what to fix:\n{}",
        envoy.log()
    );
}
