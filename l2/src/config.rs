//! Command-line flags. Every error names the flag it is about; `main` prints it and exits with 2.

use std::net::SocketAddr;
use std::time::Duration;

pub const USAGE: &str = "\
usage: graphql-cache-l2 (--redis redis://HOST:PORT | --redis-cluster redis://A,redis://B,...)
                        [--listen ADDR] [--max-value-bytes N] [--max-wait-ms N] [--redis-timeout-ms N]

  --listen ADDR           address to serve HTTP/1.1 and h2c on (default 127.0.0.1:8090; port 0 = any)
  --redis URL             one Redis node (redis-rs ConnectionManager: pipelined, reconnects)
  --redis-cluster URLS    comma-separated seed nodes of a Redis Cluster
  --max-value-bytes N     largest value PUT /v1/store accepts (default 1048576); larger is 413
  --max-wait-ms N         cap on every long-poll's wait_ms (default 5000)
  --redis-timeout-ms N    cap on one Redis round trip; past it the request answers 503 (default 200)";

/// Largest string Redis stores (proto-max-bulk-len's default), less the version byte.
const MAX_VALUE_BYTES_LIMIT: u64 = 512 * 1024 * 1024 - 1;
const MAX_WAIT_MS_LIMIT: u64 = 3_600_000;
const MAX_REDIS_TIMEOUT_MS: u64 = 60_000;

#[derive(Clone, Debug, PartialEq, Eq)]
pub enum RedisTarget {
    Single(String),
    Cluster(Vec<String>),
}

impl RedisTarget {
    /// The node, or the Cluster seeds (the wake-up subscribers find the masters from them).
    pub fn nodes(&self) -> Vec<String> {
        match self {
            RedisTarget::Single(url) => vec![url.clone()],
            RedisTarget::Cluster(urls) => urls.clone(),
        }
    }
}

#[derive(Clone, Debug)]
pub struct Config {
    pub listen: SocketAddr,
    pub redis: RedisTarget,
    pub max_value_bytes: usize,
    pub max_wait: Duration,
    pub redis_timeout: Duration,
}

#[derive(Debug)]
pub enum Parsed {
    Run(Config),
    Help,
}

fn number(flag: &str, value: &str, min: u64, max: u64) -> Result<u64, String> {
    match value.parse::<u64>() {
        Ok(n) if (min..=max).contains(&n) => Ok(n),
        _ => Err(format!(
            "{flag}: expected an integer in {min}..={max}, got `{value}`"
        )),
    }
}

fn redis_url(flag: &str, value: &str) -> Result<String, String> {
    let url = value.trim();
    if !url.starts_with("redis://") {
        return Err(format!(
            "{flag}: expected a redis://HOST:PORT URL, got `{value}`"
        ));
    }
    match redis::Client::open(url) {
        Ok(_) => Ok(url.to_string()),
        Err(e) => Err(format!("{flag}: invalid Redis URL `{value}`: {e}")),
    }
}

