//! Command-line flags. Every error names the flag it is about; `main` prints it and exits with 2.
//! No error message ever contains a secret (the service's own, or a Redis password).

use std::collections::HashMap;
use std::fmt;
use std::net::SocketAddr;
use std::time::Duration;

use l2_proto::limits::{printable_secret, MAX_LEASE_MS, MIN_LEASE_MS, MIN_SECRET_BYTES};
use l2_proto::marks::MAX_KEEP_MS;
use redis::{ConnectionInfo, IntoConnectionInfo};

use crate::auth::{Auth, Secret};

pub const USAGE: &str = "\
usage: graphql-cache-l2 (--redis URL | --redis-cluster URL,URL,...)
                        (--auth-secret-file PATH | env GRAPHQL_CACHE_L2_SECRET | --insecure-no-auth)
                        [--listen ADDR] [--max-value-bytes N] [--max-wait-ms N] [--redis-timeout-ms N]
                        [--max-lease-ms N] [--max-long-polls N] [--max-inflight-bytes N]
                        [--redis-username NAME] [--redis-password-file PATH] [--redis-ca-file PATH]
                        [--purge-log-ms N] [--purge-log-max N] [--min-purge-keep-ms N]

  --listen ADDR             address to serve HTTP/1.1 and h2c on (default 127.0.0.1:8090; port 0 = any)
  --redis URL               one Redis node: redis://[USER:PASS@]HOST:PORT or rediss:// (TLS)
  --redis-cluster URLS      comma-separated seed nodes of a Redis Cluster (same URL forms)
  --auth-secret-file PATH   accepted bearer secrets, one per non-empty line (several: rotation);
                            each at least 16 bytes. Env GRAPHQL_CACHE_L2_SECRET adds one more.
  --insecure-no-auth        serve without authentication (only for a closed test network)
  --max-value-bytes N       largest value PUT /v1/store accepts (default 1048576); larger is 413
  --max-wait-ms N           cap on every long-poll's wait_ms (default 5000)
  --redis-timeout-ms N      cap on one Redis round trip; past it the request answers 424 (default 200)
  --max-lease-ms N          cap on a lookup's lease_ms; larger values are clamped (default 30000)
  --max-long-polls N        long-polls waiting at once; past it they do not wait (default 1024)
  --max-inflight-bytes N    store bodies being received at once, in bytes; past it 429 (default 67108864)
  --redis-username NAME     Redis ACL user (overrides one in the URLs)
  --redis-password-file PATH  Redis password: the file's first line (overrides one in the URLs)
  --redis-ca-file PATH      PEM CA certificates to trust for rediss:// instead of the system roots
  --purge-log-ms N          purge log entries older than this are trimmed (default 300000)
  --purge-log-max N         the purge log keeps about this many entries at most (default 100000)
  --min-purge-keep-ms N     shortest time the purge snapshot keeps a mark, whatever its batch
                            asks (default 0: the batch's keep_ms)";

pub const SECRET_ENV: &str = "GRAPHQL_CACHE_L2_SECRET";

/// Largest string Redis stores (proto-max-bulk-len's default), less the version byte.
const MAX_VALUE_BYTES_LIMIT: u64 = 512 * 1024 * 1024 - 1;
const MAX_WAIT_MS_LIMIT: u64 = 3_600_000;
const MAX_REDIS_TIMEOUT_MS: u64 = 60_000;
const MAX_LONG_POLLS_LIMIT: u64 = 1_000_000;
/// A store body is counted in u32 permits of one byte each, so one body stays under 4 GiB.
const MAX_INFLIGHT_BYTES_LIMIT: u64 = 1 << 40;

/// Past this the log would hold purges for longer than any entry can live.
const MAX_PURGE_LOG_MS: u64 = MAX_KEEP_MS;
/// A mark is some 100 bytes in the stream: about a GB at this many.
const MAX_PURGE_LOG_ENTRIES: u64 = 10_000_000;

/// (flag, takes a value)
const FLAGS: [(&str, bool); 17] = [
    ("--listen", true),
    ("--redis", true),
    ("--redis-cluster", true),
    ("--max-value-bytes", true),
    ("--max-wait-ms", true),
    ("--redis-timeout-ms", true),
    ("--auth-secret-file", true),
    ("--insecure-no-auth", false),
    ("--max-lease-ms", true),
    ("--max-long-polls", true),
    ("--max-inflight-bytes", true),
    ("--redis-username", true),
    ("--redis-password-file", true),
    ("--redis-ca-file", true),
    ("--purge-log-ms", true),
    ("--purge-log-max", true),
    ("--min-purge-keep-ms", true),
];

/// Where Redis is, with the credentials applied to every node.
#[derive(Clone)]
pub struct RedisTarget {
    pub cluster: bool,
    /// The node, or the Cluster seeds (the wake-up subscribers find the masters from them).
    pub nodes: Vec<ConnectionInfo>,
    /// PEM roots for `rediss://`; `None`: the system's (and webpki's) roots.
    pub ca_pem: Option<Vec<u8>>,
}

impl fmt::Debug for RedisTarget {
    // ConnectionInfo's own Debug prints the password.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let addrs: Vec<String> = self.nodes.iter().map(|n| n.addr.to_string()).collect();
        f.debug_struct("RedisTarget")
            .field("cluster", &self.cluster)
            .field("nodes", &addrs)
            .field("ca_pem", &self.ca_pem.is_some())
            .finish()
    }
}

