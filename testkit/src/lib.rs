//! Test support shared by the filter's integration tests (`tests/`) and the L2 service's tests
//! (`l2/tests/`): Envoy with the built filter, the origin, Redis (one node or a Cluster) and the
//! L2 service as child processes that Drop stops; a raw HTTP/1.1 client; and the Envoy bootstrap,
//! whose templates (`testkit/bootstrap/`) `bench/bench.py` renders too. A dev-dependency only.

// Test code: a step that fails fails the test, so unwrap, expect and panic are how it reports
// (the tests themselves allow them the same way).
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

pub mod bootstrap;
mod client;
mod envoy;
pub mod l2;
mod origin;
mod redis_server;

pub use client::{concurrently, demo_token, gql, http, send, try_http, Req, Resp};
pub use envoy::{
    cluster_yaml, render_envoy_yaml, shipped_config, Envoy, EnvoyOptions, PromSample, FLEET_KEY,
    FLEET_SECRETS, L2_SECRET, OPERATION_STATS_TAGS,
};
pub use l2::L2;
pub use origin::Origin;
pub use redis_server::{Backend, Cluster, Redis, RedisBackend, REDIS_PASSWORD};

use std::net::TcpListener;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicUsize, Ordering};

/// The repository (this crate's parent folder).
pub fn repo_root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .unwrap()
        .to_path_buf()
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

/// The release build of the L2 service (the L2 package's own tests start Cargo's build of it).
pub fn l2_bin() -> PathBuf {
    required_path(
        "L2_BIN",
        "target/release/graphql-cache-l2",
        "L2 service not built",
        "make build",
    )
}

/// The first port the kernel may hand an outgoing connection as its local port (the start of
/// `ip_local_port_range`); ports below it are taken only by a bind.
fn ephemeral_floor() -> u16 {
    std::fs::read_to_string("/proc/sys/net/ipv4/ip_local_port_range")
        .ok()
        .and_then(|s| s.split_whitespace().next()?.parse().ok())
        .unwrap_or(32_768)
}

/// Whether nobody listens on `port` (nor, for a Redis Cluster node, on its bus port + 10000).
fn bindable(port: u16) -> bool {
    TcpListener::bind(("127.0.0.1", port)).is_ok()
        && TcpListener::bind(("127.0.0.1", port + 10_000)).is_ok()
}

/// A port nobody listens on now, whose Redis Cluster bus twin (+10000) is free too. Both lie
/// below the kernel's ephemeral range: a port picked inside it (as the kernel picks for a bind to
/// port 0) may become an outgoing connection's local port before the server binds it. That
/// happened under load, with two suites and a build beside each other: redis-server could not
/// bind the port the harness had picked, and `trust::the_service_refuses_to_start_without_a_secret_unless_told_to`
/// waited 10 s for it. Processes start at different places in the range (their pid, the clock).
pub fn free_port() -> u16 {
    static NEXT: AtomicUsize = AtomicUsize::new(0);
    const LOW: u32 = 10_000;
    let high = u32::from(ephemeral_floor()).saturating_sub(10_000);
    if high <= LOW + 1_000 {
        return free_port_from_the_kernel();
    }
    let span = high - LOW;
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.subsec_nanos());
    let start = std::process::id().wrapping_mul(7_919).wrapping_add(nanos);
    for _ in 0..1_000 {
        let n = NEXT.fetch_add(1, Ordering::SeqCst) as u32;
        let port = LOW + start.wrapping_add(n.wrapping_mul(104_729)) % span;
        let port = u16::try_from(port).unwrap();
        if bindable(port) {
            return port;
        }
    }
    panic!("no free port below {high}");
}

/// The old way, for a machine whose ephemeral range leaves no room below it.
fn free_port_from_the_kernel() -> u16 {
    for _ in 0..200 {
        let l = TcpListener::bind("127.0.0.1:0").unwrap();
        let p = l.local_addr().unwrap().port();
        if p < 55000 && TcpListener::bind(("127.0.0.1", p + 10000)).is_ok() {
            return p;
        }
    }
    panic!("no free port");
}

/// A new empty folder under the system's temporary one, named after `tag`; its owner removes it.
pub fn scratch_dir(tag: &str) -> PathBuf {
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
