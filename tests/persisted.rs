//! Automatic Persisted Queries through the real Apollo Client (npm `@apollo/client`, its
//! persisted-query link with GET for hashed queries), against a real Envoy and an origin that
//! speaks the protocol. `npm ci --prefix tests/apollo` installs the client (`make integration`
//! does).
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

mod support;

use std::process::Command;
use support::*;

const QUERY: &str = "query Users { users { id name } }";

fn apollo(envoy: &Envoy, mode: Option<&str>) -> serde_json::Value {
    let script = repo_root().join("tests/apollo/apq.mjs");
    assert!(
        repo_root().join("tests/apollo/node_modules").exists(),
        "run `npm ci --prefix tests/apollo` (make integration does)"
    );
    let url = format!("http://127.0.0.1:{}/graphql", envoy.port);
    let mut cmd = Command::new("node");
    cmd.arg(&script).arg(&url).arg(QUERY).arg("1");
    if let Some(m) = mode {
        cmd.arg(m);
    }
    let out = cmd.output().expect("node");
    assert!(
        out.status.success(),
        "apq.mjs failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    serde_json::from_slice(&out.stdout).unwrap()
}

fn requests(v: &serde_json::Value) -> Vec<(String, bool, String)> {
    v["requests"]
        .as_array()
        .unwrap()
        .iter()
        .map(|r| {
            (
                r["method"].as_str().unwrap().to_string(),
                r["hashOnly"].as_bool().unwrap(),
                r["xCache"].as_str().unwrap_or("-").to_string(),
            )
        })
        .collect()
}

#[test]
fn a_hash_only_get_hits_the_entry_of_its_full_text_twin() {
    let (origin, envoy) = stack(r#"{"debug_headers": true}"#);
    // A new client: hash-only GET (unknown: passes through, the origin says
    // PersistedQueryNotFound), then the full text as a POST, which teaches the filter the hash.
    let first = apollo(&envoy, None);
    assert_eq!(
        requests(&first),
        vec![
            ("GET".to_string(), true, "BYPASS".to_string()),
            ("POST".to_string(), false, "MISS".to_string()),
        ],
        "{first}"
    );
    assert_eq!(first["requests"][0]["reason"], "persisted-query-unknown");
    assert_eq!(
        envoy.counter("rejected_inputs"),
        0,
        "not counted as bad input"
    );
    assert_eq!(origin.count(), 2);
    // Another new client: its hash-only GET is keyed as the POST and hits its entry.
    let second = apollo(&envoy, None);
    assert_eq!(
        requests(&second),
        vec![("GET".to_string(), true, "HIT".to_string())],
        "{second}"
    );
    assert_eq!(second["results"][0], first["results"][0]);
    assert_eq!(origin.count(), 2, "answered by the cache");
}

#[test]
fn a_forged_hash_is_not_learned() {
    let (_origin, envoy) = stack(r#"{"debug_headers": true}"#);
    let forged = apollo(&envoy, Some("forge"));
    let reqs = requests(&forged);
    assert_eq!(reqs.len(), 2, "{forged}");
    // The hash-only request with the forged hash is still unknown: nothing was taught.
    assert_eq!(
        reqs[1],
        ("GET".to_string(), true, "BYPASS".to_string()),
        "{forged}"
    );
    assert_eq!(forged["requests"][1]["reason"], "persisted-query-unknown");
    assert_eq!(
        forged["results"][1]["errors"][0]["message"],
        "PersistedQueryNotFound"
    );
}
