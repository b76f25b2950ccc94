//! Redis access: one connection object (a `ConnectionManager` for a single node, a
//! `ClusterConnection` for a Cluster), the Lua scripts, and one function per verb (the purge log's
//! are in `purgelog`, on the same connection through [`Backend::round_trip`]). Every verb is ONE
//! Redis round trip (an EVALSHA; the very first call after a Redis restart adds a SCRIPT LOAD), and
//! every round trip is bounded by `--redis-timeout-ms`, so a Redis that is down or hung costs a 424,
//! never a hang.

use std::fmt;
use std::future::Future;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, LazyLock, RwLock};
use std::time::{Duration, Instant};

use redis::aio::{ConnectionLike, ConnectionManager, ConnectionManagerConfig};
use redis::cluster::{ClusterClient, ClusterClientBuilder};
use redis::cluster_async::ClusterConnection;
use redis::cluster_routing::{MultipleNodeRoutingInfo, ResponsePolicy, RoutingInfo};
use redis::{
    Cmd, ConnectionInfo, ErrorKind, Pipeline, RedisError, RedisFuture, RedisResult, Script,
    TlsCertificates, Value,
};

use crate::config::RedisTarget;

/// Format version of stored values: the first byte of every `gc:{key}:v`.
pub const VALUE_VERSION: u8 = 1;

/// The three Redis names of one cache key, all in the key's hash slot (`{hex}` is the hash tag).
pub struct Keys {
    pub value: String,
    pub lease: String,
    pub channel: String,
}

impl Keys {
    pub fn new(hex: &str) -> Keys {
        Keys {
            value: format!("gc:{{{hex}}}:v"),
            lease: format!("gc:{{{hex}}}:l"),
            channel: format!("gc:{{{hex}}}:d"),
        }
    }
}

/// The wake-up subscriber's PSUBSCRIBE pattern (matches every key's `gc:{hex}:d`).
pub const CHANNEL_PATTERN: &str = "gc:{*}:d";

/// The hex key of a `gc:{hex}:d` channel name.
pub fn channel_key(channel: &str) -> Option<&str> {
    let hex = channel.strip_prefix("gc:{")?.strip_suffix("}:d")?;
    (hex.len() == 64).then_some(hex)
}

/// KEYS: value, lease. ARGV: owner, lease_ms.
/// {1, value-without-version, value PTTL} | {2} (the caller now holds the lease) | {3, lease PTTL}.
/// A value whose first byte is not the current version reads as absent. An owner that already
/// holds the lease leads again (its lease is extended).
static LOOKUP: LazyLock<Script> = LazyLock::new(|| {
    Script::new(
        r#"
local v = redis.call('GET', KEYS[1])
if v and string.byte(v, 1) == 1 then
  return {1, string.sub(v, 2), redis.call('PTTL', KEYS[1])}
end
if redis.call('SET', KEYS[2], ARGV[1], 'NX', 'PX', ARGV[2]) then
  return {2}
end
if redis.call('GET', KEYS[2]) == ARGV[1] then
  redis.call('PEXPIRE', KEYS[2], ARGV[2])
  return {2}
end
return {3, redis.call('PTTL', KEYS[2])}
"#,
    )
});

/// KEYS: value, lease. ARGV: ttl_ms, owner, versioned value, channel.
/// Returns 1 if the owner's lease was released, 0 if the lease was absent or someone else's.
static STORE: LazyLock<Script> = LazyLock::new(|| {
    Script::new(
        r#"
redis.call('SET', KEYS[1], ARGV[3], 'PX', ARGV[1])
local released = 0
if redis.call('GET', KEYS[2]) == ARGV[2] then
  redis.call('DEL', KEYS[2])
  released = 1
end
redis.call('PUBLISH', ARGV[4], 's')
return released
"#,
    )
});

/// KEYS: lease. ARGV: owner, channel. Deletes the lease only if it is the owner's, and then wakes
/// the waiters (one of them takes the lease). Returns 1 if released.
static RELEASE: LazyLock<Script> = LazyLock::new(|| {
    Script::new(
        r#"
if redis.call('GET', KEYS[1]) == ARGV[1] then
  redis.call('DEL', KEYS[1])
  redis.call('PUBLISH', ARGV[2], 'r')
  return 1
end
return 0
"#,
    )
});

