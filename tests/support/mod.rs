//! Test support: a real origin process, a real Envoy with the built `.wasm`, a fleet of Envoys
//! sharing one L2 (Redis and the L2 service), and a small HTTP/1.1 client that can send arbitrary
//! bytes and report exactly what came back.
#![allow(dead_code, clippy::unwrap_used, clippy::expect_used, clippy::panic)]

mod client;
mod envoy;
mod fleet;
mod origin;

#[allow(unused_imports)] // each test binary uses its own part
pub use client::*;
pub use envoy::*;
#[allow(unused_imports)]
pub use fleet::*;
pub use origin::*;

use std::path::PathBuf;
use std::sync::atomic::{AtomicUsize, Ordering};

pub fn repo_root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

/// `$var`, else `default` under the repository; it must exist (`what`, `make`: the message).
fn required_path(var: &str, default: &str, what: &str, make: &str) -> PathBuf {
    let p = std::env::var_os(var)
        .map(PathBuf::from)
        .unwrap_or_else(|| repo_root().join(default));
    assert!(
        p.exists(),
        "{what} at {} (run `{make}` or set {var})",
        p.display()
    );
    p
}

pub fn envoy_bin() -> PathBuf {
    required_path(
        "ENVOY_BIN",
        ".tools/bin/envoy",
        "Envoy not found",
        "make tools",
    )
}

pub fn wasm_path() -> PathBuf {
    required_path(
        "GRAPHQL_CACHE_WASM",
        "target/wasm32-wasip1/release/graphql_cache.wasm",
        "filter not built",
        "make build",
    )
}

pub fn origin_bin() -> PathBuf {
    required_path(
        "ORIGIN_BIN",
        "target/release/graphql-origin",
        "origin not built",
        "make build",
    )
}

pub fn l2_bin() -> PathBuf {
    required_path(
        "L2_BIN",
        "target/release/graphql-cache-l2",
        "L2 service not built",
        "make build",
    )
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
