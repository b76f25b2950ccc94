//! `Config::parse` end to end: every field read, every refusal naming its field.

use super::*;

#[test]
fn empty_config_gives_defaults() {
    assert_eq!(Config::parse(b"").unwrap(), Config::default());
    assert_eq!(Config::parse(b"  ").unwrap(), Config::default());
    assert_eq!(Config::parse(b"{}").unwrap(), Config::default());
}

#[test]
fn fields_are_read() {
    let c = Config::parse(
        br#"{"ttl_seconds":5,"paths":["/graphql"],"vary_headers":["X-Tenant","authorization"],
            "max_body_bytes":2048,"max_query_depth":10,"max_query_fields":7,"cache_slots":16,"max_entry_bytes":4096,
            "debug_headers":true,"coalesce":false,"flight_slots":8,"fetch_timeout_ms":500,
            "max_wait_ms":700,"max_waiters":3,"upstream_cluster":"origin"}"#,
    )
    .unwrap();
    assert_eq!(c.ttl_seconds, 5);
    assert_eq!(c.paths, vec!["/graphql"]);
    assert_eq!(c.vary_headers, vec!["authorization", "x-tenant"]);
    assert_eq!(c.max_body_bytes, 2048);
    assert_eq!(c.max_query_depth, 10);
    assert_eq!(c.max_query_fields, 7);
    assert_eq!(c.cache_slots, 16);
    assert_eq!(c.max_entry_bytes, 4096);
    assert!(c.debug_headers);
    assert!(!c.coalesce);
    assert_eq!(c.flight_slots, 8);
    assert_eq!(c.fetch_timeout_ms, 500);
    assert_eq!(c.max_wait_ms, 700);
    assert_eq!(c.max_waiters, 3);
    assert_eq!(c.upstream_cluster.as_deref(), Some("origin"));
    assert_eq!(c.cache_bound_bytes(), 16 * 4096);
    assert!(c.handles_path("/graphql"));
    assert!(!c.handles_path("/other"));
}

fn err(json: &str) -> ConfigError {
    Config::parse(json.as_bytes()).unwrap_err()
}

/// Each configuration is refused with its error naming that field.
fn assert_fields(cases: &[(&str, &str)]) {
    for (json, field) in cases {
        assert_eq!(err(json).field, *field, "{json}");
    }
}