/// One connection object, cheap to clone (both kinds share their underlying connections).
#[derive(Clone)]
pub enum Conn {
    Single(ConnectionManager),
    Cluster(ClusterConnection),
}

impl ConnectionLike for Conn {
    fn req_packed_command<'a>(&'a mut self, cmd: &'a Cmd) -> RedisFuture<'a, Value> {
        match self {
            Conn::Single(c) => c.req_packed_command(cmd),
            Conn::Cluster(c) => c.req_packed_command(cmd),
        }
    }

    fn req_packed_commands<'a>(
        &'a mut self,
        cmd: &'a Pipeline,
        offset: usize,
        count: usize,
    ) -> RedisFuture<'a, Vec<Value>> {
        match self {
            Conn::Single(c) => c.req_packed_commands(cmd, offset, count),
            Conn::Cluster(c) => c.req_packed_commands(cmd, offset, count),
        }
    }

    fn get_db(&self) -> i64 {
        match self {
            Conn::Single(c) => c.get_db(),
            Conn::Cluster(c) => c.get_db(),
        }
    }
}

/// Why a verb could not be served; every variant answers 424 (503 on `/health`).
#[derive(Debug)]
pub enum Fail {
    /// With the last connection attempt's error, if any (e.g. wrong Redis password).
    NotConnected(Option<String>),
    Timeout,
    Redis(redis::RedisError),
    Reply(&'static str),
}

impl fmt::Display for Fail {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Fail::NotConnected(None) => write!(f, "redis not connected"),
            Fail::NotConnected(Some(e)) => write!(f, "redis not connected: {e}"),
            Fail::Timeout => write!(f, "redis timeout"),
            Fail::Redis(e) => write!(f, "redis error: {e}"),
            Fail::Reply(what) => write!(f, "unexpected redis reply: {what}"),
        }
    }
}

pub enum Lookup {
    Hit { value: Vec<u8>, ttl_ms: i64 },
    Lead,
    Busy { lease_ms: i64 },
}

pub struct Backend {
    target: RedisTarget,
    conn: RwLock<Option<Conn>>,
    /// Why the last connection attempt failed, for the answers while there is no connection.
    connect_error: RwLock<Option<String>>,
    timeout: Duration,
    /// When the current run of failed round trips began (ms since `born`, plus 1; 0 while the
    /// last round trip worked): what tells a connection that cannot heal itself.
    failing_since: AtomicU64,
    born: Instant,
}

/// A connection on which every round trip has failed for this long is replaced by a new one.
/// redis-rs's Cluster connection can stay broken for good after all masters restarted (its slot
/// refresh retries the dead sockets it holds and never reconnects them); a single node's
/// `ConnectionManager` heals itself, and a rebuild costs it nothing either.
const REBUILD_AFTER: Duration = Duration::from_secs(2);
/// How often the connection's health is looked at, and the first connection retried.
const SUPERVISE_EVERY: Duration = Duration::from_millis(250);

/// PING the node, or every Cluster master at once (answered when any one answers).
async fn ping(c: Conn) -> RedisResult<Value> {
    let ping = redis::cmd("PING");
    match c {
        Conn::Single(mut c) => ping.query_async(&mut c).await,
        Conn::Cluster(mut c) => {
            let all = (
                MultipleNodeRoutingInfo::AllMasters,
                Some(ResponsePolicy::OneSucceeded),
            );
            c.route_command(&ping, RoutingInfo::MultiNode(all)).await
        }
    }
}

fn duration_ms(d: Duration) -> u64 {
    u64::try_from(d.as_millis()).unwrap_or(u64::MAX)
}

/// A client for one node, with the `--redis-ca-file` roots when given (else the system's).
pub fn client(target: &RedisTarget, node: &ConnectionInfo) -> RedisResult<redis::Client> {
    match &target.ca_pem {
        Some(pem) => redis::Client::build_with_tls(node.clone(), certs(pem)),
        None => redis::Client::open(node.clone()),
    }
}

fn certs(pem: &[u8]) -> TlsCertificates {
    TlsCertificates {
        client_tls: None,
        root_cert: Some(pem.to_vec()),
    }
}

