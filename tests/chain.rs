//! The cache in a real filter chain: the shipped `envoy/envoy.yaml` (JWT authentication, local
//! rate limit, cache, router) run as-is but for ports and the filter's path.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

mod support;

use std::time::Duration;
use support::*;

const PUBLIC: &str = "{ users { id name } requestCount }";
const PRIVATE: &str = "{ me { id name } requestCount }";

fn chain() -> (Origin, Envoy) {
    let origin = Origin::start();
    let envoy = Envoy::start_shipped("envoy.yaml", &origin);
    (origin, envoy)
}

#[test]
fn private_answers_stay_with_their_user_and_public_ones_are_shared() {
    let (origin, envoy) = chain();
    let alice = envoy.send(Req::query(PRIVATE).token("alice"));
    assert_eq!(
        (alice.status, alice.cache()),
        (200, "MISS"),
        "{}",
        alice.text()
    );
    assert_eq!(alice.json()["data"]["me"]["name"], "Alice");
    let alice_again = envoy.send(Req::query(PRIVATE).token("alice"));
    assert_eq!(alice_again.cache(), "HIT");
    assert_eq!(alice_again.body, alice.body);

    let bob = envoy.send(Req::query(PRIVATE).token("bob"));
    assert_eq!(bob.cache(), "MISS", "Alice's entry must not answer Bob");
    assert_eq!(bob.json()["data"]["me"]["name"], "Bob");
    assert_eq!(
        envoy.send(Req::query(PRIVATE).token("bob")).json()["data"]["me"]["name"],
        "Bob"
    );
    assert_eq!(origin.count(), 2);

    let public_alice = envoy.send(Req::query(PUBLIC).token("alice"));
    assert_eq!(public_alice.cache(), "MISS");
    let public_bob = envoy.send(Req::query(PUBLIC).token("bob"));
    assert_eq!(public_bob.cache(), "HIT", "a public operation is shared");
    assert_eq!(public_bob.body, public_alice.body);
    assert_eq!(origin.count(), 3, "one origin fetch for both users");

    // A query mixing a public and a private field is private.
    let mixed = "{ users { id } me { name } }";
    assert_eq!(envoy.send(Req::query(mixed).token("alice")).cache(), "MISS");
    let mixed_bob = envoy.send(Req::query(mixed).token("bob"));
    assert_eq!(mixed_bob.cache(), "MISS");
    assert_eq!(mixed_bob.json()["data"]["me"]["name"], "Bob");
}

#[test]
fn no_valid_token_no_answer_even_when_cached() {
    let (origin, envoy) = chain();
    assert_eq!(
        envoy.send(Req::query(PUBLIC).token("alice")).cache(),
        "MISS"
    );
    assert_eq!(envoy.send(Req::query(PUBLIC).token("alice")).cache(), "HIT");
    assert_eq!(origin.count(), 1);

    let missing = envoy.send(Req::query(PUBLIC));
    assert_eq!(missing.status, 401, "{}", missing.text());
    assert_eq!(missing.header("x-cache"), None, "the cache never saw it");

    let token = demo_token("alice");
    let (rest, signature) = token.rsplit_once('.').unwrap();
    let forged = format!("{rest}.{}", signature.chars().rev().collect::<String>());
    let bad = envoy.send(Req::query(PUBLIC).header("authorization", &format!("Bearer {forged}")));
    assert_eq!(bad.status, 401);
    let garbage = envoy.send(Req::query(PUBLIC).header("authorization", "Bearer not-a-jwt"));
    assert_eq!(garbage.status, 401);
    assert_eq!(
        origin.count(),
        1,
        "rejected requests never reached the origin"
    );
}

