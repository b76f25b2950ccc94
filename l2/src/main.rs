//! graphql-cache-l2: the fleet's shared (L2) cache and lease service, stateless, in front of Redis
//! (one node or a Cluster). The Envoy filter reaches it with HTTP callouts; see l2/README.md for the
//! API.

mod api;
mod app;
mod auth;
mod backend;
mod batch;
mod config;
mod follow;
mod metrics;
mod purge_api;
mod purgelog;
mod wake;

use std::io::Write as _;
use std::process::ExitCode;
use std::sync::Arc;
use std::time::Duration;

use axum::serve::ListenerExt as _;
use tokio::sync::Semaphore;

use crate::config::{Config, Parsed, USAGE};

fn main() -> ExitCode {
    let env_secret = std::env::var_os(config::SECRET_ENV).map(|v| v.into_encoded_bytes());
    let config = match config::parse(std::env::args().skip(1), env_secret) {
        Ok(Parsed::Run(c)) => c,
        Ok(Parsed::Help) => {
            println!("{USAGE}");
            return ExitCode::SUCCESS;
        }
        Err(msg) => {
            eprintln!("graphql-cache-l2: {msg}\n{USAGE}");
            return ExitCode::from(2);
        }
    };
    if matches!(config.auth, auth::Auth::Insecure) {
        eprintln!(
            "graphql-cache-l2: WARNING: --insecure-no-auth: EVERY CLIENT THAT REACHES THIS PORT \
             CAN READ, WRITE AND PURGE THE FLEET'S CACHE. Use it on a closed test network only."
        );
    }
    // One crypto provider for rediss://, chosen here rather than left to feature unification.
    let _ = rustls::crypto::ring::default_provider().install_default();
    let runtime = match tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
    {
        Ok(r) => r,
        Err(e) => {
            eprintln!("graphql-cache-l2: starting the runtime: {e}");
            return ExitCode::from(1);
        }
    };
    match runtime.block_on(run(config)) {
        Ok(()) => ExitCode::SUCCESS,
        Err(msg) => {
            eprintln!("graphql-cache-l2: {msg}");
            ExitCode::from(1)
        }
    }
}

async fn shutdown_signal() {
    let ctrl_c = tokio::signal::ctrl_c();
    #[cfg(unix)]
    {
        match tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()) {
            Ok(mut term) => {
                tokio::select! {
                    _ = ctrl_c => {}
                    _ = term.recv() => {}
                }
            }
            Err(_) => {
                let _ = ctrl_c.await;
            }
        }
    }
    #[cfg(not(unix))]
    {
        let _ = ctrl_c.await;
    }
}

async fn run(config: Config) -> Result<(), String> {
    let metrics = Arc::new(metrics::Metrics::default());
    let wake = Arc::new(wake::Wakeups::default());
    let feed = Arc::new(follow::PurgeFeed::default());
    let backend = backend::Backend::new(config.redis.clone(), config.redis_timeout);

    // First connection: wait for it briefly so a service started next to a running Redis is
    // ready when it says so; if Redis is not there yet, keep trying in the background (requests
    // answer 424 meanwhile).
    let rebuilds = metrics.clone();
    tokio::spawn(
        backend
            .clone()
            .keep_connected(move || rebuilds.count_connection_rebuild()),
    );
    let _ = tokio::time::timeout(Duration::from_secs(2), async {
        while !backend.is_connected() {
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
    })
    .await;
    tokio::spawn(wake::run(
        wake.clone(),
        metrics.clone(),
        config.redis.clone(),
    ));
    tokio::spawn(follow::run(
        feed.clone(),
        metrics.clone(),
        config.redis.clone(),
    ));

    let listener = tokio::net::TcpListener::bind(config.listen)
        .await
        .map_err(|e| format!("--listen {}: {e}", config.listen))?;
    let local = listener
        .local_addr()
        .map_err(|e| format!("--listen {}: {e}", config.listen))?;
    let app = Arc::new(app::App {
        backend,
        wake,
        feed,
        metrics: metrics.clone(),
        gate: auth::Gate {
            auth: Arc::new(config.auth.clone()),
            metrics: metrics.clone(),
        },
        max_value_bytes: config.max_value_bytes,
        max_wait: config.max_wait,
        max_lease_ms: config.max_lease_ms,
        purge_log: config.purge_log,
        long_polls: Semaphore::new(config.max_long_polls),
        inflight_bytes: Semaphore::new(config.max_inflight_bytes.min(Semaphore::MAX_PERMITS)),
        health: tokio::sync::Mutex::new(None),
    });
    let listener = listener.tap_io(|tcp| {
        let _ = tcp.set_nodelay(true);
    });
    println!("listening on {local}");
    let _ = std::io::stdout().flush();
    axum::serve(listener, api::router(app))
        .with_graceful_shutdown(shutdown_signal())
        .await
        .map_err(|e| format!("serving: {e}"))
}