/// A Cluster client: `response_timeout` bounds one command (blocking ones included).
pub fn cluster_client(
    target: &RedisTarget,
    connect_timeout: Duration,
    response_timeout: Duration,
) -> RedisResult<ClusterClient> {
    let mut b = ClusterClientBuilder::new(target.nodes.clone())
        .connection_timeout(connect_timeout)
        .response_timeout(response_timeout)
        .retries(3)
        .min_retry_wait(5)
        .max_retry_wait(50);
    if let Some(pem) = &target.ca_pem {
        b = b.certs(certs(pem));
    }
    b.build()
}

async fn open(target: &RedisTarget, timeout: Duration) -> RedisResult<Conn> {
    let connect_timeout = timeout.max(Duration::from_millis(100));
    if target.cluster {
        let client = cluster_client(
            target,
            connect_timeout,
            timeout.max(Duration::from_millis(500)),
        )?;
        return Ok(Conn::Cluster(client.get_async_connection().await?));
    }
    let node = target
        .nodes
        .first()
        .ok_or_else(|| RedisError::from((ErrorKind::InvalidClientConfig, "no Redis node")))?;
    // No retry loop inside the manager: a reconnect is one attempt, started by the first
    // command that finds the connection broken (commands during it wait for it, bounded by
    // our timeout). With retries its backoff starts at 1 s (backon's minimum) and grows to
    // minutes, and every command would wait on the whole backoff: that is what made a
    // restarted Redis unreachable for long.
    let config = ConnectionManagerConfig::new()
        .set_number_of_retries(0)
        .set_connection_timeout(connect_timeout)
        .set_response_timeout(timeout.max(Duration::from_millis(500)));
    Ok(Conn::Single(
        ConnectionManager::new_with_config(client(target, node)?, config).await?,
    ))
}

pub(crate) fn int(v: Option<&Value>) -> Option<i64> {
    match v? {
        Value::Int(n) => Some(*n),
        _ => None,
    }
}

pub(crate) fn bytes(v: Option<&Value>) -> Option<Vec<u8>> {
    match v? {
        Value::BulkString(b) => Some(b.clone()),
        Value::SimpleString(s) => Some(s.clone().into_bytes()),
        _ => None,
    }
}

pub(crate) fn text(v: Option<&Value>) -> Option<String> {
    bytes(v).and_then(|b| String::from_utf8(b).ok())
}

pub(crate) fn array(v: Option<&Value>) -> Option<&[Value]> {
    match v? {
        Value::Array(a) => Some(a),
        _ => None,
    }
}

/// Takes the reply apart without copying the value (up to --max-value-bytes).
fn parse_lookup(v: Value) -> Option<Lookup> {
    let Value::Array(a) = v else {
        return None;
    };
    let mut a = a.into_iter();
    match int(a.next().as_ref())? {
        1 => {
            let value = match a.next()? {
                Value::BulkString(b) => b,
                _ => return None,
            };
            Some(Lookup::Hit {
                value,
                ttl_ms: int(a.next().as_ref()).unwrap_or(-1),
            })
        }
        2 => Some(Lookup::Lead),
        3 => Some(Lookup::Busy {
            lease_ms: int(a.next().as_ref()).unwrap_or(-1),
        }),
        _ => None,
    }
}

/// An `MGET` reply of `n` values: each a current-version value (its version byte taken off), or
/// absent (nil, or another version).
fn parse_mget(v: Value, n: usize) -> Option<Vec<Option<Vec<u8>>>> {
    let Value::Array(a) = v else {
        return None;
    };
    if a.len() != n {
        return None;
    }
    a.into_iter()
        .map(|v| match v {
            Value::Nil => Some(None),
            Value::BulkString(mut b) if b.first() == Some(&VALUE_VERSION) && b.len() > 1 => {
                b.remove(0);
                Some(Some(b))
            }
            Value::BulkString(_) => Some(None),
            _ => None,
        })
        .collect()
}

impl Backend {
    pub fn new(target: RedisTarget, timeout: Duration) -> Arc<Backend> {
        Arc::new(Backend {
            target,
            conn: RwLock::new(None),
            connect_error: RwLock::new(None),
            timeout,
            failing_since: AtomicU64::new(0),
            born: Instant::now(),
        })
    }