#[test]
fn a_cache_hit_still_spends_the_rate_limit() {
    let (origin, envoy) = chain();
    // envoy/envoy.yaml: a bucket of 20 requests per minute.
    let statuses: Vec<u16> = (0..21)
        .map(|_| envoy.send(Req::query(PUBLIC).token("alice")).status)
        .collect();
    assert!(statuses[..20].iter().all(|&s| s == 200), "{statuses:?}");
    assert_eq!(
        statuses[20], 429,
        "request 21 would have been a hit: {statuses:?}"
    );
    assert_eq!(origin.count(), 1);
    assert_eq!(envoy.counter("hits"), 19);
}

#[test]
fn route_metadata_overrides_ttl_and_turns_caching_off() {
    let (origin, envoy) = chain();
    let on = |path: &str| Req::query(PUBLIC).token("alice").path(path);
    // /graphql/fresh: ttl_seconds 2 in its route metadata.
    assert_eq!(envoy.send(on("/graphql/fresh")).cache(), "MISS");
    assert_eq!(envoy.send(on("/graphql/fresh")).cache(), "HIT");
    // /graphql: the filter's 30 s.
    assert_eq!(envoy.send(on("/graphql")).cache(), "MISS");
    std::thread::sleep(Duration::from_millis(2300));
    assert_eq!(
        envoy.send(on("/graphql/fresh")).cache(),
        "MISS",
        "expired after 2 s"
    );
    assert_eq!(
        envoy.send(on("/graphql")).cache(),
        "HIT",
        "still fresh on the other route"
    );
    // /graphql/live: disabled in its route metadata.
    let live = envoy.send(on("/graphql/live"));
    assert_eq!(live.cache(), "BYPASS");
    assert_eq!(live.header("x-cache-reason"), Some("route-disabled"));
    assert_eq!(envoy.send(on("/graphql/live")).cache(), "BYPASS");
    assert_eq!(origin.count(), 5);
}

/// Envoy hands the route's namespace over in one read, unless it holds something it cannot
/// serialize (a null, in 1.40): then the fields are read one by one, with the same result.
#[test]
fn route_metadata_holding_a_null_still_overrides() {
    let routes = [
        ("/graphql/plain", ", owners: [team-a, team-b]"),
        ("/graphql/nulled", ", owners: null"),
    ]
        .iter()
        .map(|(path, extra)| {
            format!(
                "              - match: {{ prefix: \"{path}\" }}\n                route: {{ cluster: origin, timeout: 15s }}\n                metadata: {{ filter_metadata: {{ graphql_cache: {{ disabled: true{extra} }} }} }}\n"
            )
        })
        .collect::<String>();
    let origin = Origin::start();
    let opts = EnvoyOptions {
        extra_routes: routes,
        ..EnvoyOptions::config(r#"{"route_metadata": "graphql_cache", "debug_headers": true}"#)
    };
    let envoy = Envoy::start(&opts, &origin);
    for path in ["/graphql/plain", "/graphql/nulled"] {
        let r = envoy.send(Req::query(PUBLIC).path(path));
        assert_eq!(r.status, 200, "{}", r.text());
        assert_eq!(r.header("x-cache-reason"), Some("route-disabled"), "{path}");
    }
    assert_eq!(envoy.send(Req::query(PUBLIC)).cache(), "MISS");
    assert_eq!(
        envoy.send(Req::query(PUBLIC)).cache(),
        "HIT",
        "other routes cache"
    );
}

#[test]
fn identity_from_an_auth_header_scopes_private_entries() {
    // As set by ext_authz (which must overwrite any client value); no auth filter here.
    let config = r#"{"vary_headers": [], "identity": {"source": "header", "header": "x-user-id"},
                    "rules": [{"field": "users", "scope": "public"}, {"field": "requestCount", "scope": "public"}],
                    "debug_headers": true}"#;
    let (origin, envoy) = stack(config);
    let as_user = |q: &str, user: &str| {
        Req::query(q)
            .header("x-user-id", user)
            .header("authorization", &format!("Bearer {user}"))
    };
    assert_eq!(envoy.send(as_user(PRIVATE, "alice")).cache(), "MISS");
    assert_eq!(envoy.send(as_user(PRIVATE, "alice")).cache(), "HIT");
    let bob = envoy.send(as_user(PRIVATE, "bob"));
    assert_eq!(bob.cache(), "MISS");
    assert_eq!(bob.json()["data"]["me"]["name"], "Bob");
    let anonymous = envoy.send(Req::query(PRIVATE));
    assert_eq!(anonymous.cache(), "BYPASS");
    assert_eq!(anonymous.header("x-cache-reason"), Some("no-identity"));
    assert_eq!(envoy.send(as_user(PUBLIC, "alice")).cache(), "MISS");
    assert_eq!(envoy.send(as_user(PUBLIC, "bob")).cache(), "HIT");
    assert_eq!(
        envoy.send(Req::query(PUBLIC)).cache(),
        "HIT",
        "public needs no identity"
    );
    assert_eq!(origin.count(), 4);
}