#[derive(Clone, Debug)]
pub struct Config {
    pub listen: SocketAddr,
    pub redis: RedisTarget,
    pub auth: Auth,
    pub max_value_bytes: usize,
    pub max_wait: Duration,
    pub redis_timeout: Duration,
    pub max_lease_ms: u64,
    pub max_long_polls: usize,
    pub max_inflight_bytes: usize,
    pub purge_log: PurgeLog,
}

/// How long the purge log and its snapshot keep what they hold.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct PurgeLog {
    /// Entries older than this are trimmed from the log (`--purge-log-ms`): a reader further
    /// behind reads the snapshot instead.
    pub log_ms: u64,
    /// About the most entries the log keeps (`--purge-log-max`; trimmed with `~`).
    pub max_entries: u64,
    /// A snapshot field lives at least this long (`--min-purge-keep-ms`), whatever its batch says:
    /// the operator's floor when the filter's TTLs are not trusted to be the longest.
    pub min_keep_ms: u64,
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

/// The URL with any `user:password@` replaced, for messages.
fn redacted(url: &str) -> String {
    match (url.find("://"), url.rfind('@')) {
        (Some(s), Some(at)) if at > s => format!("{}***@{}", &url[..s + 3], &url[at + 1..]),
        _ => url.to_string(),
    }
}

fn redis_url(flag: &str, value: &str) -> Result<ConnectionInfo, String> {
    let url = value.trim();
    if !url.starts_with("redis://") && !url.starts_with("rediss://") {
        return Err(format!(
            "{flag}: expected a redis://HOST:PORT or rediss://HOST:PORT URL, got `{}`",
            redacted(value)
        ));
    }
    // redis-rs's message does not echo the URL.
    url.into_connection_info()
        .map_err(|e| format!("{flag}: invalid Redis URL `{}`: {e}", redacted(value)))
}

fn read_file(flag: &str, path: &str) -> Result<Vec<u8>, String> {
    std::fs::read(path).map_err(|e| format!("{flag}: reading `{path}`: {e}"))
}

/// A secret must fit in a header value as it is, and be long enough not to be guessed.
fn secret(bytes: &[u8], whence: &str) -> Result<Secret, String> {
    if bytes.len() < MIN_SECRET_BYTES {
        return Err(format!(
            "{whence}: the secret is shorter than {MIN_SECRET_BYTES} bytes"
        ));
    }
    if !printable_secret(bytes) {
        return Err(format!(
            "{whence}: the secret must be printable ASCII without spaces"
        ));
    }
    Ok(Secret::new(bytes.to_vec()))
}