    fn since_born_ms(&self) -> u64 {
        u64::try_from(self.born.elapsed().as_millis()).unwrap_or(u64::MAX - 1) + 1
    }

    fn note(&self, worked: bool) {
        if worked {
            self.failing_since.store(0, Ordering::Relaxed);
        } else {
            let now = self.since_born_ms();
            let _ =
                self.failing_since
                    .compare_exchange(0, now, Ordering::Relaxed, Ordering::Relaxed);
        }
    }

    /// Whether every round trip has failed for at least `REBUILD_AFTER`.
    fn stuck(&self) -> bool {
        let since = self.failing_since.load(Ordering::Relaxed);
        since != 0 && self.since_born_ms().saturating_sub(since) >= duration_ms(REBUILD_AFTER)
    }

    fn current(&self) -> Option<Conn> {
        match self.conn.read() {
            Ok(g) => g.clone(),
            Err(poisoned) => poisoned.into_inner().clone(),
        }
    }

    fn set(&self, c: Conn) {
        match self.conn.write() {
            Ok(mut g) => *g = Some(c),
            Err(poisoned) => *poisoned.into_inner() = Some(c),
        }
    }

    /// Opens the connection, retrying every 250 ms until it works, then watches it for good:
    /// a connection on which nothing has worked for `REBUILD_AFTER` is replaced by a new one
    /// (kept only once it answers a PING), counted in `rebuilds`.
    pub async fn keep_connected(self: Arc<Self>, rebuilds: impl Fn()) {
        self.connect_until_up().await;
        loop {
            tokio::time::sleep(SUPERVISE_EVERY).await;
            if !self.stuck() {
                continue;
            }
            match self.fresh_connection().await {
                Ok(c) => {
                    self.set(c);
                    self.failing_since.store(0, Ordering::Relaxed);
                    rebuilds();
                    eprintln!(
                        "graphql-cache-l2: redis connection rebuilt after {} s of failed round trips",
                        REBUILD_AFTER.as_secs()
                    );
                }
                // Keep the old one (it may still heal); try again on the next look.
                Err(_) => self
                    .failing_since
                    .store(self.since_born_ms(), Ordering::Relaxed),
            }
        }
    }

    /// A new connection that has answered a PING.
    async fn fresh_connection(&self) -> Result<Conn, Fail> {
        let limit = Duration::from_secs(2);
        let c = match tokio::time::timeout(limit, open(&self.target, self.timeout)).await {
            Ok(Ok(c)) => c,
            Ok(Err(e)) => return Err(Fail::Redis(e)),
            Err(_) => return Err(Fail::Timeout),
        };
        match tokio::time::timeout(limit, ping(c.clone())).await {
            Ok(Ok(Value::ServerError(_))) => Err(Fail::Reply("PING")),
            Ok(Ok(_)) => Ok(c),
            Ok(Err(e)) => Err(Fail::Redis(e)),
            Err(_) => Err(Fail::Timeout),
        }
    }

    async fn connect_until_up(&self) {
        let mut attempts: u64 = 0;
        loop {
            let attempt =
                tokio::time::timeout(Duration::from_secs(2), open(&self.target, self.timeout));
            let error = match attempt.await {
                Ok(Ok(c)) => {
                    self.set(c);
                    if attempts > 0 {
                        eprintln!("graphql-cache-l2: connected to redis");
                    }
                    return;
                }
                Ok(Err(e)) => e.to_string(),
                Err(_) => "timeout".to_string(),
            };
            match self.connect_error.write() {
                Ok(mut g) => *g = Some(error.clone()),
                Err(poisoned) => *poisoned.into_inner() = Some(error.clone()),
            }
            // The first failure, then one line a minute.
            if attempts.is_multiple_of(240) {
                eprintln!("graphql-cache-l2: connecting to redis: {error} (retrying every 250 ms)");
            }
            attempts += 1;
            tokio::time::sleep(SUPERVISE_EVERY).await;
        }
    }

    pub fn is_connected(&self) -> bool {
        self.current().is_some()
    }