#[test]
fn the_compose_demo_runs_the_same_envoy_yaml() {
    let compose = std::fs::read_to_string(repo_root().join("envoy/docker-compose.yml")).unwrap();
    assert!(
        compose.contains("./envoy.yaml:/etc/envoy/envoy.yaml"),
        "{compose}"
    );
    assert!(
        compose.contains("graphql_cache.wasm:/etc/envoy/graphql_cache.wasm"),
        "{compose}"
    );
    let envoy_version = std::process::Command::new(envoy_bin())
        .arg("--version")
        .output()
        .unwrap();
    let version = String::from_utf8_lossy(&envoy_version.stdout).to_string();
    let release = version
        .split("version: ")
        .nth(1)
        .unwrap()
        .split('/')
        .nth(1)
        .unwrap();
    let major_minor = release.rsplit_once('.').unwrap().0.to_string();
    assert!(
        compose.contains(&format!("envoyproxy/envoy:v{major_minor}")),
        "compose must use Envoy {major_minor}, as tested: {compose}"
    );
    let demo = std::fs::read_to_string(repo_root().join("envoy/demo.sh")).unwrap();
    assert!(
        demo.contains("DEMO_CONFIG:-envoy.yaml"),
        "make demo runs envoy/envoy.yaml"
    );
}

#[test]
fn the_purge_api_is_served_on_the_internal_listener_only() {
    let (origin, envoy) = chain();
    let q = "{ user(id: 1) { __typename id name } requestCount }";
    let first = envoy.send(Req::query(q).token("alice"));
    assert_eq!(first.cache(), "MISS", "{}", first.text());
    assert_eq!(envoy.send(Req::query(q).token("bob")).cache(), "HIT");
    let selectors = r#"[{"kind":"entity","type":"User","id":"1"}]"#;
    let purge = |port: u16| {
        http(
            port,
            Req::post_json(selectors)
                .path("/graphql-cache/purge")
                .header("authorization", "Bearer demo-purge-token-change-me"),
        )
    };
    // The public listener knows no purge API: jwt_authn refuses the purge token (not a JWT), and
    // with a user's valid token the route answers 404 with the cache filter off.
    assert_eq!(purge(envoy.port).status, 401);
    let with_jwt = envoy.send(
        Req::post_json(selectors)
            .path("/graphql-cache/purge")
            .token("alice"),
    );
    assert_eq!(with_jwt.status, 404);
    assert_eq!(envoy.send(Req::query(q).token("alice")).cache(), "HIT");
    let internal = purge(envoy.listener_port("graphql_internal"));
    assert_eq!(internal.status, 200, "{}", internal.text());
    assert_eq!(internal.json()["purged"], 1);
    let after = envoy.send(Req::query(q).token("bob"));
    assert_eq!(
        after.cache(),
        "MISS",
        "purged through the internal listener"
    );
    assert_ne!(after.body, first.body);
    assert_eq!(origin.count(), 2, "no purge request reached the origin");
}

