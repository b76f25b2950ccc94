//! The purge-log follower: ONE task per process follows `gc:purges` with a blocking `XREAD` on its
//! own connection and bumps a watch channel on every new record; `/v1/purges` long-polls wait on
//! that channel, so a waiting long-poll costs Redis nothing (one read when it starts, one when
//! woken), however many there are. Idle, the follower itself costs Redis two commands per
//! `BLOCK` period (the XREAD that times out, and a check of the stream's tip).
//!
//! The tip check catches a stream that was deleted and recreated with lower ids (a new Redis whose
//! clock is behind), which an XREAD after the old id would never report. A reconnect also bumps the
//! channel, so records added while the follower was away wake the waiters.

use std::sync::Arc;
use std::time::Duration;

use redis::aio::{ConnectionLike, ConnectionManager, ConnectionManagerConfig};
use redis::streams::{StreamRangeReply, StreamReadReply};
use redis::RedisResult;
use tokio::sync::watch;

use crate::backend::{client, cluster_client, Conn};
use crate::config::RedisTarget;
use crate::metrics::Metrics;
use crate::purgelog::PURGE_STREAM;

const BLOCK: Duration = Duration::from_secs(5);
/// A reply to `XREAD BLOCK` later than this means the connection is dead.
const BLOCK_SLACK: Duration = Duration::from_secs(3);
const RETRY: Duration = Duration::from_millis(250);

pub struct PurgeFeed {
    tx: watch::Sender<u64>,
}

impl Default for PurgeFeed {
    fn default() -> PurgeFeed {
        PurgeFeed {
            tx: watch::channel(0).0,
        }
    }
}

impl PurgeFeed {
    /// A receiver whose current value is already seen: `changed()` fires on the next bump.
    pub fn subscribe(&self) -> watch::Receiver<u64> {
        self.tx.subscribe()
    }

    fn bump(&self) {
        self.tx.send_modify(|n| *n = n.wrapping_add(1));
    }
}

/// A connection of its own: a blocking read on the shared one would stall every other command.
async fn connect(target: &RedisTarget) -> RedisResult<Conn> {
    let connect = Duration::from_secs(1);
    let response = BLOCK + BLOCK_SLACK;
    if target.cluster {
        let c = cluster_client(target, connect, response)?;
        return Ok(Conn::Cluster(c.get_async_connection().await?));
    }
    let Some(node) = target.nodes.first() else {
        return Err(redis::RedisError::from((
            redis::ErrorKind::InvalidClientConfig,
            "no Redis node",
        )));
    };
    let config = ConnectionManagerConfig::new()
        .set_number_of_retries(0)
        .set_connection_timeout(connect)
        .set_response_timeout(response);
    let c = ConnectionManager::new_with_config(client(target, node)?, config).await?;
    Ok(Conn::Single(c))
}

/// The newest entry's id, `0-0` for an empty or missing stream.
async fn tip(c: &mut impl ConnectionLike) -> RedisResult<String> {
    let r: StreamRangeReply = redis::cmd("XREVRANGE")
        .arg(PURGE_STREAM)
        .arg("+")
        .arg("-")
        .arg("COUNT")
        .arg(1)
        .query_async(c)
        .await?;
    Ok(r.ids
        .first()
        .map_or_else(|| "0-0".to_string(), |e| e.id.clone()))
}

/// Follows the stream on one connection until it fails.
async fn follow(feed: &PurgeFeed, metrics: &Metrics, c: &mut Conn) -> RedisResult<()> {
    let mut last = tip(c).await?;
    metrics.set_follower_connected(true);
    // Waiters that waited while the follower was away re-check once.
    feed.bump();
    loop {
        let block_ms = u64::try_from(BLOCK.as_millis()).unwrap_or(5000);
        let r: Option<StreamReadReply> = redis::cmd("XREAD")
            .arg("COUNT")
            .arg(1)
            .arg("BLOCK")
            .arg(block_ms)
            .arg("STREAMS")
            .arg(PURGE_STREAM)
            .arg(&last)
            .query_async(c)
            .await?;
        metrics.follower_read();
        let got = r.is_some_and(|r| r.keys.iter().any(|k| !k.ids.is_empty()));
        // Jump to the tip: one wake-up for a burst, and a recreated stream is noticed.
        let now = tip(c).await?;
        if got || now != last {
            last = now;
            feed.bump();
        }
    }
}

/// Runs for the life of the process.
pub async fn run(feed: Arc<PurgeFeed>, metrics: Arc<Metrics>, target: RedisTarget) {
    let mut failures: u64 = 0;
    loop {
        let outcome = match tokio::time::timeout(Duration::from_secs(2), connect(&target)).await {
            Ok(Ok(mut c)) => follow(&feed, &metrics, &mut c).await,
            Ok(Err(e)) => Err(e),
            Err(_) => Err(redis::RedisError::from((
                redis::ErrorKind::IoError,
                "connect timeout",
            ))),
        };
        metrics.set_follower_connected(false);
        if let Err(e) = outcome {
            // The first failure, then one line a minute (at 4 attempts a second).
            if failures.is_multiple_of(240) {
                eprintln!("graphql-cache-l2: purge-log follower: {e} (retrying)");
            }
            failures += 1;
        }
        tokio::time::sleep(RETRY).await;
    }
}
