//! Test harness: Redis servers and the service as child processes (killed by Drop guards), and a
//! tiny blocking HTTP/1.1 client.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic, dead_code)]

use std::io::{BufRead, BufReader, Read, Write};
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::sync::mpsc;
use std::time::{Duration, Instant};

/// Cargo's build of the service for this package's tests. The filter's fleet tests include this
/// file too (another package: no such variable) and start their binary with [`L2::start_bin`].
pub const BIN: &str = match option_env!("CARGO_BIN_EXE_graphql-cache-l2") {
    Some(bin) => bin,
    None => "graphql-cache-l2",
};

/// The fixed development secret every test (and the demo, the bench, the fleet tests) gives the
/// service in `GRAPHQL_CACHE_L2_SECRET`; the filter's test configuration sends the same.
pub const DEV_SECRET: &str = "dev-l2-secret-change-me-0123456789";

/// A port nobody listens on now, whose cluster-bus twin (+10000) is free too.
pub fn free_port() -> u16 {
    for _ in 0..200 {
        let l = TcpListener::bind("127.0.0.1:0").unwrap();
        let p = l.local_addr().unwrap().port();
        if p < 55000 && TcpListener::bind(("127.0.0.1", p + 10000)).is_ok() {
            return p;
        }
    }
    panic!("no free port");
}

pub fn temp_dir(tag: &str) -> PathBuf {
    let d = std::env::temp_dir().join(format!(
        "graphql-cache-l2-{tag}-{}-{}",
        std::process::id(),
        free_port()
    ));
    std::fs::create_dir_all(&d).unwrap();
    d
}

pub struct Redis {
    pub port: u16,
    child: Option<Child>,
    dir: PathBuf,
    extra: Vec<String>,
    /// `user:password` the harness itself connects with (a server started with ACLs).
    creds: Option<String>,
}

impl Redis {
    pub fn start() -> Redis {
        Self::start_on(free_port(), &[])
    }

    pub fn start_on(port: u16, extra: &[String]) -> Redis {
        Self::start_as(port, extra, None)
    }

    /// `creds`: `user:password` for the harness's own connections (the server's ACL comes in
    /// `extra`).
    pub fn start_as(port: u16, extra: &[String], creds: Option<&str>) -> Redis {
        let dir = temp_dir(&format!("redis{port}"));
        let mut r = Redis {
            port,
            child: None,
            dir,
            extra: extra.to_vec(),
            creds: creds.map(str::to_string),
        };
        r.restart();
        r
    }

    /// Whether the harness connects with credentials (the server asks for them).
    pub fn has_credentials(&self) -> bool {
        self.creds.is_some()
    }

    /// The URL without credentials.
    pub fn url(&self) -> String {
        format!("redis://127.0.0.1:{}", self.port)
    }

    fn admin_url(&self) -> String {
        match &self.creds {
            Some(c) => format!("redis://{c}@127.0.0.1:{}", self.port),
            None => self.url(),
        }
    }

    pub fn dir(&self) -> &PathBuf {
        &self.dir
    }

    /// SIGKILL, as a crash.
    pub fn kill(&mut self) {
        if let Some(mut c) = self.child.take() {
            let _ = c.kill();
            let _ = c.wait();
        }
    }

