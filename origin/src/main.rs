//! `graphql-origin`: a small in-memory GraphQL server that the cache sits in
//! front of in integration tests, the demo and benchmarks.
//!
//! See `args::USAGE` for the command line, control endpoints and headers.

mod apq;
mod args;
mod auth;
mod conn;
mod fault;
mod guard;
mod schema;
mod server;

use std::future::IntoFuture;
use std::io::Write;
use std::process::ExitCode;
use std::sync::Arc;
use std::time::Duration;

use crate::args::{Command, Config};

/// How long in-flight requests may take to finish after SIGTERM/SIGINT.
const SHUTDOWN_GRACE: Duration = Duration::from_secs(5);

fn main() -> ExitCode {
    let config = match args::parse_args(std::env::args().skip(1), |k| std::env::var(k).ok()) {
        Ok(Command::Run(config)) => config,
        Ok(Command::Help) => {
            let _ = writeln!(std::io::stdout(), "{}", args::USAGE);
            return ExitCode::SUCCESS;
        }
        Err(msg) => {
            let _ = writeln!(
                std::io::stderr(),
                "graphql-origin: {msg}\n\n{}",
                args::USAGE
            );
            return ExitCode::from(2);
        }
    };

    let runtime = match tokio::runtime::Builder::new_multi_thread()
        .worker_threads(config.threads)
        .thread_name("origin-worker")
        .thread_stack_size(8 * 1024 * 1024)
        .enable_all()
        .build()
    {
        Ok(rt) => rt,
        Err(e) => {
            let _ = writeln!(
                std::io::stderr(),
                "graphql-origin: cannot start runtime: {e}"
            );
            return ExitCode::FAILURE;
        }
    };

    let code = runtime.block_on(run(config));
    // Don't wait for stray tasks (e.g. connections still sleeping in a delay).
    runtime.shutdown_timeout(Duration::from_millis(100));
    code
}

async fn run(config: Config) -> ExitCode {
    let listener = match tokio::net::TcpListener::bind(config.listen).await {
        Ok(l) => l,
        Err(e) => {
            let _ = writeln!(
                std::io::stderr(),
                "graphql-origin: cannot listen on {}: {e}",
                config.listen
            );
            return ExitCode::FAILURE;
        }
    };
    let local = match listener.local_addr() {
        Ok(a) => a,
        Err(e) => {
            let _ = writeln!(
                std::io::stderr(),
                "graphql-origin: cannot read bound address: {e}"
            );
            return ExitCode::FAILURE;
        }
    };

    let state = Arc::new(server::AppState::new(
        schema::build_schema(),
        config.delay_ms,
        config.max_inflight,
        config.verbose,
        config.apq,
    ));
    let app = server::router(state, config.gzip);

    {
        // Exactly one line, flushed, so a harness can read the port.
        let mut out = std::io::stdout().lock();
        let _ = writeln!(out, "listening on {local}");
        let _ = out.flush();
    }
    if config.verbose {
        let _ = writeln!(
            std::io::stderr(),
            "graphql-origin: delay {}ms, {} worker threads, gzip {}, apq {}",
            config.delay_ms,
            config.threads,
            if config.gzip { "on" } else { "off" },
            if config.apq { "on" } else { "off" }
        );
    }

    let (stop_tx, stop_rx) = tokio::sync::oneshot::channel::<()>();
    let server = tokio::spawn(
        conn::serve(listener, app)
            .with_graceful_shutdown(async move {
                let _ = stop_rx.await;
            })
            .into_future(),
    );
    let mut server = server;

    tokio::select! {
        res = &mut server => {
            // The server stopped on its own: only an I/O error does that.
            let _ = writeln!(std::io::stderr(), "graphql-origin: server stopped: {res:?}");
            return ExitCode::FAILURE;
        }
        () = shutdown_signal() => {}
    }

    let _ = stop_tx.send(());
    if tokio::time::timeout(SHUTDOWN_GRACE, &mut server)
        .await
        .is_err()
    {
        server.abort();
    }
    ExitCode::SUCCESS
}

/// Resolves on SIGINT (Ctrl-C) or SIGTERM.
async fn shutdown_signal() {
    let ctrl_c = async {
        if tokio::signal::ctrl_c().await.is_err() {
            std::future::pending::<()>().await;
        }
    };
    #[cfg(unix)]
    let term = async {
        match tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()) {
            Ok(mut s) => {
                s.recv().await;
            }
            Err(_) => std::future::pending::<()>().await,
        }
    };
    #[cfg(not(unix))]
    let term = std::future::pending::<()>();
    tokio::select! {
        () = ctrl_c => {}
        () = term => {}
    }
}