    /// One round trip on the shared connection, bounded by `--redis-timeout-ms`: the verbs of
    /// other modules (the purge log's) go through it too, so they fail and heal like these.
    pub(crate) async fn round_trip<T, F, Fut>(&self, f: F) -> Result<T, Fail>
    where
        F: FnOnce(Conn) -> Fut,
        Fut: Future<Output = RedisResult<T>>,
    {
        self.exec(self.timeout, f).await
    }

    /// Runs one round trip on the shared connection, bounded by `limit`.
    async fn exec<T, F, Fut>(&self, limit: Duration, f: F) -> Result<T, Fail>
    where
        F: FnOnce(Conn) -> Fut,
        Fut: Future<Output = RedisResult<T>>,
    {
        let Some(conn) = self.current() else {
            let why = match self.connect_error.read() {
                Ok(g) => g.clone(),
                Err(poisoned) => poisoned.into_inner().clone(),
            };
            return Err(Fail::NotConnected(why));
        };
        let result = match tokio::time::timeout(limit, f(conn)).await {
            Ok(Ok(v)) => Ok(v),
            Ok(Err(e)) => Err(Fail::Redis(e)),
            Err(_) => Err(Fail::Timeout),
        };
        self.note(result.is_ok());
        result
    }

    /// PING: the node, or every Cluster master at once; Ok if any one answers (one master down
    /// costs only its own keys, not the service).
    pub async fn ping_any(&self, limit: Duration) -> Result<(), Fail> {
        match self.exec(limit, ping).await? {
            Value::ServerError(_) => Err(Fail::Reply("PING")),
            _ => Ok(()),
        }
    }

    pub async fn lookup(&self, k: &Keys, owner: &str, lease_ms: u64) -> Result<Lookup, Fail> {
        let v: Value = self
            .exec(self.timeout, |mut c| async move {
                let mut inv = LOOKUP.prepare_invoke();
                inv.key(&k.value).key(&k.lease).arg(owner).arg(lease_ms);
                inv.invoke_async(&mut c).await
            })
            .await?;
        parse_lookup(v).ok_or(Fail::Reply("lookup script"))
    }

    /// Stores `[VALUE_VERSION] + body`; returns whether `owner`'s lease was released.
    pub async fn store(
        &self,
        k: &Keys,
        owner: &str,
        ttl_ms: u64,
        body: &[u8],
    ) -> Result<bool, Fail> {
        let mut versioned = Vec::with_capacity(body.len() + 1);
        versioned.push(VALUE_VERSION);
        versioned.extend_from_slice(body);
        let versioned = &versioned;
        let n: i64 = self
            .exec(self.timeout, |mut c| async move {
                let mut inv = STORE.prepare_invoke();
                inv.key(&k.value)
                    .key(&k.lease)
                    .arg(ttl_ms)
                    .arg(owner)
                    .arg(versioned.as_slice())
                    .arg(&k.channel);
                inv.invoke_async(&mut c).await
            })
            .await?;
        Ok(n == 1)
    }

    pub async fn release(&self, k: &Keys, owner: &str) -> Result<bool, Fail> {
        let n: i64 = self
            .exec(self.timeout, |mut c| async move {
                let mut inv = RELEASE.prepare_invoke();
                inv.key(&k.lease).arg(owner).arg(&k.channel);
                inv.invoke_async(&mut c).await
            })
            .await?;
        Ok(n == 1)
    }

    /// The values of `hexes` (absent: `None`), in their order: ONE `MGET` of their value names.
    /// On a single node that is one round trip; on a Cluster redis-rs splits it by slot and sends
    /// the parts to their masters at once (pipelined on each master's one connection), so the
    /// call waits for one round trip per master, in parallel. Any part failing fails the call.
    pub async fn mget(&self, hexes: &[String]) -> Result<Vec<Option<Vec<u8>>>, Fail> {
        let names: Vec<String> = hexes.iter().map(|h| Keys::new(h).value).collect();
        let names = &names;
        let v: Value = self
            .exec(self.timeout, |mut c| async move {
                redis::cmd("MGET").arg(names).query_async(&mut c).await
            })
            .await?;
        parse_mget(v, hexes.len()).ok_or(Fail::Reply("MGET"))
    }

