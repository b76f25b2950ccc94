//! Wake-ups for long-polling lookups.
//!
//! Every store (and every effective release of a lease) PUBLISHes on the key's channel
//! `gc:{hex}:d` in the same script that writes. Subscriber tasks hold dedicated connections with
//! `PSUBSCRIBE gc:{*}:d` and bump the local waiters of that key.
//!
//! Single node: one subscriber, on that node.
//!
//! Cluster: classic (non-sharded) PUBLISH is delivered by the node that runs it to its own
//! subscribers, and broadcast over the cluster bus to every other node. One subscriber on any node
//! would see every channel, but the bus hop measured ~40 ms on some publishes (Nagle / delayed ACK
//! on the bus links), so there is one subscriber per master (found with `CLUSTER NODES` every 5 s,
//! from any seed): the master that owns a key delivers its PUBLISH locally, at once. Duplicates via
//! the bus are harmless. No 10 ms GET polling is needed while subscribed.
//!
//! Safety nets, so a lost message never strands a waiter: a waiter re-checks at the lease's expiry
//! (the lookup script reports the lease's PTTL) and at least every 250 ms; while no subscriber is
//! subscribed (Redis down, reconnecting) waiters re-check every 200 ms instead (not faster:
//! polling every waiter would multiply Redis commands exactly when Redis is in trouble); and on every
//! (re)subscription or loss of one all waiters re-check at once.
//!
//! A waiter marks its watch channel BEFORE each lookup round trip, so a PUBLISH that lands between
//! the lookup and the wait is not missed.

use std::collections::{BTreeSet, HashMap};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;

use futures_util::StreamExt;
use redis::{ConnectionAddr, ConnectionInfo, Value};
use tokio::sync::watch;
use tokio::task::JoinHandle;

use crate::backend::{channel_key, client, CHANNEL_PATTERN};
use crate::config::RedisTarget;
use crate::metrics::{Metrics, WakeSource};

struct Slot {
    tx: watch::Sender<u64>,
    refs: usize,
}

#[derive(Default)]
pub struct Wakeups {
    slots: Mutex<HashMap<String, Slot>>,
    /// Subscriber connections subscribed right now.
    subscribed: AtomicUsize,
}

pub struct Waiter {
    hub: Arc<Wakeups>,
    key: String,
    rx: watch::Receiver<u64>,
}

impl Wakeups {
    fn lock(&self) -> MutexGuard<'_, HashMap<String, Slot>> {
        match self.slots.lock() {
            Ok(g) => g,
            Err(poisoned) => poisoned.into_inner(),
        }
    }

    pub fn register(self: &Arc<Self>, hex: &str) -> Waiter {
        let mut slots = self.lock();
        let slot = slots.entry(hex.to_string()).or_insert_with(|| Slot {
            tx: watch::channel(0).0,
            refs: 0,
        });
        slot.refs += 1;
        let rx = slot.tx.subscribe();
        Waiter {
            hub: self.clone(),
            key: hex.to_string(),
            rx,
        }
    }

    pub fn notify(&self, hex: &str) {
        if let Some(slot) = self.lock().get(hex) {
            slot.tx.send_modify(|n| *n = n.wrapping_add(1));
        }
    }

    fn notify_all(&self) {
        for slot in self.lock().values() {
            slot.tx.send_modify(|n| *n = n.wrapping_add(1));
        }
    }

    pub fn subscribed(&self) -> bool {
        self.subscribed.load(Ordering::Relaxed) > 0
    }
    #[cfg(test)]
    fn waiting_keys(&self) -> usize {
        self.lock().len()
    }
}

impl Waiter {
    /// Forget earlier notifications: call right before each lookup round trip.
    pub fn mark(&mut self) {
        self.rx.borrow_and_update();
    }

    /// Waits for a notification that came after the last `mark`, or `nap`.
    pub async fn wait(&mut self, nap: Duration) -> WakeSource {
        match tokio::time::timeout(nap, self.rx.changed()).await {
            Ok(Ok(())) => WakeSource::Notify,
            Ok(Err(_)) | Err(_) => WakeSource::Timer,
        }
    }
}

