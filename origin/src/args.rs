//! Hand-rolled command line parsing (no clap, to keep the binary lean).

use std::net::{Ipv4Addr, SocketAddr, SocketAddrV4};

pub const DEFAULT_LISTEN: &str = "127.0.0.1:8081";
pub const DEFAULT_THREADS: usize = 2;
/// Upper bound for any configured or per-request delay (one hour).
pub const MAX_DELAY_MS: u64 = 3_600_000;
const MAX_THREADS: usize = 1024;

pub const USAGE: &str = "\
usage: graphql-origin [--listen ADDR] [--delay-ms N] [--max-inflight N] [--threads N]
                      [--gzip] [--no-apq] [--verbose]

  --listen ADDR   address to bind (default 127.0.0.1:8081; port 0 = pick a free port)
  --delay-ms N    delay every GraphQL response by N milliseconds (default 0)
  --max-inflight N  serve at most N GraphQL requests at a time, queueing the rest, like a
                  server with finite capacity (default 0 = unlimited)
  --threads N     tokio worker threads (default 2)
  --gzip          gzip GraphQL responses when the request's accept-encoding accepts gzip
                  (content-encoding: gzip, vary: accept-encoding); default off
  --no-apq        turn off Automatic Persisted Queries (Apollo's protocol: on by default,
                  for GET and POST; PERSISTED_QUERY_NOT_FOUND / _HASH_MISMATCH answers)
  --verbose       log one line per request to stderr
  -h, --help      show this help

environment fallbacks (command line wins): ORIGIN_LISTEN, ORIGIN_DELAY_MS, ORIGIN_THREADS