/// The explain endpoint beside the purge API (same token): what the cache would do with a
/// described request, and why, without forwarding or counting it.
#[test]
fn the_explain_endpoint_says_why() {
    let (origin, envoy) = chain();
    let internal = envoy.listener_port("graphql_internal");
    let explain = |token: &str, described: serde_json::Value| {
        http(
            internal,
            Req::post_json(&described.to_string())
                .path("/graphql-cache/explain")
                .header("authorization", &format!("Bearer {token}")),
        )
    };
    let token = "demo-purge-token-change-me";
    let describe = |query: &str| {
        serde_json::json!({
            "authority": "localhost",
            "headers": {"accept": "application/json"},
            "body": {"query": query},
            "cluster": "origin",
            "identity": "alice",
            "issuer": "https://demo.graphql-cache.local",
        })
    };
    let public = "{ users { id name } requestCount }";
    assert_eq!(
        explain("wrong-token-0123456789", describe(public)).status,
        401
    );
    assert_eq!(
        http(
            internal,
            Req::post_json("{}").path("/graphql-cache/explain")
        )
        .status,
        401
    );

    // Cacheable: the key the real request got, its entry, its rules.
    let sent = envoy.send(
        Req::query(public)
            .token("alice")
            .header("accept", "application/json")
            .header("host", "localhost"),
    );
    assert_eq!(sent.cache(), "MISS", "{}", sent.text());
    let e = explain(token, describe(public));
    assert_eq!(e.status, 200, "{}", e.text());
    let e = e.json();
    assert_eq!(e["decision"], "lookup", "{e}");
    assert_eq!(e["x_cache"], "HIT", "{e}");
    assert_eq!(
        e["key"]["digest"],
        sent.header("x-cache-key").unwrap(),
        "{e}"
    );
    assert_eq!(e["policy"]["scope"], "public", "{e}");
    assert_eq!(e["rules"][0]["field"], "users", "{e}");
    assert_eq!(e["entry"]["state"], "fresh", "{e}");
    assert!(
        e["entry"]["ttl_remaining_seconds"].as_u64().unwrap() <= 30,
        "{e}"
    );
    assert!(
        e["entry"]["tags"]
            .as_array()
            .unwrap()
            .contains(&"field:users".into()),
        "{e}"
    );

    // Private, without an identity: not cached.
    let mut anonymous = describe("{ me { id } }");
    anonymous.as_object_mut().unwrap().remove("identity");
    anonymous.as_object_mut().unwrap().remove("issuer");
    let e = explain(token, anonymous).json();
    assert_eq!(
        (e["decision"].as_str(), e["reason"].as_str()),
        (Some("bypass"), Some("no-identity")),
        "{e}"
    );

    // An answer with errors, and one too large to store: why each was not stored.
    for (query, why) in [
        ("{ users { id } fail }", "graphql-errors"),
        ("{ users { id } big(size: 300000) }", "too-large"),
    ] {
        let r = envoy.send(
            Req::query(query)
                .token("alice")
                .header("accept", "application/json")
                .header("host", "localhost"),
        );
        assert_eq!((r.status, r.cache()), (200, "MISS"), "{query}");
        let e = explain(token, describe(query)).json();
        assert_eq!(e["key"]["digest"], r.header("x-cache-key").unwrap(), "{e}");
        assert_eq!(e["x_cache"], "MISS", "{e}");
        assert_eq!(e["entry"], serde_json::Value::Null, "{e}");
        assert_eq!(e["last_not_stored"]["reason"], why, "{query}: {e}");
    }
    // Explaining never reached the origin, nor counted as a lookup. (The too-large answer was
    // fetched twice: by the shared fetch, which could not relay it, then by the request itself.)
    assert_eq!(origin.count(), 4);
    assert_eq!(envoy.counter("hits"), 0);
    // A bad description is a 400 that names what is wrong.
    let bad = explain(token, serde_json::json!({"path": "graphql"}));
    assert_eq!(bad.status, 400);
    assert!(bad.text().contains("path"), "{}", bad.text());
}