impl Drop for Waiter {
    fn drop(&mut self) {
        let mut slots = self.hub.lock();
        let gone = match slots.get_mut(&self.key) {
            Some(slot) => {
                slot.refs = slot.refs.saturating_sub(1);
                slot.refs == 0
            }
            None => false,
        };
        if gone {
            slots.remove(&self.key);
        }
    }
}

const PING_EVERY: Duration = Duration::from_secs(1);
const PING_TIMEOUT: Duration = Duration::from_millis(500);
const DISCOVER_EVERY: Duration = Duration::from_secs(5);

/// Counts one subscribed connection while it lives (also when its task is aborted).
struct Subscribed {
    hub: Arc<Wakeups>,
    metrics: Arc<Metrics>,
}

impl Subscribed {
    fn new(hub: &Arc<Wakeups>, metrics: &Arc<Metrics>) -> Subscribed {
        hub.subscribed.fetch_add(1, Ordering::Relaxed);
        metrics.set_pubsub_connected(true);
        hub.notify_all();
        Subscribed {
            hub: hub.clone(),
            metrics: metrics.clone(),
        }
    }
}

impl Drop for Subscribed {
    fn drop(&mut self) {
        self.hub.subscribed.fetch_sub(1, Ordering::Relaxed);
        self.metrics.set_pubsub_connected(false);
        self.hub.notify_all();
    }
}

