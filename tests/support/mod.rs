//! Test support: a real origin process, a real Envoy with the built `.wasm`, and a small HTTP/1.1
//! client that can send arbitrary bytes and report exactly what came back.
#![allow(dead_code, clippy::unwrap_used, clippy::expect_used, clippy::panic)]

mod client;
mod envoy;
mod origin;

#[allow(unused_imports)] // each test binary uses its own part
pub use client::*;
pub use envoy::*;
pub use origin::*;

use std::path::PathBuf;
use std::sync::atomic::{AtomicUsize, Ordering};

pub fn repo_root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

fn env_path(var: &str, default: &str) -> PathBuf {
    std::env::var_os(var)
        .map(PathBuf::from)
        .unwrap_or_else(|| repo_root().join(default))
}

pub fn envoy_bin() -> PathBuf {
    let p = env_path("ENVOY_BIN", ".tools/bin/envoy");
    assert!(
        p.exists(),
        "Envoy not found at {} (run `make tools` or set ENVOY_BIN)",
        p.display()
    );
    p
}

pub fn wasm_path() -> PathBuf {
    let p = env_path(
        "GRAPHQL_CACHE_WASM",
        "target/wasm32-wasip1/release/graphql_cache.wasm",
    );
    assert!(
        p.exists(),
        "filter not built at {} (run `make build`)",
        p.display()
    );
    p
}

pub fn origin_bin() -> PathBuf {
    let p = env_path("ORIGIN_BIN", "target/release/graphql-origin");
    assert!(
        p.exists(),
        "origin not built at {} (run `make build`)",
        p.display()
    );
    p
}

fn scratch_dir(tag: &str) -> PathBuf {
    static N: AtomicUsize = AtomicUsize::new(0);
    let dir = std::env::temp_dir().join(format!(
        "graphql-cache-test-{}-{}-{}",
        std::process::id(),
        tag,
        N.fetch_add(1, Ordering::SeqCst)
    ));
    std::fs::create_dir_all(&dir).unwrap();
    dir
}

/// An origin and an Envoy with the cache configured by `config`.
pub fn stack(config: &str) -> (Origin, Envoy) {
    let origin = Origin::start();
    let envoy = Envoy::start(&EnvoyOptions::config(config), &origin);
    (origin, envoy)
}