fn file_secrets(path: &str) -> Result<Vec<Secret>, String> {
    let flag = "--auth-secret-file";
    let text = read_file(flag, path)?;
    let mut out = Vec::new();
    for (i, line) in text.split(|b| *b == b'\n').enumerate() {
        let line = line.trim_ascii();
        if !line.is_empty() {
            out.push(secret(line, &format!("{flag} `{path}` line {}", i + 1))?);
        }
    }
    if out.is_empty() {
        return Err(format!("{flag}: `{path}` holds no secret"));
    }
    Ok(out)
}

/// Flag name → values, in order; a flag without a value maps to an empty string.
type Raw = HashMap<&'static str, Vec<String>>;

fn collect<I: IntoIterator<Item = String>>(args: I) -> Result<Option<Raw>, String> {
    let mut raw = Raw::new();
    let mut args = args.into_iter();
    while let Some(arg) = args.next() {
        if arg == "-h" || arg == "--help" {
            return Ok(None);
        }
        let (flag, inline) = match arg.split_once('=') {
            Some((f, v)) if f.starts_with("--") => (f.to_string(), Some(v.to_string())),
            _ => (arg.clone(), None),
        };
        let Some(&(name, takes)) = FLAGS.iter().find(|(n, _)| *n == flag) else {
            return Err(format!("unknown flag `{}`", redacted(&arg)));
        };
        let value = match (takes, inline) {
            (false, None) => String::new(),
            (false, Some(_)) => return Err(format!("{name}: takes no value")),
            (true, Some(v)) => v,
            (true, None) => args
                .next()
                .ok_or_else(|| format!("{name}: missing value"))?,
        };
        raw.entry(name).or_default().push(value);
    }
    Ok(Some(raw))
}

fn once<'a>(raw: &'a Raw, flag: &str) -> Result<Option<&'a str>, String> {
    match raw.get(flag).map(Vec::as_slice) {
        None | Some([]) => Ok(None),
        Some([v]) => Ok(Some(v.as_str())),
        Some(_) => Err(format!("{flag}: given twice")),
    }
}

fn num_or(raw: &Raw, flag: &str, range: (u64, u64), default: u64) -> Result<u64, String> {
    match once(raw, flag)? {
        Some(v) => number(flag, v, range.0, range.1),
        None => Ok(default),
    }
}

fn purge_log(raw: &Raw) -> Result<PurgeLog, String> {
    Ok(PurgeLog {
        log_ms: num_or(raw, "--purge-log-ms", (1_000, MAX_PURGE_LOG_MS), 300_000)?,
        max_entries: num_or(raw, "--purge-log-max", (1, MAX_PURGE_LOG_ENTRIES), 100_000)?,
        min_keep_ms: num_or(raw, "--min-purge-keep-ms", (0, MAX_KEEP_MS), 0)?,
    })
}

fn redis_target(raw: &Raw) -> Result<RedisTarget, String> {
    let (cluster, urls) = match (once(raw, "--redis")?, once(raw, "--redis-cluster")?) {
        (Some(url), None) => (false, vec![redis_url("--redis", url)?]),
        (None, Some(list)) => {
            let mut urls = Vec::new();
            for part in list.split(',').filter(|p| !p.trim().is_empty()) {
                urls.push(redis_url("--redis-cluster", part)?);
            }
            if urls.is_empty() {
                return Err("--redis-cluster: expected at least one redis:// URL".to_string());
            }
            (true, urls)
        }
        (Some(_), Some(_)) => {
            return Err("--redis and --redis-cluster: give exactly one of them".to_string())
        }
        (None, None) => {
            return Err("--redis or --redis-cluster: one of them is required".to_string())
        }
    };
    let username = once(raw, "--redis-username")?.map(str::to_string);
    let password = match once(raw, "--redis-password-file")? {
        Some(path) => Some(redis_password(path)?),
        None => None,
    };
    let nodes = urls
        .into_iter()
        .map(|mut n| {
            if username.is_some() {
                n.redis.username.clone_from(&username);
            }
            if password.is_some() {
                n.redis.password.clone_from(&password);
            }
            n
        })
        .collect();
    let ca_pem = match once(raw, "--redis-ca-file")? {
        Some(path) => Some(read_file("--redis-ca-file", path)?),
        None => None,
    };
    Ok(RedisTarget {
        cluster,
        nodes,
        ca_pem,
    })
}