pub fn parse<I: IntoIterator<Item = String>>(args: I) -> Result<Parsed, String> {
    let mut listen: SocketAddr = SocketAddr::from(([127, 0, 0, 1], 8090));
    let mut single: Option<String> = None;
    let mut cluster: Option<Vec<String>> = None;
    let mut max_value_bytes: u64 = 1_048_576;
    let mut max_wait_ms: u64 = 5_000;
    let mut redis_timeout_ms: u64 = 200;

    let mut args = args.into_iter();
    while let Some(arg) = args.next() {
        if arg == "-h" || arg == "--help" {
            return Ok(Parsed::Help);
        }
        let (flag, inline) = match arg.split_once('=') {
            Some((f, v)) if f.starts_with("--") => (f.to_string(), Some(v.to_string())),
            _ => (arg.clone(), None),
        };
        let known = [
            "--listen",
            "--redis",
            "--redis-cluster",
            "--max-value-bytes",
            "--max-wait-ms",
            "--redis-timeout-ms",
        ];
        if !known.contains(&flag.as_str()) {
            return Err(format!("unknown flag `{arg}`"));
        }
        let value = match inline {
            Some(v) => v,
            None => match args.next() {
                Some(v) => v,
                None => return Err(format!("{flag}: missing value")),
            },
        };
        match flag.as_str() {
            "--listen" => {
                listen = value.parse().map_err(|_| {
                    format!("--listen: expected IP:PORT (e.g. 127.0.0.1:8090), got `{value}`")
                })?;
            }
            "--redis" => {
                if single.is_some() {
                    return Err("--redis: given twice".to_string());
                }
                single = Some(redis_url("--redis", &value)?);
            }
            "--redis-cluster" => {
                if cluster.is_some() {
                    return Err("--redis-cluster: given twice".to_string());
                }
                let mut urls = Vec::new();
                for part in value.split(',').filter(|p| !p.trim().is_empty()) {
                    urls.push(redis_url("--redis-cluster", part)?);
                }
                if urls.is_empty() {
                    return Err("--redis-cluster: expected at least one redis:// URL".to_string());
                }
                cluster = Some(urls);
            }
            "--max-value-bytes" => {
                max_value_bytes = number(&flag, &value, 0, MAX_VALUE_BYTES_LIMIT)?;
            }
            "--max-wait-ms" => max_wait_ms = number(&flag, &value, 0, MAX_WAIT_MS_LIMIT)?,
            "--redis-timeout-ms" => {
                redis_timeout_ms = number(&flag, &value, 1, MAX_REDIS_TIMEOUT_MS)?;
            }
            _ => return Err(format!("unknown flag `{arg}`")),
        }
    }
    let redis = match (single, cluster) {
        (Some(url), None) => RedisTarget::Single(url),
        (None, Some(urls)) => RedisTarget::Cluster(urls),
        (Some(_), Some(_)) => {
            return Err("--redis and --redis-cluster: give exactly one of them".to_string())
        }
        (None, None) => {
            return Err("--redis or --redis-cluster: one of them is required".to_string())
        }
    };
    Ok(Parsed::Run(Config {
        listen,
        redis,
        max_value_bytes: usize::try_from(max_value_bytes).unwrap_or(usize::MAX),
        max_wait: Duration::from_millis(max_wait_ms),
        redis_timeout: Duration::from_millis(redis_timeout_ms),
    }))
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]
mod tests {
    use super::*;

    fn run(args: &[&str]) -> Result<Config, String> {
        match parse(args.iter().map(|s| s.to_string()))? {
            Parsed::Run(c) => Ok(c),
            Parsed::Help => Err("help".to_string()),
        }
    }

    #[test]
    fn defaults_and_forms() {
        let c = run(&["--redis", "redis://127.0.0.1:6379"]).unwrap();
        assert_eq!(c.listen.to_string(), "127.0.0.1:8090");
        assert_eq!(c.max_value_bytes, 1_048_576);
        assert_eq!(c.max_wait, Duration::from_millis(5000));
        let c = run(&[
            "--redis-cluster=redis://127.0.0.1:7000,redis://127.0.0.1:7001",
            "--listen=127.0.0.1:0",
            "--max-wait-ms",
            "10",
        ])
        .unwrap();
        assert_eq!(c.redis.nodes().len(), 2);
        assert_eq!(c.max_wait, Duration::from_millis(10));
    }

    #[test]
    fn errors_name_the_flag() {
        let e = run(&["--redis", "redis://a:1", "--max-wait-ms", "x"]).unwrap_err();
        assert!(e.contains("--max-wait-ms"), "{e}");
        let e = run(&["--redis", "http://a"]).unwrap_err();
        assert!(e.contains("--redis"), "{e}");
        let e = run(&["--redis", "redis://a:1", "--redis-cluster", "redis://b:1"]).unwrap_err();
        assert!(e.contains("--redis-cluster"), "{e}");
        let e = run(&[]).unwrap_err();
        assert!(e.contains("--redis"), "{e}");
        let e = run(&["--redis", "redis://a:1", "--bogus"]).unwrap_err();
        assert!(e.contains("--bogus"), "{e}");
        let e = run(&["--redis", "redis://a:1", "--listen", "nope"]).unwrap_err();
        assert!(e.contains("--listen"), "{e}");
        let e = run(&["--redis"]).unwrap_err();
        assert!(e.contains("--redis"), "{e}");
    }
}