After binding, prints `listening on IP:PORT` to stdout.
GraphQL is served on every path except /_origin/*; control endpoints:
  GET /_origin/count, POST /_origin/reset, GET /_origin/health,
  GET /_origin/last-body (raw body of the last GraphQL request)
Per-request headers: x-origin-delay-ms, x-origin-status, x-origin-header (repeatable),
  x-origin-fault: send the answer broken on the wire (HTTP/1.1), then close the connection:
    reset-mid-body       status, headers (chunked) and half the body, no final chunk
    truncated            content-length of the whole body, only half of it
    overlong             content-length of the whole body, the body and more bytes after it
    stall-after-headers  status and headers (content-length of the whole body), then nothing
                         for x-origin-delay-ms (here the stall, not a delay; default 5000)";

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Config {
    pub listen: SocketAddr,
    pub delay_ms: u64,
    pub max_inflight: usize,
    pub threads: usize,
    pub verbose: bool,
    /// Gzip GraphQL responses when the client accepts it.
    pub gzip: bool,
    /// Automatic Persisted Queries.
    pub apq: bool,
}

#[derive(Debug, PartialEq, Eq)]
pub enum Command {
    Run(Config),
    Help,
}

/// Parses the arguments (without the program name). `env` looks up an
/// environment variable; values given on the command line win over it.
pub fn parse_args<I, E>(args: I, env: E) -> Result<Command, String>
where
    I: IntoIterator<Item = String>,
    E: Fn(&str) -> Option<String>,
{
    let mut listen = None;
    let mut delay_ms = None;
    let mut threads = None;
    let mut max_inflight = 0usize;
    let mut verbose = false;
    let mut gzip = false;
    let mut apq = true;

    let mut it = args.into_iter();
    while let Some(arg) = it.next() {
        let (flag, inline) = match arg.split_once('=') {
            Some((f, v)) if f.starts_with("--") => (f.to_string(), Some(v.to_string())),
            _ => (arg.clone(), None),
        };
        match flag.as_str() {
            "-h" | "--help" => return Ok(Command::Help),
            "--verbose" | "-v" | "--gzip" | "--no-apq" => {
                if inline.is_some() {
                    return Err(format!("{flag} takes no value"));
                }
                match flag.as_str() {
                    "--gzip" => gzip = true,
                    "--no-apq" => apq = false,
                    _ => verbose = true,
                }
            }
            "--listen" | "--delay-ms" | "--threads" | "--max-inflight" => {
                let value = match inline {
                    Some(v) => v,
                    None => it
                        .next()
                        .ok_or_else(|| format!("{flag} requires a value"))?,
                };
                match flag.as_str() {
                    "--listen" => listen = Some(parse_listen(&value)?),
                    "--delay-ms" => delay_ms = Some(parse_delay(&value, "--delay-ms")?),
                    "--max-inflight" => {
                        max_inflight = value
                            .parse()
                            .map_err(|_| format!("--max-inflight: invalid number {value:?}"))?
                    }
                    _ => threads = Some(parse_threads(&value, "--threads")?),
                }
            }
            _ => return Err(format!("unknown argument: {arg}")),
        }
    }

    let listen = match listen {
        Some(l) => l,
        None => match env("ORIGIN_LISTEN").filter(|v| !v.trim().is_empty()) {
            Some(v) => parse_listen(v.trim()).map_err(|e| format!("ORIGIN_LISTEN: {e}"))?,
            None => parse_listen(DEFAULT_LISTEN)?,
        },
    };
    let delay_ms = match delay_ms {
        Some(d) => d,
        None => match env("ORIGIN_DELAY_MS").filter(|v| !v.trim().is_empty()) {
            Some(v) => parse_delay(v.trim(), "ORIGIN_DELAY_MS")?,
            None => 0,
        },
    };
    let threads = match threads {
        Some(t) => t,
        None => match env("ORIGIN_THREADS").filter(|v| !v.trim().is_empty()) {
            Some(v) => parse_threads(v.trim(), "ORIGIN_THREADS")?,
            None => DEFAULT_THREADS,
        },
    };

    Ok(Command::Run(Config {
        listen,
        delay_ms,
        max_inflight,
        threads,
        verbose,
        gzip,
        apq,
    }))
}

/// Accepts `IP:PORT`, `[IPv6]:PORT` and `localhost:PORT`.
pub fn parse_listen(value: &str) -> Result<SocketAddr, String> {
    if let Ok(addr) = value.parse::<SocketAddr>() {
        return Ok(addr);
    }
    if let Some(port) = value.strip_prefix("localhost:") {
        if let Ok(port) = port.parse::<u16>() {
            return Ok(SocketAddr::V4(SocketAddrV4::new(Ipv4Addr::LOCALHOST, port)));
        }
    }
    Err(format!(
        "invalid listen address {value:?} (expected IP:PORT, e.g. 127.0.0.1:8081)"
    ))
}

/// Parses a delay in milliseconds (also used for `x-origin-delay-ms`).
pub fn parse_delay(value: &str, what: &str) -> Result<u64, String> {
    match value.trim().parse::<u64>() {
        Ok(ms) if ms <= MAX_DELAY_MS => Ok(ms),
        Ok(_) => Err(format!("{what}: delay must be at most {MAX_DELAY_MS} ms")),
        Err(_) => Err(format!(
            "{what}: invalid delay {value:?} (expected milliseconds)"
        )),
    }
}

fn parse_threads(value: &str, what: &str) -> Result<usize, String> {
    match value.trim().parse::<usize>() {
        Ok(n) if (1..=MAX_THREADS).contains(&n) => Ok(n),
        _ => Err(format!(
            "{what}: invalid thread count {value:?} (expected 1..={MAX_THREADS})"
        )),
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]
mod tests {
    use super::*;

    fn no_env(_: &str) -> Option<String> {
        None
    }

    fn args(list: &[&str]) -> Vec<String> {
        list.iter().map(|s| s.to_string()).collect()
    }

    fn run(list: &[&str]) -> Config {
        match parse_args(args(list), no_env).unwrap() {
            Command::Run(c) => c,
            Command::Help => panic!("unexpected help"),
        }
    }

    #[test]
    fn defaults() {
        let c = run(&[]);
        assert_eq!(c.listen, "127.0.0.1:8081".parse().unwrap());
        assert_eq!(c.delay_ms, 0);
        assert_eq!(c.threads, 2);
        assert!(!c.verbose);
        assert!(!c.gzip);
        assert!(c.apq);
    }

    #[test]
    fn gzip_and_apq_flags() {
        let c = run(&["--gzip", "--no-apq"]);
        assert!(c.gzip);
        assert!(!c.apq);
        assert!(parse_args(args(&["--gzip=1"]), no_env).is_err());
        assert!(parse_args(args(&["--no-apq=yes"]), no_env).is_err());
    }

    #[test]
    fn all_flags_both_syntaxes() {
        let c = run(&[
            "--listen",
            "127.0.0.1:0",
            "--delay-ms=25",
            "--threads",
            "4",
            "--verbose",
        ]);
        assert_eq!(c.listen, "127.0.0.1:0".parse().unwrap());
        assert_eq!(c.delay_ms, 25);
        assert_eq!(c.threads, 4);
        assert!(c.verbose);

        let c = run(&["--listen=[::1]:9000", "--threads=1"]);
        assert_eq!(c.listen, "[::1]:9000".parse().unwrap());
        assert_eq!(c.threads, 1);

        let c = run(&["--listen", "localhost:1234"]);
        assert_eq!(c.listen, "127.0.0.1:1234".parse().unwrap());
    }

    #[test]
    fn help() {
        assert_eq!(parse_args(args(&["--help"]), no_env), Ok(Command::Help));
        assert_eq!(parse_args(args(&["-h"]), no_env), Ok(Command::Help));
    }

    #[test]
    fn bad_args() {
        for bad in [
            &["--listen"][..],
            &["--listen", "nonsense"],
            &["--listen", "127.0.0.1"],
            &["--delay-ms", "-1"],
            &["--delay-ms", "abc"],
            &["--delay-ms", "99999999999"],
            &["--threads", "0"],
            &["--threads", "x"],
            &["--frobnicate"],
            &["positional"],
            &["--verbose=yes"],
        ] {
            assert!(parse_args(args(bad), no_env).is_err(), "{bad:?}");
        }
    }

    #[test]
    fn env_fallback_and_args_win() {
        let env = |k: &str| match k {
            "ORIGIN_LISTEN" => Some("0.0.0.0:8081".to_string()),
            "ORIGIN_DELAY_MS" => Some("7".to_string()),
            "ORIGIN_THREADS" => Some("3".to_string()),
            _ => None,
        };
        let Command::Run(c) = parse_args(args(&[]), env).unwrap() else {
            panic!("help")
        };
        assert_eq!(c.listen, "0.0.0.0:8081".parse().unwrap());
        assert_eq!(c.delay_ms, 7);
        assert_eq!(c.threads, 3);

        let Command::Run(c) =
            parse_args(args(&["--listen", "127.0.0.1:1", "--delay-ms", "0"]), env).unwrap()
        else {
            panic!("help")
        };
        assert_eq!(c.listen, "127.0.0.1:1".parse().unwrap());
        assert_eq!(c.delay_ms, 0);

        let bad_env = |k: &str| (k == "ORIGIN_DELAY_MS").then(|| "soon".to_string());
        assert!(parse_args(args(&[]), bad_env).is_err());
        // ...but an explicit argument makes the bad env value irrelevant.
        assert!(parse_args(args(&["--delay-ms", "1"]), bad_env).is_ok());
        // Empty env values are ignored.
        let empty_env = |_: &str| Some(String::new());
        assert_eq!(
            run_with(empty_env).listen,
            "127.0.0.1:8081".parse().unwrap()
        );
    }

    fn run_with(env: impl Fn(&str) -> Option<String>) -> Config {
        match parse_args(Vec::new(), env).unwrap() {
            Command::Run(c) => c,
            Command::Help => panic!("unexpected help"),
        }
    }
}