fn redis_password(path: &str) -> Result<String, String> {
    let flag = "--redis-password-file";
    let bytes = read_file(flag, path)?;
    let text = String::from_utf8(bytes).map_err(|_| format!("{flag}: `{path}` is not UTF-8"))?;
    match text.lines().next().map(str::trim_end) {
        Some(p) if !p.is_empty() => Ok(p.to_string()),
        _ => Err(format!(
            "{flag}: `{path}` holds no password on its first line"
        )),
    }
}

fn auth(raw: &Raw, env_secret: Option<Vec<u8>>) -> Result<Auth, String> {
    let mut secrets = match once(raw, "--auth-secret-file")? {
        Some(path) => file_secrets(path)?,
        None => Vec::new(),
    };
    if let Some(v) = env_secret.filter(|v| !v.is_empty()) {
        if v.contains(&b',') {
            return Err(format!(
                "{SECRET_ENV}: one secret only (no commas); use --auth-secret-file for several"
            ));
        }
        secrets.push(secret(v.trim_ascii(), SECRET_ENV)?);
    }
    let insecure = raw.contains_key("--insecure-no-auth");
    match (secrets.is_empty(), insecure) {
        (false, false) => Ok(Auth::Secrets(secrets)),
        (true, true) => Ok(Auth::Insecure),
        (false, true) => Err(
            "--insecure-no-auth: a secret is given too (--auth-secret-file or env); drop one"
                .to_string(),
        ),
        (true, false) => Err(format!(
            "--auth-secret-file: no secret given (or env {SECRET_ENV}); \
             --insecure-no-auth serves without authentication"
        )),
    }
}

/// `env_secret`: the value of `GRAPHQL_CACHE_L2_SECRET`, if set.
pub fn parse<I: IntoIterator<Item = String>>(
    args: I,
    env_secret: Option<Vec<u8>>,
) -> Result<Parsed, String> {
    let Some(raw) = collect(args)? else {
        return Ok(Parsed::Help);
    };
    let listen = match once(&raw, "--listen")? {
        Some(v) => v
            .parse()
            .map_err(|_| format!("--listen: expected IP:PORT (e.g. 127.0.0.1:8090), got `{v}`"))?,
        None => SocketAddr::from(([127, 0, 0, 1], 8090)),
    };
    let redis = redis_target(&raw)?;
    let max_value_bytes = num_or(
        &raw,
        "--max-value-bytes",
        (0, MAX_VALUE_BYTES_LIMIT),
        1_048_576,
    )?;
    let max_inflight = num_or(
        &raw,
        "--max-inflight-bytes",
        (1, MAX_INFLIGHT_BYTES_LIMIT),
        64 << 20,
    )?;
    if max_inflight < max_value_bytes {
        return Err(format!(
            "--max-inflight-bytes: {max_inflight} is below --max-value-bytes {max_value_bytes}"
        ));
    }
    let usize_of = |n: u64| usize::try_from(n).unwrap_or(usize::MAX);
    Ok(Parsed::Run(Config {
        listen,
        redis,
        auth: auth(&raw, env_secret)?,
        max_value_bytes: usize_of(max_value_bytes),
        max_wait: Duration::from_millis(num_or(
            &raw,
            "--max-wait-ms",
            (0, MAX_WAIT_MS_LIMIT),
            5_000,
        )?),
        redis_timeout: Duration::from_millis(num_or(
            &raw,
            "--redis-timeout-ms",
            (1, MAX_REDIS_TIMEOUT_MS),
            200,
        )?),
        max_lease_ms: num_or(&raw, "--max-lease-ms", (MIN_LEASE_MS, MAX_LEASE_MS), 30_000)?,
        max_long_polls: usize_of(num_or(
            &raw,
            "--max-long-polls",
            (1, MAX_LONG_POLLS_LIMIT),
            1024,
        )?),
        max_inflight_bytes: usize_of(max_inflight),
        purge_log: purge_log(&raw)?,
    }))
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]
mod tests {
    use super::*;
    use redis::ConnectionAddr;

