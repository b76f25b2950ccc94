//! Redis as child processes (killed by Drop): one node, with or without a password, or a
//! Cluster of masters with or without replicas; and [`RedisBackend`], the L2's Redis of a kind.

use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use crate::{free_port, scratch_dir};

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
        let dir = scratch_dir(&format!("redis{port}"));
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

/// A Redis Cluster: 3 masters, without replicas unless [`Cluster::start_with`] starts them.
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

/// The kind of Redis behind the L2.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Backend {
    Single,
    Cluster,
    /// 3 masters, each with a replica that takes over when it fails.
    ReplicatedCluster,
    /// One node that answers only clients with its password (`requirepass`).
    SingleWithPassword,
}

/// The password of [`Backend::SingleWithPassword`].
pub const REDIS_PASSWORD: &str = "redis-pw-0123456789";

/// A running Redis of a [`Backend`] kind.
pub enum RedisBackend {
    Single(Redis),
    Cluster(Cluster),
}

impl RedisBackend {
    pub fn start(backend: Backend) -> RedisBackend {
        match backend {
            Backend::Single => RedisBackend::Single(Redis::start()),
            Backend::Cluster => RedisBackend::Cluster(Cluster::start()),
            Backend::ReplicatedCluster => RedisBackend::Cluster(Cluster::start_with(3, 1)),
            Backend::SingleWithPassword => RedisBackend::Single(Redis::start_as(
                free_port(),
                &["--requirepass".to_string(), REDIS_PASSWORD.to_string()],
                Some(&format!("default:{REDIS_PASSWORD}")),
            )),
        }
    }

    /// The L2 service's flags that point it at this Redis (with the password it needs).
    pub fn l2_args(&self) -> [String; 2] {
        match self {
            RedisBackend::Single(r) if r.has_credentials() => [
                "--redis".into(),
                r.url()
                    .replace("redis://", &format!("redis://:{REDIS_PASSWORD}@")),
            ],
            RedisBackend::Single(r) => ["--redis".into(), r.url()],
            RedisBackend::Cluster(c) => ["--redis-cluster".into(), c.urls()],
        }
    }

    /// SIGKILL, as a crash. A Cluster loses all three masters: the whole L2 is gone, as with one
    /// node (with one master gone, keys on the other two would still be served).
    pub fn kill(&mut self) {
        match self {
            RedisBackend::Single(r) => r.kill(),
            RedisBackend::Cluster(c) => c.nodes.iter_mut().for_each(Redis::kill),
        }
    }

    /// Starts the killed nodes again on their ports, empty (no persistence). Cluster nodes keep
    /// their `nodes-<port>.conf` and rejoin with the same slots.
    pub fn restart(&mut self) {
        match self {
            RedisBackend::Single(r) => r.restart(),
            RedisBackend::Cluster(c) => {
                c.nodes.iter_mut().for_each(Redis::restart);
                c.wait_ok();
            }
        }
    }
}