/// One node's subscriber: (re)connects every 100 ms until aborted.
async fn subscriber(
    hub: Arc<Wakeups>,
    metrics: Arc<Metrics>,
    target: Arc<RedisTarget>,
    node: ConnectionInfo,
) {
    loop {
        let attempt = async {
            let client = client(&target, &node)?;
            let mut pubsub = client.get_async_pubsub().await?;
            pubsub.psubscribe(CHANNEL_PATTERN).await?;
            Ok::<_, redis::RedisError>(pubsub)
        };
        if let Ok(Ok(pubsub)) = tokio::time::timeout(Duration::from_secs(1), attempt).await {
            let (mut sink, mut stream) = pubsub.split();
            let _subscribed = Subscribed::new(&hub, &metrics);
            let mut ping = tokio::time::interval(PING_EVERY);
            ping.tick().await;
            loop {
                tokio::select! {
                    msg = stream.next() => match msg {
                        Some(msg) => {
                            if let Some(hex) = channel_key(msg.get_channel_name()) {
                                hub.notify(hex);
                            }
                        }
                        None => break,
                    },
                    _ = ping.tick() => {
                        // A dead connection (host gone without a FIN) shows up here.
                        let pong = tokio::time::timeout(PING_TIMEOUT, sink.ping::<Value>()).await;
                        if !matches!(pong, Ok(Ok(_))) {
                            break;
                        }
                    }
                }
            }
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// `host:port` of every master in a `CLUSTER NODES` reply that has an address and is not failing.
fn masters(cluster_nodes: &str) -> BTreeSet<(String, u16)> {
    let mut out = BTreeSet::new();
    for line in cluster_nodes.lines() {
        let fields: Vec<&str> = line.split(' ').collect();
        let (Some(addr), Some(flags)) = (fields.get(1), fields.get(2)) else {
            continue;
        };
        let flags: Vec<&str> = flags.split(',').collect();
        if !flags.contains(&"master")
            || flags
                .iter()
                .any(|f| matches!(*f, "fail" | "noaddr" | "handshake"))
        {
            continue;
        }
        // ip:port@cport[,hostname]
        let hostport = addr.split(['@', ',']).next().unwrap_or("");
        let Some((host, port)) = hostport.rsplit_once(':') else {
            continue;
        };
        let host = host.trim_start_matches('[').trim_end_matches(']');
        match port.parse::<u16>() {
            Ok(p) if p != 0 && !host.is_empty() => {
                out.insert((host.to_string(), p));
            }
            _ => {}
        }
    }
    out
}

async fn discover(target: &RedisTarget) -> Option<BTreeSet<(String, u16)>> {
    for seed in &target.nodes {
        let query = async {
            let client = client(target, seed)?;
            let mut c = client.get_multiplexed_async_connection().await?;
            redis::cmd("CLUSTER")
                .arg("NODES")
                .query_async::<String>(&mut c)
                .await
        };
        if let Ok(Ok(text)) = tokio::time::timeout(Duration::from_secs(1), query).await {
            let found = masters(&text);
            if !found.is_empty() {
                return Some(found);
            }
        }
    }
    None
}

/// The seed's credentials and TLS settings, at another node's address.
fn with_addr(seed: &ConnectionInfo, host: &str, port: u16) -> ConnectionInfo {
    let addr = match &seed.addr {
        ConnectionAddr::TcpTls {
            insecure,
            tls_params,
            ..
        } => ConnectionAddr::TcpTls {
            host: host.to_string(),
            port,
            insecure: *insecure,
            tls_params: tls_params.clone(),
        },
        _ => ConnectionAddr::Tcp(host.to_string(), port),
    };
    ConnectionInfo {
        addr,
        redis: seed.redis.clone(),
    }
}

/// Runs for the life of the process: the subscriber of a single node, or one per Cluster master.
pub async fn run(hub: Arc<Wakeups>, metrics: Arc<Metrics>, target: RedisTarget) {
    let seeds = target.nodes.clone();
    let Some(first) = seeds.first().cloned() else {
        return;
    };
    let target = Arc::new(target);
    if !target.cluster {
        subscriber(hub, metrics, target, first).await;
        return;
    }
    let mut running: HashMap<(String, u16), JoinHandle<()>> = HashMap::new();
    loop {
        let wanted = match discover(&target).await {
            Some(m) => m,
            // No seed answers: keep what runs; if nothing does, subscribe to the seeds.
            None if running.is_empty() => seeds
                .iter()
                .filter_map(|s| match &s.addr {
                    ConnectionAddr::Tcp(h, p) => Some((h.clone(), *p)),
                    ConnectionAddr::TcpTls { host, port, .. } => Some((host.clone(), *port)),
                    _ => None,
                })
                .collect(),
            None => running.keys().cloned().collect(),
        };
        running.retain(|addr, task| {
            let keep = wanted.contains(addr);
            if !keep {
                task.abort();
            }
            keep
        });
        for (host, port) in wanted {
            running.entry((host.clone(), port)).or_insert_with(|| {
                tokio::spawn(subscriber(
                    hub.clone(),
                    metrics.clone(),
                    target.clone(),
                    with_addr(&first, &host, port),
                ))
            });
        }
        tokio::time::sleep(DISCOVER_EVERY).await;
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn a_notification_after_mark_is_not_lost() {
        let hub = Arc::new(Wakeups::default());
        let mut w = hub.register("k");
        w.mark();
        hub.notify("k");
        assert_eq!(w.wait(Duration::from_secs(5)).await, WakeSource::Notify);
        w.mark();
        assert_eq!(w.wait(Duration::from_millis(10)).await, WakeSource::Timer);
        let w2 = hub.register("k");
        assert_eq!(hub.waiting_keys(), 1);
        drop(w);
        assert_eq!(hub.waiting_keys(), 1);
        drop(w2);
        assert_eq!(hub.waiting_keys(), 0);
    }

    #[test]
    fn cluster_nodes_masters() {
        let text = "\
07c3 127.0.0.1:30004@31004 slave e7d1 0 1426238317239 4 connected
67ed 127.0.0.1:30002@31002,host-b master - 0 1426238316232 2 connected 5461-10922
292f 127.0.0.1:30003@31003 master,fail - 0 1426238318243 3 disconnected 10923-16383
e7d1 127.0.0.1:30001@31001 myself,master - 0 0 1 connected 0-5460
aaaa :0@0 master,noaddr - 0 0 1 disconnected
";
        let m: Vec<_> = masters(text).into_iter().collect();
        assert_eq!(
            m,
            vec![
                ("127.0.0.1".to_string(), 30001),
                ("127.0.0.1".to_string(), 30002)
            ]
        );
    }
}
