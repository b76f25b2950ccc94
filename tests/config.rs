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