#[test]
fn invalidation_fields() {
    let c = Config::parse(
        br#"{"purge_path":"/graphql-cache/purge","purge_token":"0123456789abcdef",
            "mutation_invalidation":"type","tag_slots":128,"key_fields":{"Post":["slug"]}}"#,
    )
    .unwrap();
    assert_eq!(
        c.purge,
        Some(PurgeApi {
            path: "/graphql-cache/purge".into(),
            explain_path: "/graphql-cache/explain".into(),
            what_if_path: "/graphql-cache/what-if".into(),
            token: Secret::new("0123456789abcdef".into())
        })
    );
    assert_eq!(c.mutation_invalidation, MutationInvalidation::Type);
    assert_eq!(c.tag_slots, 128);
    assert_eq!(c.key_fields.by_type["Post"], vec!["slug"]);
    assert_eq!(c.key_fields.default, vec!["id"]);
    assert!(c.invalidation_on());
    let off = Config::parse(br#"{"mutation_invalidation":"off"}"#).unwrap();
    assert!(!off.invalidation_on());
    assert!(
        Config::default().invalidation_on(),
        "mutations purge by default"
    );
    assert_eq!(err(r#"{"purge_path":"/p"}"#).field, "purge_token");
    assert_eq!(
        err(r#"{"purge_path":"/p","purge_token":"short"}"#).field,
        "purge_token"
    );
    assert_eq!(
        err(r#"{"purge_path":"p","purge_token":"0123456789abcdef"}"#).field,
        "purge_path"
    );
    assert_eq!(
        err(r#"{"purge_token":"0123456789abcdef"}"#).field,
        "purge_token"
    );
    assert_eq!(
        err(r#"{"mutation_invalidation":"all"}"#).field,
        "mutation_invalidation"
    );
    assert_eq!(err(r#"{"tag_slots":0}"#).field, "tag_slots");
    assert_eq!(
        err(r#"{"miss_reason_keys":2000000}"#).field,
        "miss_reason_keys"
    );
    let m = Config::parse(
        br#"{"mutation_tags_from":["header:X-Tags","extensions:tags"],
            "mutation_purges_per_second":5,"mutation_purge_burst":7}"#,
    )
    .unwrap()
    .mutation_purges;
    assert_eq!(
        m.tags_from,
        vec![
            TagSource::Header("x-tags".into()),
            TagSource::Extensions("tags".into())
        ]
    );
    assert_eq!((m.per_second, m.burst), (5, 7));
    assert_fields(&[
        (
            r#"{"mutation_tags_from":["header:ok","body:x"]}"#,
            "mutation_tags_from[1]",
        ),
        (r#"{"mutation_tags_from":"header:x"}"#, "mutation_tags_from"),
        (
            r#"{"mutation_purges_per_second":0}"#,
            "mutation_purges_per_second",
        ),
        (r#"{"mutation_purge_burst":0}"#, "mutation_purge_burst"),
    ]);
    assert_eq!(
        err(r#"{"key_fields":{"User":[]}}"#).field,
        "key_fields.User"
    );
}

#[test]
fn errors_name_the_field() {
    assert_fields(&[
        (r#"{"ttl_seconds":"ten"}"#, "ttl_seconds"),
        (r#"{"ttl_seconds":-1}"#, "ttl_seconds"),
        (r#"{"ttl_secons":1}"#, "ttl_secons"),
        (r#"{"vary_headers":["ok","bad header"]}"#, "vary_headers[1]"),
        (r#"{"vary_headers":[":authority"]}"#, "vary_headers[0]"),
        (r#"{"vary_headers":[1]}"#, "vary_headers[0]"),
        (r#"{"cache_slots":0}"#, "cache_slots"),
        (r#"{"max_entry_bytes":10}"#, "max_entry_bytes"),
        (r#"{"max_body_bytes":0}"#, "max_body_bytes"),
        (r#"{"max_query_depth":51}"#, "max_query_depth"),
        (r#"{"paths":["graphql"]}"#, "paths[0]"),
        (r#"{"max_query_fields":0}"#, "max_query_fields"),
        (r#"{"flight_slots":0}"#, "flight_slots"),
        (r#"{"fetch_timeout_ms":0}"#, "fetch_timeout_ms"),
        (r#"{"max_wait_ms":-5}"#, "max_wait_ms"),
        (r#"{"max_waiters":0}"#, "max_waiters"),
        (r#"{"upstream_cluster":" "}"#, "upstream_cluster"),
        (r#"{"coalesce":1}"#, "coalesce"),
        (r#"{"key_memo_entries":100000}"#, "key_memo_entries"),
        (r#"{"debug_headers":"yes"}"#, "debug_headers"),
        (r#"{"access_log":1}"#, "access_log"),
        (r#"{"cache_bytes":1000}"#, "cache_bytes"),
        (r#"{"cache_slots":99999999}"#, "cache_slots"),
        (
            r#"{"cache_bytes":65536,"max_entry_bytes":131072}"#,
            "max_entry_bytes",
        ),
    ]);
}

#[test]
fn the_cache_is_sized_in_bytes_and_the_rest_follows() {
    let c = Config::parse(br#"{"cache_bytes":8388608}"#).unwrap();
    // One slot per 512 bytes of budget, and copies of a 1024th of it per worker.
    assert_eq!((c.cache_bytes, c.cache_slots), (8 << 20, 16_384));
    assert_eq!(c.local_cache_bytes, 8 << 10);
    let d = Config::parse(b"{}").unwrap();
    assert_eq!((d.cache_bytes, d.cache_slots), (64 << 20, 131_072));
    assert_eq!(d.local_cache_bytes, 64 << 10);
    assert_eq!(d, Config::default());
    // An older configuration that gives only the slots keeps its meaning: entries at most.
    let old = Config::parse(br#"{"cache_slots":2048}"#).unwrap();
    assert_eq!((old.cache_bytes, old.cache_slots), (64 << 20, 2048));
    // Entity mode stores single objects: one slot per 256 bytes, unless the slots are given.
    let e = Config::parse(br#"{"cache_bytes":8388608,"entities":{"ttl_seconds":60}}"#).unwrap();
    assert_eq!(e.cache_slots, 32_768);
    let given = Config::parse(br#"{"cache_slots":4096,"entities":{"ttl_seconds":60}}"#).unwrap();
    assert_eq!(given.cache_slots, 4096);
}

#[test]
fn identity_rules_and_routes() {
    let c = Config::parse(
        br#"{"identity":{"source":"jwt"},"rules":[{"operation":"Products","ttl_seconds":60},
            {"field":"me","scope":"private"},{"operation":"Admin","cache":false}],"route_metadata":""}"#,
    )
    .unwrap();
    assert_eq!(
        c.identity,
        Some(IdentitySource::JwtClaim {
            payload_key: "jwt_payload".into(),
            claim: "sub".into()
        })
    );
    assert_eq!(c.default_scope, Scope::Private);
    assert_eq!(c.rules.len(), 3);
    assert_eq!(c.rules[1].scope, Some(Scope::Private));
    assert_eq!(c.route_metadata, None);
    let h = Config::parse(
        br#"{"identity":{"source":"header","header":"X-User"},"default_scope":"public"}"#,
    )
    .unwrap();
    assert_eq!(h.identity, Some(IdentitySource::Header("x-user".into())));
    assert_eq!(h.default_scope, Scope::Public);
    assert_eq!(Config::default().route_metadata, None);
    let r = Config::parse(br#"{"route_metadata":"my_ns"}"#).unwrap();
    assert_eq!(r.route_metadata.as_deref(), Some("my_ns"));
}

#[test]
fn identity_and_rule_errors_name_the_field() {
    assert_fields(&[
        (r#"{"identity":{"source":"cookie"}}"#, "identity.source"),
        (r#"{"identity":{"source":"header"}}"#, "identity.header"),
        (
            r#"{"identity":{"source":"jwt","header":"x"}}"#,
            "identity.header",
        ),
        (
            r#"{"identity":{"source":"jwt","claim":""}}"#,
            "identity.claim",
        ),
        (
            r#"{"identity":{"source":"jwt","clam":"sub"}}"#,
            "identity.clam",
        ),
        (r#"{"default_scope":"shared"}"#, "default_scope"),
        (
            r#"{"rules":[{"operation":"A"},{"field":"me","scope":"mine"}]}"#,
            "rules[1].scope",
        ),
        (r#"{"rules":[{"ttl_seconds":5}]}"#, "rules[0]"),
        (r#"{"rules":[{"operation":"A","field":"b"}]}"#, "rules[0]"),
        (
            r#"{"rules":[{"operation":"A","ttl_seconds":99999999999}]}"#,
            "rules[0].ttl_seconds",
        ),
        (
            r#"{"rules":[{"operation":"A","cache":"no"}]}"#,
            "rules[0].cache",
        ),
    ]);
}

#[test]
fn malformed_json_is_rejected() {
    assert!(Config::parse(b"{").is_err());
    assert!(Config::parse(b"[]").is_err());
    assert!(Config::parse(b"{} x").is_err());
    assert!(Config::parse(&[0xff, 0xfe]).is_err());
}

#[test]
fn display_names_field() {
    let e = err(r#"{"ttl_seconds":"ten"}"#);
    assert!(e.to_string().contains("`ttl_seconds`"), "{e}");
}

#[test]
fn l2_is_optional_and_checked_field_by_field() {
    assert_eq!(Config::default().l2, None);
    let c = Config::parse(br#"{"l2":{"cluster":"graphql_cache_l2","fleet_key":"fleet-key-for-tests-0123456789abcdef"}}"#).unwrap();
    let l2 = c.l2.unwrap();
    assert_eq!(
        l2.wait_cluster, "graphql_cache_l2",
        "long-polls default to the same cluster"
    );
    assert_eq!((l2.timeout_ms, l2.wait_ms), (50, 2000));
    assert_eq!(l2.authority, "graphql-cache-l2");
    assert_eq!(l2.budget_ms(), 2 * 50 + 2000);
    assert_fields(&[
        (r#"{"l2":{}}"#, "l2.cluster"),
        (r#"{"l2":{"cluster":""}}"#, "l2.cluster"),
        (
            r#"{"l2":{"cluster":"a","wait_cluster":"b c"}}"#,
            "l2.wait_cluster",
        ),
        (r#"{"l2":{"cluster":"a","timeout_ms":0}}"#, "l2.timeout_ms"),
        (r#"{"l2":{"cluster":"a","wait_ms":600000}}"#, "l2.wait_ms"),
        (r#"{"l2":{"cluster":"a","authority":""}}"#, "l2.authority"),
        (r#"{"l2":{"cluster":"a","redis":"x"}}"#, "l2.redis"),
        (
            r#"{"coalesce":false,"l2":{"cluster":"a","fleet_key":"fleet-key-for-tests-0123456789abcdef"}}"#,
            "l2",
        ),
        (r#"{"l2":{"cluster":"a"}}"#, "l2.fleet_key"),
        (
            r#"{"l2":{"cluster":"a","fleet_key":"short"}}"#,
            "l2.fleet_key",
        ),
        (
            r#"{"l2":{"cluster":"a","fleet_key":"fleet-key-for-tests-0123456789abcdef","secret":"short"}}"#,
            "l2.secret",
        ),
        (
            r#"{"l2":{"cluster":"a","fleet_key":"fleet-key-for-tests-0123456789abcdef","purge_skew_ms":600000}}"#,
            "l2.purge_skew_ms",
        ),
    ]);
}

#[test]
fn secrets_come_from_the_vm_environment_and_are_never_shown() {
    let env = |name: &str| match name {
        "FLEET" => Some("fleet-key-from-the-environment-0123456789".to_string()),
        "L2" => Some("l2-secret-0123456789".to_string()),
        "PURGE" => Some("purge-token-0123456789".to_string()),
        _ => None,
    };
    let c = Config::parse_with_env(
        br#"{"purge_path":"/p","purge_token_env":"PURGE",
             "l2":{"cluster":"a","fleet_key_env":"FLEET","secret_env":"L2"}}"#,
        &env,
    )
    .unwrap();
    let l2 = c.l2.as_ref().unwrap();
    assert_eq!(l2.secret.as_ref().unwrap().expose(), "l2-secret-0123456789");
    assert_eq!(
        l2.fleet_key,
        FleetKey::new(b"fleet-key-from-the-environment-0123456789").unwrap()
    );
    assert_eq!(
        c.purge.as_ref().unwrap().token.expose(),
        "purge-token-0123456789"
    );
    let shown = format!("{c:?}");
    for secret in ["l2-secret", "fleet-key-from", "purge-token"] {
        assert!(!shown.contains(secret), "{secret} in {shown}");
    }
    let field = |json: &str| Config::parse_with_env(json.as_bytes(), &env).unwrap_err();
    let missing = field(r#"{"l2":{"cluster":"a","fleet_key_env":"NOPE"}}"#);
    assert_eq!(missing.field, "l2.fleet_key_env");
    assert!(missing.problem.contains("host_env_keys"), "{missing}");
    let both =
        field(r#"{"purge_path":"/p","purge_token":"0123456789abcdef","purge_token_env":"PURGE"}"#);
    assert_eq!(both.field, "purge_token_env");
    let short = field(r#"{"l2":{"cluster":"a","fleet_key_env":"L2"}}"#);
    assert_eq!(short.field, "l2.fleet_key");
    assert!(!short.to_string().contains("l2-secret"), "{short}");
}

#[test]
fn fleet_keys_rotate_the_first_signs_and_any_is_accepted() {
    let env = |name: &str| {
        (name == "KEYS").then(|| {
            "new-fleet-key-0123456789abcdef0123, old-fleet-key-0123456789abcdef0123".to_string()
        })
    };
    let c =
        Config::parse_with_env(br#"{"l2":{"cluster":"a","fleet_keys_env":"KEYS"}}"#, &env).unwrap();
    let expected = FleetKey::rotating(&[
        b"new-fleet-key-0123456789abcdef0123",
        b"old-fleet-key-0123456789abcdef0123",
    ])
    .unwrap();
    assert_eq!(c.l2.unwrap().fleet_key, expected);
    let listed = Config::parse(
        br#"{"l2":{"cluster":"a","fleet_keys":["new-fleet-key-0123456789abcdef0123","old-fleet-key-0123456789abcdef0123"]}}"#,
    )
    .unwrap();
    assert_eq!(listed.l2.unwrap().fleet_key, expected);
    let field = |json: &str| {
        Config::parse_with_env(json.as_bytes(), &env)
            .unwrap_err()
            .field
    };
    assert_eq!(
        field(
            r#"{"l2":{"cluster":"a","fleet_keys":["new-fleet-key-0123456789abcdef0123","short"]}}"#
        ),
        "l2.fleet_keys"
    );
    assert_eq!(
        field(
            r#"{"l2":{"cluster":"a","fleet_key":"new-fleet-key-0123456789abcdef0123","fleet_keys_env":"KEYS"}}"#
        ),
        "l2.fleet_keys"
    );
}

#[test]
fn forward_headers_are_read_and_checked() {
    let d = Config::default();
    assert_eq!(
        d.forward_headers,
        vec!["traceparent", "tracestate", "user-agent", "x-request-id"]
    );
    let c = Config::parse(br#"{"forward_headers":["X-Trace","x-trace","baggage"]}"#).unwrap();
    assert_eq!(c.forward_headers, vec!["baggage", "x-trace"]);
    let none = Config::parse(br#"{"forward_headers":[]}"#).unwrap();
    assert!(none.forward_headers.is_empty());
    assert_fields(&[
        (
            r#"{"forward_headers":["ok","bad header"]}"#,
            "forward_headers[1]",
        ),
        (r#"{"forward_headers":[":path"]}"#, "forward_headers[0]"),
        (r#"{"forward_headers":"user-agent"}"#, "forward_headers"),
        (
            r#"{"forward_headers":["a","Connection"]}"#,
            "forward_headers[1]",
        ),
        (
            r#"{"forward_headers":["accept-encoding"]}"#,
            "forward_headers[0]",
        ),
        (
            r#"{"forward_headers":["if-none-match"]}"#,
            "forward_headers[0]",
        ),
        (
            r#"{"forward_headers":["content-length"]}"#,
            "forward_headers[0]",
        ),
    ]);
}

#[test]
fn cdn_tags_names_and_limits() {
    let c = Config::parse(br#"{"cdn_tags":{"headers":["Surrogate-Key","Cache-Tag"]}}"#)
        .unwrap()
        .cdn_tags
        .unwrap();
    let seps: Vec<(&str, char)> = c
        .headers
        .iter()
        .map(|h| (h.name.as_str(), h.separator))
        .collect();
    assert_eq!(seps, vec![("cache-tag", ','), ("surrogate-key", ' ')]);
    assert_eq!((c.max_tag_bytes, c.max_header_bytes), (1024, 16384));
    let c = Config::parse(br#"{"cdn_tags":{}}"#)
        .unwrap()
        .cdn_tags
        .unwrap();
    assert_eq!(c.headers[0].name, "surrogate-key");
    assert_eq!(Config::parse(b"{}").unwrap().cdn_tags, None);
    for (bad, field) in [
        (r#"{"cdn_tags":{"headers":[]}}"#, "cdn_tags.headers"),
        (
            r#"{"cdn_tags":{"headers":["x-cache"]}}"#,
            "cdn_tags.headers",
        ),
        (
            r#"{"cdn_tags":{"headers":["content-length"]}}"#,
            "cdn_tags.headers",
        ),
        (r#"{"cdn_tags":{"headers":["a b"]}}"#, "cdn_tags.headers"),
        (
            r#"{"cdn_tags":{"max_tag_bytes":0}}"#,
            "cdn_tags.max_tag_bytes",
        ),
        (
            r#"{"cdn_tags":{"max_header_bytes":100000}}"#,
            "cdn_tags.max_header_bytes",
        ),
        (r#"{"cdn_tags":{"header":"x"}}"#, "cdn_tags"),
    ] {
        let e = Config::parse(bad.as_bytes()).unwrap_err();
        assert!(e.to_string().contains(field), "{bad}: {e}");
    }
}

#[test]
fn operation_stats_bounds() {
    let on = Config::parse(b"{}").unwrap().operation_stats;
    assert_eq!((on.top_k, on.min_requests), (50, 2));
    let c = Config::parse(br#"{"operation_stats":{"top_k":0}}"#).unwrap();
    assert!(!c.operation_stats.on());
    let c = Config::parse(br#"{"operation_stats":{"top_k":7,"min_requests":1}}"#).unwrap();
    assert_eq!(
        (c.operation_stats.top_k, c.operation_stats.min_requests),
        (7, 1)
    );
    assert_fields(&[
        (
            r#"{"operation_stats":{"top_k":1001}}"#,
            "operation_stats.top_k",
        ),
        (
            r#"{"operation_stats":{"min_requests":0}}"#,
            "operation_stats.min_requests",
        ),
    ]);
    let e = err(r#"{"operation_stats":{"k":3}}"#);
    assert!(e.to_string().contains("operation_stats"), "{e}");
}

#[test]
fn the_explain_path_sits_beside_the_purge_path_unless_given() {
    let token = r#""purge_token":"0123456789abcdef""#;
    let explain_path = |extra: &str| {
        let json = format!(r#"{{{token},{extra}}}"#);
        Config::parse(json.as_bytes()).map(|c| c.purge.unwrap().explain_path)
    };
    assert_eq!(
        explain_path(r#""purge_path":"/purge""#).unwrap(),
        "/explain"
    );
    assert_eq!(
        explain_path(r#""purge_path":"/admin/purge","explain_path":"/admin/why""#).unwrap(),
        "/admin/why"
    );
    for bad in [
        r#""purge_path":"/p","explain_path":"/p""#,
        r#""purge_path":"/p","explain_path":"why""#,
    ] {
        assert_eq!(
            explain_path(bad).unwrap_err().field,
            "explain_path",
            "{bad}"
        );
    }
    assert_eq!(err(r#"{"explain_path":"/why"}"#).field, "explain_path");
}

#[test]
fn a_public_entity_that_reaches_a_private_type_is_private_or_not_stored() {
    let c =
        Config::parse(br#"{"entities":{"types":{"Product":{},"Account":{"scope":"private"}}}}"#)
            .unwrap()
            .entities
            .unwrap();
    assert_eq!(c.scope_in("Product", "{ name }"), Scope::Public);
    assert_eq!(c.scope_in("Account", "{ name }"), Scope::Private);
    for selection in [
        "{ owner { ... on Account { email } } }",
        "{ ...F }fragment F on Account { email }",
    ] {
        assert_eq!(
            c.scope_in("Product", selection),
            Scope::Private,
            "{selection}"
        );
    }
    assert_eq!(
        c.scope_in("Product", "{ accountant { x } }"),
        Scope::Public,
        "a name, whole"
    );
    let keys = KeyFields::default();
    let holds = |raw: &str| c.holds_private(raw, &keys);
    assert!(holds(r#"{"owner":{"__typename":"Account","email":"a@b"}}"#));
    assert!(holds(
        r#"{"owners":[{"__typename" : "Account","id":"1","name":"x"}]}"#
    ));
    assert!(
        !holds(r#"{"owner":{"__typename":"Account","id":"7"}}"#),
        "a reference is the entity's own data"
    );
    assert!(!holds(
        r#"{"owner":{"__typename":"Accounts"},"a":"__typename"}"#
    ));
    assert!(!holds(r#"{"name":"P1","__typename":"Product"}"#));
    assert!(
        holds(r#"{"owner":{"__typename":"Account""#),
        "unreadable: as private"
    );
    let all_private = Config::parse(
        br#"{"identity":{"source":"header","header":"x-user"},"default_scope":"private","entities":{"types":{"Product":{"scope":"public"}}}}"#,
    )
    .unwrap()
    .entities
    .unwrap();
    assert!(
        all_private.holds_private(r#"{"r":{"__typename":"Review","body":"b"}}"#, &keys),
        "unlisted: private"
    );
}

#[test]
fn entities_types_and_bounds() {
    assert_eq!(Config::parse(b"{}").unwrap().entities, None);
    let c = Config::parse(
        br#"{"ttl_seconds":30,"entities":{"types":{"Product":{"ttl_seconds":300},"User":{"scope":"private"}}}}"#,
    )
    .unwrap()
    .entities
    .unwrap();
    assert_eq!(c.policy("Product"), (300, Scope::Public));
    assert_eq!(c.policy("User"), (30, Scope::Private));
    assert_eq!(c.policy("Review"), (30, Scope::Public));
    assert_eq!(c.null_ttl_seconds, 0);
    assert!(!c.prefetches());
    let c = Config::parse(
        br#"{"entities":{"types":{"Product":{"prefetch":true},"Gone":{"prefetch":true,"ttl_seconds":0}}}}"#,
    )
    .unwrap()
    .entities
    .unwrap();
    assert!(c.prefetch("Product") && c.prefetches());
    assert!(
        !c.prefetch("Gone"),
        "nothing to keep, nothing to fetch ahead"
    );
    assert!(!c.prefetch("Review"));
    assert_eq!(c.lifetimes("Product").stale_while_revalidate_seconds, 0);
    let c = Config::parse(
        br#"{"entities":{"stale_while_revalidate_seconds":10,"stale_if_error_seconds":20,
             "types":{"Product":{"stale_while_revalidate_seconds":5,"stale_if_error_seconds":0}}}}"#,
    )
    .unwrap()
    .entities
    .unwrap();
    let (product, user) = (c.lifetimes("Product"), c.lifetimes("User"));
    assert_eq!(
        (
            product.stale_while_revalidate_seconds,
            product.stale_if_error_seconds
        ),
        (5, 0)
    );
    assert_eq!(
        (
            user.stale_while_revalidate_seconds,
            user.stale_if_error_seconds
        ),
        (10, 20)
    );
    assert_fields(&[
        (
            r#"{"entities":{"stale_while_revalidate_seconds":99999999999}}"#,
            "entities.stale_while_revalidate_seconds",
        ),
        (
            r#"{"entities":{"stale_if_error_seconds":99999999999}}"#,
            "entities.stale_if_error_seconds",
        ),
        (
            r#"{"entities":{"types":{"P":{"stale_if_error_seconds":99999999999}}}}"#,
            "entities.types.P.stale_if_error_seconds",
        ),
        (
            r#"{"entities":{"types":{"P":{"stale_while_revalidate_seconds":99999999999}}}}"#,
            "entities.types.P.stale_while_revalidate_seconds",
        ),
        (
            r#"{"entities":{"types":{"P":{"scope":"shared"}}}}"#,
            "entities.types.P.scope",
        ),
        (r#"{"entities":{"types":{"a b":{}}}}"#, "entities.types.a b"),
        (
            r#"{"entities":{"types":{"U":{"scope":"private","prefetch":true}}}}"#,
            "entities.types.U.prefetch",
        ),
        (
            r#"{"default_scope":"private","identity":{"source":"header","header":"authorization"},
                 "entities":{"types":{"U":{"prefetch":true}}}}"#,
            "entities.types.U.prefetch",
        ),
        (
            r#"{"entities":{"max_answer_bytes":1}}"#,
            "entities.max_answer_bytes",
        ),
    ]);
}

#[test]
fn a_purge_is_kept_as_long_as_the_longest_lived_entry() {
    let d = Config::default();
    assert_eq!(d.longest_life_ms(), 60_000, "ttl_seconds alone");
    let c = Config::parse(
        br#"{"ttl_seconds":30,"stale_if_error_seconds":5,
             "rules":[{"operation":"Slow","ttl_seconds":600},{"field":"me","stale_while_revalidate_seconds":100}],
             "entities":{"ttl_seconds":10,"types":{"Product":{"ttl_seconds":900,"stale_if_error_seconds":60}}}}"#,
    )
    .unwrap();
    // The rule's 600 + the default 5; an entity type's 900 + 60: the longest.
    assert_eq!(c.longest_life_ms(), 960_000);
}

#[test]
fn the_what_if_path_sits_beside_the_purge_path_unless_given_and_records_are_bounded() {
    let token = r#""purge_token":"0123456789abcdef""#;
    let what_if = |extra: &str| {
        let json = format!(r#"{{{token},{extra}}}"#);
        Config::parse(json.as_bytes()).map(|c| c.purge.unwrap().what_if_path)
    };
    assert_eq!(
        what_if(r#""purge_path":"/admin/purge""#).unwrap(),
        "/admin/what-if"
    );
    assert_eq!(
        what_if(r#""purge_path":"/p","what_if_path":"/w""#).unwrap(),
        "/w"
    );
    for bad in [
        r#""purge_path":"/p","what_if_path":"/p""#,
        r#""purge_path":"/p","explain_path":"/e","what_if_path":"/e""#,
        r#""purge_path":"/p","what_if_path":"w""#,
    ] {
        assert_eq!(what_if(bad).unwrap_err().field, "what_if_path", "{bad}");
    }
    assert_eq!(err(r#"{"what_if_path":"/w"}"#).field, "what_if_path");
    assert_eq!(Config::default().what_if_records, 8_192);
    assert_eq!(
        err(r#"{"what_if_records": 2000000}"#).field,
        "what_if_records"
    );
}
