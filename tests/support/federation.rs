//! The Node processes of `tests/federation/` (subgraphs, gateways), for the tests that run them.

use super::*;
use serde_json::Value;
use std::io::{BufRead, BufReader};
use std::process::{Child, Command, Stdio};

/// A Node process of `tests/federation/`, stopped on drop.
pub struct NodeProcess {
    child: Child,
    /// What its ready line says (URLs).
    pub ready: String,
}

impl NodeProcess {
    pub fn start(script: &str, args: &[&str], env: &[(&str, String)]) -> NodeProcess {
        let dir = repo_root().join("tests/federation");
        assert!(
            dir.join("node_modules").exists(),
            "run `make tests/federation/node_modules` first"
        );
        let mut child = Command::new("node")
            .arg(dir.join(script))
            .args(args)
            .envs(env.iter().map(|(k, v)| (*k, v.as_str())))
            .env("APOLLO_TELEMETRY_DISABLED", "1")
            .env_remove("APOLLO_KEY")
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit())
            .spawn()
            .unwrap();
        let mut lines = BufReader::new(child.stdout.take().unwrap()).lines();
        let ready = loop {
            match lines.next() {
                Some(Ok(line)) if line.contains(" ready ") => break line,
                Some(Ok(_)) => continue,
                _ => panic!("{script} stopped before it was ready"),
            }
        };
        NodeProcess { child, ready }
    }

    /// The URL its ready line ends with.
    pub fn url(&self) -> String {
        self.ready.rsplit(' ').next().unwrap().to_string()
    }
}

impl Drop for NodeProcess {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

pub struct Subgraphs {
    pub process: NodeProcess,
    /// products, reviews, users.
    pub ports: [u16; 3],
}

impl Subgraphs {
    pub fn start() -> Subgraphs {
        Subgraphs::start_with(&[])
    }

    pub fn start_with(env: &[(&str, String)]) -> Subgraphs {
        let process = NodeProcess::start(
            "subgraphs.mjs",
            &[
                "--port-products",
                "0",
                "--port-reviews",
                "0",
                "--port-users",
                "0",
            ],
            env,
        );
        let urls: Value =
            serde_json::from_str(process.ready.split_once(" ready ").unwrap().1).unwrap();
        let port = |name: &str| -> u16 {
            let url = urls[name].as_str().unwrap();
            url.split(':')
                .nth(2)
                .unwrap()
                .split('/')
                .next()
                .unwrap()
                .parse()
                .unwrap()
        };
        let ports = [port("products"), port("reviews"), port("users")];
        Subgraphs { process, ports }
    }

    /// Representations the three have resolved so far.
    pub fn representations(&self) -> u64 {
        self.ports
            .iter()
            .map(|p| {
                http(*p, Req::get("/counts")).json()["representations"]
                    .as_u64()
                    .unwrap()
            })
            .sum()
    }

    pub fn reset(&self) {
        for p in self.ports {
            http(p, Req::new("POST", "/counts/reset"));
        }
    }
}
