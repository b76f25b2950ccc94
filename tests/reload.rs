//! Reloading the filter under load: the listener comes from a file (file-based LDS), and its
//! filter configuration is replaced twice while clients keep sending, once with a new
//! configuration in the same VM namespace and once with a new `vm_id`. No request may fail, no VM
//! may panic, and the cache works on the new configuration.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

mod support;

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;
use support::*;

/// The listener as a file-based LDS resource, from the template of every test's bootstrap.
fn listener(port: u16, vm_id: &str, config: &str) -> String {
    let filter = bootstrap::wasm_filter(&wasm_path(), vm_id, true, config);
    let listener = bootstrap::listener(&bootstrap::Listener {
        name: "main",
        port,
        stat_prefix: "ingress",
        extra: "",
        routes: "",
        catch_all: "route: { cluster: origin, timeout: 15s }",
        filters: &filter,
    });
    bootstrap::render(
        "resources:\n- \"@type\": type.googleapis.com/envoy.config.listener.v3.Listener\n  ${listener}\n",
        &[("listener", &listener)],
    )
}

/// A bootstrap whose listeners come from `${lds}`, watched in `${dir}`.
const LDS_BOOTSTRAP: &str = r#"node: { id: reload-test, cluster: reload-test }
admin:
  address: { socket_address: { address: 127.0.0.1, port_value: 0 } }
dynamic_resources:
  lds_config:
    resource_api_version: V3
    path_config_source:
      path: ${lds}
      watched_directory: { path: ${dir} }
static_resources:
  clusters:
  ${cluster}
"#;

/// Replaces the watched file atomically, as a configuration system would.
fn publish(dir: &std::path::Path, text: &str) {
    let tmp = dir.join("lds.yaml.tmp");
    std::fs::write(&tmp, text).unwrap();
    std::fs::rename(&tmp, dir.join("lds.yaml")).unwrap();
}

#[test]
fn reloading_the_filter_under_load_loses_no_request() {
    let origin = Origin::start();
    let dir = scratch_dir("reload");
    let port = free_port();
    publish(
        &dir,
        &listener(port, "graphql_cache", r#"{"ttl_seconds": 30}"#),
    );
    let bootstrap = bootstrap::render(
        LDS_BOOTSTRAP,
        &[
            ("lds", &dir.join("lds.yaml").display().to_string()),
            ("dir", &dir.display().to_string()),
            ("cluster", &cluster_yaml("origin", origin.port)),
        ],
    );
    let mut envoy = Envoy::start_bootstrap(&bootstrap, 2);
    let q = "{ users { id name } }";
    assert_eq!(http(port, Req::query(q)).status, 200);

    let stop = Arc::new(AtomicBool::new(false));
    let sent = Arc::new(AtomicU64::new(0));
    let clients: Vec<_> = (0..6)
        .map(|i| {
            let stop = stop.clone();
            let sent = sent.clone();
            std::thread::spawn(move || {
                let mut failures = Vec::new();
                while !stop.load(Ordering::Relaxed) {
                    let body = if i % 2 == 0 { q } else { "{ posts { id } }" };
                    match try_http(port, Req::query(body)) {
                        Ok(r) if r.status == 200 => {}
                        Ok(r) => failures.push(format!("{} {}", r.status, r.text())),
                        Err(e) => failures.push(e.to_string()),
                    }
                    sent.fetch_add(1, Ordering::Relaxed);
                }
                failures
            })
        })
        .collect();
    std::thread::sleep(Duration::from_millis(700));
    // A new configuration for the same VM namespace, then a new vm_id (a new build would do
    // this): each builds new plugin instances while the old ones drain.
    publish(
        &dir,
        &listener(
            port,
            "graphql_cache",
            r#"{"ttl_seconds": 10, "debug_headers": true}"#,
        ),
    );
    std::thread::sleep(Duration::from_millis(1200));
    publish(
        &dir,
        &listener(
            port,
            "graphql_cache_v2",
            r#"{"ttl_seconds": 10, "debug_headers": true}"#,
        ),
    );
    std::thread::sleep(Duration::from_millis(1200));
    stop.store(true, Ordering::Relaxed);
    let failures: Vec<String> = clients
        .into_iter()
        .flat_map(|c| c.join().unwrap())
        .collect();
    let sent = sent.load(Ordering::Relaxed);
    eprintln!(
        "reload under load: {sent} requests, {} failed",
        failures.len()
    );
    assert!(
        failures.is_empty(),
        "{} of {sent} failed: {:?}",
        failures.len(),
        &failures[..failures.len().min(5)]
    );
    assert!(sent > 100, "the load was real: {sent}");
    assert!(envoy.is_alive());
    let log = envoy.log();
    assert!(!log.contains("panicked"), "{log}");
    assert!(
        log.contains("lds: add/update listener 'main'")
            || envoy.stat("listener_manager.lds.update_success") >= 2,
        "both updates were applied:\n{log}"
    );
    // The new filter answers, with its own (empty) cache namespace: a miss, then a hit.
    let fresh = "{ users { id } requestCount }";
    let first = http(port, Req::query(fresh));
    assert_eq!(first.header("x-cache"), Some("MISS"), "{:?}", first.headers);
    assert!(
        first.header("x-cache-key").is_some(),
        "the new configuration (debug headers) is the one answering"
    );
    assert_eq!(http(port, Req::query(fresh)).header("x-cache"), Some("HIT"));
    let _ = std::fs::remove_dir_all(&dir);
}