    /// Stores each `(hex, ttl_ms, body)` as `[VALUE_VERSION] + body` with `PX ttl_ms`: no lease,
    /// no wake-up (nobody waits for an entity). On a single node, one pipeline of `SET`s: one
    /// round trip. A Cluster refuses a pipeline across slots, so there every `SET` goes at once
    /// to its master (pipelined on each master's one connection).
    pub async fn mstore(&self, items: &[(String, u64, &[u8])]) -> Result<(), Fail> {
        let sets: Vec<Cmd> = items
            .iter()
            .map(|(hex, ttl_ms, body)| {
                let mut versioned = Vec::with_capacity(body.len() + 1);
                versioned.push(VALUE_VERSION);
                versioned.extend_from_slice(body);
                let mut set = redis::cmd("SET");
                set.arg(Keys::new(hex).value)
                    .arg(versioned)
                    .arg("PX")
                    .arg(*ttl_ms);
                set
            })
            .collect();
        let sets = &sets;
        self.exec(self.timeout, |c| async move {
            match c {
                Conn::Single(mut c) => {
                    let mut pipe = redis::pipe();
                    for set in sets {
                        pipe.add_command(set.clone()).ignore();
                    }
                    pipe.query_async::<()>(&mut c).await
                }
                Conn::Cluster(c) => {
                    let each = sets.iter().map(|set| {
                        let mut c = c.clone();
                        async move { set.query_async::<()>(&mut c).await }
                    });
                    futures_util::future::try_join_all(each).await.map(|_| ())
                }
            }
        })
        .await
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]
mod tests {
    use super::*;

    #[test]
    fn only_an_unbroken_run_of_failures_makes_a_connection_stuck() {
        let target = RedisTarget {
            cluster: true,
            nodes: Vec::new(),
            ca_pem: None,
        };
        let mut b = Backend::new(target, Duration::from_millis(50));
        let b = Arc::get_mut(&mut b).unwrap();
        b.born = Instant::now() - Duration::from_secs(60);
        assert!(!b.stuck(), "nothing has failed yet");
        b.note(false);
        assert!(!b.stuck(), "a failure just now is not yet a run");
        b.failing_since
            .store(b.since_born_ms() - 2_001, Ordering::Relaxed);
        b.note(false);
        assert!(b.stuck(), "a later failure keeps the run's start");
        b.note(true);
        assert!(!b.stuck(), "one round trip that worked ends the run");
    }

    #[test]
    fn names_share_the_hash_tag() {
        let hex = "ab".repeat(32);
        let k = Keys::new(&hex);
        assert_eq!(k.value, format!("gc:{{{hex}}}:v"));
        assert_eq!(k.lease, format!("gc:{{{hex}}}:l"));
        assert_eq!(channel_key(&k.channel), Some(hex.as_str()));
        assert_eq!(channel_key("gc:{abc}:d"), None);
        assert_eq!(channel_key("other"), None);
    }

    #[test]
    fn parses_script_replies() {
        let hit = Value::Array(vec![
            Value::Int(1),
            Value::BulkString(b"xy".to_vec()),
            Value::Int(900),
        ]);
        match parse_lookup(hit) {
            Some(Lookup::Hit { value, ttl_ms }) => {
                assert_eq!(value, b"xy");
                assert_eq!(ttl_ms, 900);
            }
            _ => panic!("not a hit"),
        }
        assert!(matches!(
            parse_lookup(Value::Array(vec![Value::Int(2)])),
            Some(Lookup::Lead)
        ));
        assert!(matches!(
            parse_lookup(Value::Array(vec![Value::Int(3), Value::Int(40)])),
            Some(Lookup::Busy { lease_ms: 40 })
        ));
        assert!(parse_lookup(Value::Nil).is_none());
        let m = Value::Array(vec![
            Value::BulkString(b"\x01ab".to_vec()),
            Value::Nil,
            Value::BulkString(b"\x02old".to_vec()),
            Value::BulkString(b"\x01".to_vec()),
        ]);
        assert_eq!(
            parse_mget(m.clone(), 4).unwrap(),
            vec![Some(b"ab".to_vec()), None, None, None]
        );
        assert!(parse_mget(m, 3).is_none(), "not one value per key");
        assert!(parse_mget(Value::Array(vec![Value::Int(1)]), 1).is_none());
    }
}