    const SECRET: &[u8] = b"0123456789abcdef-test";

    fn run(args: &[&str]) -> Result<Config, String> {
        run_env(args, Some(SECRET))
    }

    fn run_env(args: &[&str], env: Option<&[u8]>) -> Result<Config, String> {
        match parse(args.iter().map(|s| s.to_string()), env.map(<[u8]>::to_vec))? {
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
        assert_eq!(c.max_lease_ms, 30_000);
        assert_eq!(c.max_long_polls, 1024);
        assert_eq!(c.max_inflight_bytes, 64 << 20);
        assert_eq!(
            c.purge_log,
            PurgeLog {
                log_ms: 300_000,
                max_entries: 100_000,
                min_keep_ms: 0,
            }
        );
        assert!(!c.redis.cluster);
        let c = run(&[
            "--redis-cluster=redis://127.0.0.1:7000,redis://127.0.0.1:7001",
            "--listen=127.0.0.1:0",
            "--max-wait-ms",
            "10",
            "--max-lease-ms=500",
        ])
        .unwrap();
        assert_eq!(c.redis.nodes.len(), 2);
        assert!(c.redis.cluster);
        assert_eq!(c.max_wait, Duration::from_millis(10));
        assert_eq!(c.max_lease_ms, 500);
        let c = run(&[
            "--redis=redis://a:1",
            "--purge-log-ms=60000",
            "--purge-log-max",
            "7",
            "--min-purge-keep-ms=86400000",
        ])
        .unwrap();
        assert_eq!(
            c.purge_log,
            PurgeLog {
                log_ms: 60_000,
                max_entries: 7,
                min_keep_ms: 86_400_000,
            }
        );
    }

    #[test]
    fn errors_name_the_flag() {
        let cases: [(&[&str], &str); 13] = [
            (
                &["--redis", "redis://a:1", "--max-wait-ms", "x"],
                "--max-wait-ms",
            ),
            (&["--redis", "http://a"], "--redis"),
            (
                &["--redis", "redis://a:1", "--redis-cluster", "redis://b:1"],
                "--redis-cluster",
            ),
            (&[], "--redis"),
            (&["--redis", "redis://a:1", "--bogus"], "--bogus"),
            (&["--redis", "redis://a:1", "--listen", "nope"], "--listen"),
            (&["--redis"], "--redis"),
            (
                &["--redis", "redis://a:1", "--max-lease-ms", "0"],
                "--max-lease-ms",
            ),
            (
                &["--redis", "redis://a:1", "--max-inflight-bytes", "10"],
                "--max-inflight-bytes",
            ),
            (
                &["--redis", "redis://a:1", "--purge-log-ms", "999"],
                "--purge-log-ms",
            ),
            (
                &["--redis", "redis://a:1", "--purge-log-max", "0"],
                "--purge-log-max",
            ),
            (
                &["--redis", "redis://a:1", "--min-purge-keep-ms", "-1"],
                "--min-purge-keep-ms",
            ),
            (
                &[
                    "--redis",
                    "redis://a:1",
                    "--min-purge-keep-ms=1",
                    "--min-purge-keep-ms=2",
                ],
                "--min-purge-keep-ms",
            ),
        ];
        for (args, flag) in cases {
            let e = run(args).unwrap_err();
            assert!(e.contains(flag), "{args:?}: {e}");
        }
    }

    #[test]
    fn auth_needs_a_secret_or_the_explicit_opt_out() {
        let r = ["--redis", "redis://a:1"];
        let e = run_env(&r, None).unwrap_err();
        assert!(e.contains("--insecure-no-auth"), "{e}");
        let c = run_env(&["--redis", "redis://a:1", "--insecure-no-auth"], None).unwrap();
        assert!(matches!(c.auth, Auth::Insecure));
        let e = run_env(
            &["--redis", "redis://a:1", "--insecure-no-auth"],
            Some(SECRET),
        );
        assert!(e.unwrap_err().contains("--insecure-no-auth"));
        // Too short, a comma, a space: refused, and the message never holds the value.
        for bad in [
            &b"short-secret"[..],
            b"0123456789abcdef,0123456789abcdef",
            b"0123456789 abcdef",
        ] {
            let e = run_env(&r, Some(bad)).unwrap_err();
            assert!(e.contains(SECRET_ENV), "{e}");
            assert!(!e.contains(std::str::from_utf8(bad).unwrap()), "{e}");
        }
        let c = run_env(&r, Some(SECRET)).unwrap();
        assert!(matches!(c.auth, Auth::Secrets(ref s) if s.len() == 1));
        assert!(!format!("{c:?}").contains("0123456789abcdef"));
    }

    #[test]
    fn secret_file_holds_several_secrets() {
        let dir = std::env::temp_dir().join(format!("l2-config-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let good = dir.join("good");
        std::fs::write(
            &good,
            "old-secret-0123456789\n\n  new-secret-0123456789  \n",
        )
        .unwrap();
        let path = good.to_str().unwrap();
        let c = run_env(
            &["--redis", "redis://a:1", "--auth-secret-file", path],
            None,
        )
        .unwrap();
        assert!(matches!(c.auth, Auth::Secrets(ref s) if s.len() == 2));
        let bad = dir.join("bad");
        std::fs::write(&bad, "long-enough-secret-0123\nshort\n").unwrap();
        let path = bad.to_str().unwrap();
        let e = run_env(
            &["--redis", "redis://a:1", "--auth-secret-file", path],
            None,
        );
        let e = e.unwrap_err();
        assert!(e.contains("line 2") && !e.contains("short\n"), "{e}");
        let _ = std::fs::remove_dir_all(&dir);
    }

    #[test]
    fn redis_credentials_apply_to_every_node_and_stay_out_of_messages() {
        let dir = std::env::temp_dir().join(format!("l2-config-pw-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let pw = dir.join("pw");
        std::fs::write(&pw, "s3cret-pw\n").unwrap();
        let c = run(&[
            "--redis-cluster",
            "rediss://u:inurl@h1:7000,rediss://h2:7000",
            "--redis-username",
            "cache",
            "--redis-password-file",
            pw.to_str().unwrap(),
        ])
        .unwrap();
        assert!(matches!(
            c.redis.nodes[0].addr,
            ConnectionAddr::TcpTls { .. }
        ));
        for n in &c.redis.nodes {
            assert_eq!(n.redis.username.as_deref(), Some("cache"));
            assert_eq!(n.redis.password.as_deref(), Some("s3cret-pw"));
        }
        assert!(!format!("{c:?}").contains("s3cret"));
        let c = run(&["--redis", "redis://u:inurl@h1:7000"]).unwrap();
        assert_eq!(c.redis.nodes[0].redis.password.as_deref(), Some("inurl"));
        let e = run(&["--redis", "http://u:topsecret@h1:7000"]).unwrap_err();
        assert!(!e.contains("topsecret"), "{e}");
        let _ = std::fs::remove_dir_all(&dir);
    }
}
