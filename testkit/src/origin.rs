//! Starts the real origin process on an ephemeral port and reads its request count.

use std::io::{BufRead, BufReader};
use std::process::{Child, Command, Stdio};

use crate::client::{http, Req};
use crate::origin_bin;

pub struct Origin {
    child: Child,
    pub port: u16,
}

impl Origin {
    pub fn start() -> Origin {
        Origin::start_with(&[])
    }

    pub fn start_with(args: &[&str]) -> Origin {
        let mut child = Command::new(origin_bin())
            .args(["--listen", "127.0.0.1:0"])
            .args(args)
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit())
            .spawn()
            .expect("start origin");
        let stdout = child.stdout.take().unwrap();
        let mut line = String::new();
        BufReader::new(stdout).read_line(&mut line).unwrap();
        let port = line
            .trim()
            .rsplit(':')
            .next()
            .and_then(|p| p.parse().ok())
            .unwrap_or_else(|| panic!("origin did not report its port: {line:?}"));
        Origin { child, port }
    }

    /// GraphQL requests the origin has received so far.
    pub fn count(&self) -> u64 {
        let r = http(self.port, Req::get("/_origin/count"));
        let v: serde_json::Value = serde_json::from_slice(&r.body).unwrap();
        v["requests"].as_u64().unwrap()
    }
}

impl Drop for Origin {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}
