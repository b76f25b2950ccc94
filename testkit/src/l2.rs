//! The L2 service (`graphql-cache-l2`) as a child process (killed by Drop), and requests to it
//! as its tests send them: `host: l2`, the development secret.

use std::io::{BufRead, BufReader};
use std::net::SocketAddr;
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::sync::mpsc;
use std::time::{Duration, Instant};

use crate::client::{send, Req, Resp};

/// The fixed development secret every test (and the demo, the bench, the fleet tests) gives the
/// service in `GRAPHQL_CACHE_L2_SECRET`; the filter's test configuration sends the same.
pub const DEV_SECRET: &str = "dev-l2-secret-change-me-0123456789";

pub struct L2 {
    pub addr: SocketAddr,
    child: Child,
}

impl L2 {
    /// With `GRAPHQL_CACHE_L2_SECRET` = [`DEV_SECRET`] (unless `args` turn authentication off).
    pub fn start_bin(bin: &Path, args: &[&str]) -> L2 {
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

/// One request on a new connection, with the dev secret.
pub fn http(addr: SocketAddr, method: &str, path: &str, body: &[u8]) -> Resp {
    let auth = format!("authorization: Bearer {DEV_SECRET}\r\n");
    http_raw(addr, method, path, body, &auth)
}

/// One request on a new connection; `extra`: more header lines, each ending in CRLF.
pub fn http_raw(addr: SocketAddr, method: &str, path: &str, body: &[u8], extra: &str) -> Resp {
    let mut req = Req::new(method, path).header("host", "l2").body(body);
    for line in extra.split("\r\n").filter(|l| !l.is_empty()) {
        let (name, value) = line
            .split_once(':')
            .unwrap_or_else(|| panic!("not a header line: {line:?}"));
        req = req.header(name.trim(), value.trim());
    }
    send(addr, &req, Duration::from_secs(30))
        .unwrap_or_else(|e| panic!("{method} {path} to the L2 service failed: {e}"))
}