    pub fn restart(&mut self) {
        self.kill();
        let child = Command::new("redis-server")
            .args(["--port", &self.port.to_string()])
            .args(["--save", "", "--appendonly", "no"])
            .args(["--bind", "127.0.0.1"])
            .arg("--dir")
            .arg(&self.dir)
            .args(&self.extra)
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("redis-server on PATH");
        self.child = Some(child);
        let deadline = Instant::now() + Duration::from_secs(10);
        while Instant::now() < deadline {
            if self.try_cmd(&["PING"]).is_ok() {
                return;
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        panic!("redis-server on port {} did not start", self.port);
    }

    pub fn try_cmd(&self, args: &[&str]) -> redis::RedisResult<redis::Value> {
        let client = redis::Client::open(self.admin_url())?;
        let mut c = client.get_connection_with_timeout(Duration::from_secs(1))?;
        let mut cmd = redis::cmd(args[0]);
        for a in &args[1..] {
            cmd.arg(*a);
        }
        cmd.query(&mut c)
    }

    pub fn cmd(&self, args: &[&[u8]]) -> redis::Value {
        let client = redis::Client::open(self.admin_url()).unwrap();
        let mut c = client.get_connection().unwrap();
        let mut cmd = redis::cmd(std::str::from_utf8(args[0]).unwrap());
        for a in &args[1..] {
            cmd.arg(*a);
        }
        cmd.query(&mut c).unwrap()
    }

    pub fn info(&self, args: &[&str]) -> String {
        match self.try_cmd(args).unwrap() {
            redis::Value::BulkString(b) => String::from_utf8(b).unwrap(),
            redis::Value::VerbatimString { text, .. } => text,
            other => format!("{other:?}"),
        }
    }
}

impl Drop for Redis {
    fn drop(&mut self) {
        self.kill();
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

/// A Redis Cluster: 3 masters, without replicas unless started [`Cluster::start_with`] them.
pub struct Cluster {
    pub nodes: Vec<Redis>,
}

impl Cluster {
    pub fn start() -> Cluster {
        Self::start_with(3, 0)
    }

    /// `masters` masters, each with `replicas` replicas; a master that stops answering for a
    /// second is failed over to its replica.
    pub fn start_with(masters: usize, replicas: usize) -> Cluster {
        let mut nodes = Vec::new();
        for _ in 0..masters * (1 + replicas) {
            let port = free_port();
            // Relative to the node's own --dir (a fresh temporary directory).
            let extra = vec![
                "--cluster-enabled".to_string(),
                "yes".to_string(),
                "--cluster-config-file".to_string(),
                format!("nodes-{port}.conf"),
                "--cluster-node-timeout".to_string(),
                "1000".to_string(),
                // A cache keeps serving the slots that are up (Redis's default stops them all).
                "--cluster-require-full-coverage".to_string(),
                "no".to_string(),
                // A replica takes over however long ago it last heard from its master.
                "--cluster-replica-validity-factor".to_string(),
                "0".to_string(),
            ];
            nodes.push(Redis::start_on(port, &extra));
        }
        let mut create = Command::new("redis-cli");
        create.arg("--cluster").arg("create");
        for n in &nodes {
            create.arg(format!("127.0.0.1:{}", n.port));
        }
        let out = create
            .args(["--cluster-replicas", &replicas.to_string(), "--cluster-yes"])
            .output()
            .expect("redis-cli on PATH");
        assert!(
            out.status.success(),
            "redis-cli --cluster create: {}{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        );
        let cluster = Cluster { nodes };
        cluster.wait_ok();
        cluster.wait_replicas_synced();
        cluster
    }

    /// Waits until every replica has its master's data (a replica that never synced does not
    /// take over).
    fn wait_replicas_synced(&self) {
        let deadline = Instant::now() + Duration::from_secs(30);
        for n in &self.nodes {
            loop {
                let info = n.info(&["INFO", "replication"]);
                if info.contains("role:master") || info.contains("master_link_status:up") {
                    break;
                }
                assert!(Instant::now() < deadline, "a replica never synced: {info}");
                std::thread::sleep(Duration::from_millis(50));
            }
        }
    }

    /// The node that is master of `key`'s slot now (as the first answering node sees it).
    pub fn master_of(&self, key: &str) -> usize {
        let slot = self
            .nodes
            .iter()
            .find_map(|n| n.try_cmd(&["CLUSTER", "KEYSLOT", key]).ok())
            .and_then(|v| redis::from_redis_value::<i64>(&v).ok())
            .expect("CLUSTER KEYSLOT");
        let view = self
            .nodes
            .iter()
            .find_map(|n| n.try_cmd(&["CLUSTER", "NODES"]).ok())
            .and_then(|v| redis::from_redis_value::<String>(&v).ok())
            .expect("CLUSTER NODES");
        for line in view.lines() {
            let fields: Vec<&str> = line.split(' ').collect();
            if fields.len() < 9 || !fields[2].contains("master") || fields[2].contains("fail") {
                continue;
            }
            let owns = fields[8..].iter().any(|range| {
                let (a, b) = range.split_once('-').unwrap_or((range, range));
                matches!((a.parse::<i64>(), b.parse::<i64>()), (Ok(a), Ok(b)) if a <= slot && slot <= b)
            });
            if owns {
                let port: u16 = fields[1]
                    .split(['@', ':'])
                    .nth(1)
                    .and_then(|p| p.parse().ok())
                    .expect("node address");
                return self
                    .nodes
                    .iter()
                    .position(|n| n.port == port)
                    .expect("known node");
            }
        }
        panic!("no master owns slot {slot}")
    }

    /// Waits until every node reports `cluster_state:ok` (after a create or a restart).
    pub fn wait_ok(&self) {
        let deadline = Instant::now() + Duration::from_secs(30);
        loop {
            let ok = self
                .nodes
                .iter()
                .all(|n| n.info(&["CLUSTER", "INFO"]).contains("cluster_state:ok"));
            if ok {
                return;
            }
            assert!(Instant::now() < deadline, "cluster_state never became ok");
            std::thread::sleep(Duration::from_millis(100));
        }
    }

    pub fn urls(&self) -> String {
        self.nodes
            .iter()
            .map(Redis::url)
            .collect::<Vec<_>>()
            .join(",")
    }
}

pub struct L2 {
    pub addr: SocketAddr,
    child: Child,
}

impl L2 {
    pub fn start(args: &[&str]) -> L2 {
        Self::start_bin(std::path::Path::new(BIN), args)
    }

    /// With `GRAPHQL_CACHE_L2_SECRET` = [`DEV_SECRET`] (unless `args` turn authentication off).
    pub fn start_bin(bin: &std::path::Path, args: &[&str]) -> L2 {
        let mut cmd = Command::new(bin);
        if !args.contains(&"--insecure-no-auth") {
            cmd.env("GRAPHQL_CACHE_L2_SECRET", DEV_SECRET);
        }
        let mut child = cmd
            .args(["--listen", "127.0.0.1:0"])
            .args(args)
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit())
            .spawn()
            .unwrap();
        let stdout = child.stdout.take().unwrap();
        let (tx, rx) = mpsc::channel();
        std::thread::spawn(move || {
            let mut lines = BufReader::new(stdout).lines();
            while let Some(Ok(line)) = lines.next() {
                if let Some(a) = line.strip_prefix("listening on ") {
                    let _ = tx.send(a.parse::<SocketAddr>().unwrap());
                }
            }
        });
        let addr = match rx.recv_timeout(Duration::from_secs(20)) {
            Ok(a) => a,
            Err(_) => {
                let _ = child.kill();
                panic!("the service never printed `listening on`");
            }
        };
        assert_ne!(addr.port(), 0);
        L2 { addr, child }
    }

    pub fn single(redis: &Redis, extra: &[&str]) -> L2 {
        let url = redis.url();
        let mut args = vec!["--redis", url.as_str()];
        args.extend_from_slice(extra);
        L2::start(&args)
    }

    pub fn get(&self, path: &str) -> Resp {
        http(self.addr, "GET", path, b"")
    }

    pub fn post(&self, path: &str, body: &[u8]) -> Resp {
        http(self.addr, "POST", path, body)
    }

    pub fn put(&self, path: &str, body: &[u8]) -> Resp {
        http(self.addr, "PUT", path, body)
    }

    pub fn lookup(&self, key: &str, owner: &str, lease_ms: u64, wait_ms: u64) -> Resp {
        self.post(
            &format!("/v1/lookup?key={key}&lease_ms={lease_ms}&owner={owner}&wait_ms={wait_ms}"),
            b"",
        )
    }

    pub fn store(&self, key: &str, owner: &str, ttl_ms: u64, value: &[u8]) -> Resp {
        self.put(
            &format!("/v1/store?key={key}&ttl_ms={ttl_ms}&owner={owner}"),
            value,
        )
    }

    /// One sample of a metric line (`name{labels}` exactly as printed).
    pub fn metric(&self, series: &str) -> i64 {
        let text = String::from_utf8(self.get("/metrics").body).unwrap();
        for line in text.lines() {
            if let Some(v) = line.strip_prefix(series).and_then(|r| r.strip_prefix(' ')) {
                return v.trim().parse().unwrap();
            }
        }
        panic!("no series {series} in\n{text}");
    }

    /// Waits until `n` long-polls are in flight.
    pub fn wait_in_flight(&self, n: i64) {
        let deadline = Instant::now() + Duration::from_secs(10);
        while self.metric("l2_long_polls_in_flight") < n {
            assert!(Instant::now() < deadline, "long-poll never started");
            std::thread::sleep(Duration::from_millis(2));
        }
    }

    pub fn wait_subscribed(&self) {
        self.wait_subscribed_n(1);
    }

    /// Waits until `n` wake-up subscriber connections are subscribed.
    pub fn wait_subscribed_n(&self, n: i64) {
        let deadline = Instant::now() + Duration::from_secs(10);
        while self.metric("l2_pubsub_connected") != n {
            assert!(
                Instant::now() < deadline,
                "wake-up subscribers: {} subscribed, not {n}",
                self.metric("l2_pubsub_connected")
            );
            std::thread::sleep(Duration::from_millis(10));
        }
    }
}

impl Drop for L2 {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

#[derive(Debug)]
pub struct Resp {
    pub status: u16,
    pub headers: Vec<(String, String)>,
    pub body: Vec<u8>,
}

impl Resp {
    pub fn header(&self, name: &str) -> Option<&str> {
        self.headers
            .iter()
            .find(|(k, _)| k.eq_ignore_ascii_case(name))
            .map(|(_, v)| v.as_str())
    }

    pub fn l2(&self) -> &str {
        self.header("x-l2").unwrap_or("")
    }

    pub fn text(&self) -> String {
        String::from_utf8_lossy(&self.body).into_owned()
    }
}

/// One HTTP/1.1 request on a new connection (`connection: close`), with the dev secret.
pub fn http(addr: SocketAddr, method: &str, path: &str, body: &[u8]) -> Resp {
    let auth = format!("authorization: Bearer {DEV_SECRET}\r\n");
    http_raw(addr, method, path, body, &auth)
}

/// One HTTP/1.1 request; `extra`: more header lines, each ending in CRLF.
pub fn http_raw(addr: SocketAddr, method: &str, path: &str, body: &[u8], extra: &str) -> Resp {
    let mut s = TcpStream::connect(addr).unwrap();
    s.set_nodelay(true).unwrap();
    s.set_read_timeout(Some(Duration::from_secs(30))).unwrap();
    let head = format!(
        "{method} {path} HTTP/1.1\r\nhost: l2\r\nconnection: close\r\n{extra}content-length: {}\r\n\r\n",
        body.len()
    );
    let mut req = head.into_bytes();
    req.extend_from_slice(body);
    // The server may answer (413) and close before reading a large body: ignore write errors.
    let _ = s.write_all(&req);
    let mut raw = Vec::new();
    let _ = s.read_to_end(&mut raw);
    parse_response(&raw)
}

fn parse_response(raw: &[u8]) -> Resp {
    let split = raw
        .windows(4)
        .position(|w| w == b"\r\n\r\n")
        .unwrap_or_else(|| panic!("no response head in {:?}", String::from_utf8_lossy(raw)));
    let head = std::str::from_utf8(&raw[..split]).unwrap();
    let mut lines = head.split("\r\n");
    let status_line = lines.next().unwrap();
    let status: u16 = status_line.split(' ').nth(1).unwrap().parse().unwrap();
    let headers: Vec<(String, String)> = lines
        .filter_map(|l| l.split_once(':'))
        .map(|(k, v)| (k.trim().to_ascii_lowercase(), v.trim().to_string()))
        .collect();
    let mut body = raw[split + 4..].to_vec();
    if let Some(n) = headers
        .iter()
        .find(|(k, _)| k == "content-length")
        .and_then(|(_, v)| v.parse::<usize>().ok())
    {
        body.truncate(n);
    }
    Resp {
        status,
        headers,
        body,
    }
}

/// A fresh random-looking 64-hex key.
pub fn key(tag: &str) -> String {
    use std::hash::{BuildHasher, Hasher};
    let mut out = String::new();
    let state = std::collections::hash_map::RandomState::new();
    for i in 0..4 {
        let mut h = state.build_hasher();
        h.write(tag.as_bytes());
        h.write_usize(i);
        out.push_str(&format!("{:016x}", h.finish()));
    }
    out
}

pub fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(|a, b| a.partial_cmp(b).unwrap());
    v[v.len() / 2]
}

pub fn report(what: &str, samples: &[(f64, f64)]) {
    let wake: Vec<f64> = samples.iter().map(|s| s.0).collect();
    let store: Vec<f64> = samples.iter().map(|s| s.1).collect();
    let max = wake.iter().cloned().fold(0.0, f64::max);
    println!(
        "{what}: wake-up latency (store sent -> waiter answered) p50 {:.2} ms, max {:.2} ms over {} rounds; the store's own round trip p50 {:.2} ms",
        median(wake),
        max,
        samples.len(),
        median(store)
    );
}

/// The lookup / store / wait flow on any backend: empty key → lead, second owner → busy, a
/// waiter is woken by the leader's store and gets the value. Returns, per round, in ms: the wake-up
/// latency (store request sent → waiter's answer received) and the store's own round trip.
pub fn lookup_store_wait(l2: &L2, rounds: usize) -> Vec<(f64, f64)> {
    let mut latencies = Vec::new();
    for round in 0..rounds {
        let k = key(&format!("lsw{round}"));
        let r = l2.lookup(&k, "node-a", 5000, 0);
        assert_eq!((r.status, r.l2()), (200, "lead"), "{}", r.text());
        assert!(r.body.is_empty());
        let r = l2.lookup(&k, "node-b", 5000, 0);
        assert_eq!((r.status, r.l2()), (200, "busy"), "{}", r.text());

        let before = l2.metric("l2_long_polls_in_flight");
        let addr = l2.addr;
        let k2 = k.clone();
        let waiter = std::thread::spawn(move || {
            let r = http(
                addr,
                "POST",
                &format!("/v1/lookup?key={k2}&lease_ms=5000&owner=node-c&wait_ms=3000"),
                b"",
            );
            (r, Instant::now())
        });
        l2.wait_in_flight(before + 1);
        let value = format!("{{\"data\":{{\"round\":{round}}}}}");
        let started = Instant::now();
        let s = l2.store(&k, "node-a", 60_000, value.as_bytes());
        let stored = Instant::now();
        assert_eq!(s.status, 204, "{}", s.text());
        let (r, woke) = waiter.join().unwrap();
        assert_eq!((r.status, r.l2()), (200, "hit"), "{}", r.text());
        assert_eq!(r.body, value.as_bytes());
        assert!(woke.duration_since(started) < Duration::from_secs(1));
        let ms = |d: Duration| d.as_secs_f64() * 1000.0;
        latencies.push((
            ms(woke.duration_since(started)),
            ms(stored.duration_since(started)),
        ));

        // The leader's lease went with its store: the value now hits for everyone.
        let r = l2.lookup(&k, "node-d", 5000, 0);
        assert_eq!((r.status, r.l2()), (200, "hit"));
        assert_eq!(r.body, value.as_bytes());
    }
    latencies
}
