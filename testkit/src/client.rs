//! A small raw HTTP/1.1 client, one request a connection (`connection: close`): sends arbitrary
//! bytes and reports exactly what came back (a chunked body de-chunked).

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::time::Duration;

use crate::repo_root;

#[derive(Clone, Debug)]
pub struct Req {
    pub method: String,
    pub path: String,
    pub headers: Vec<(String, String)>,
    pub body: Vec<u8>,
}

impl Req {
    pub fn new(method: &str, path: &str) -> Req {
        Req {
            method: method.into(),
            path: path.into(),
            headers: vec![],
            body: vec![],
        }
    }

    pub fn get(path: &str) -> Req {
        Req::new("GET", path)
    }

    /// A GraphQL POST with a JSON body given as text.
    pub fn post_json(body: &str) -> Req {
        Req::post_raw("application/json", body.as_bytes())
    }

    pub fn post_raw(content_type: &str, body: &[u8]) -> Req {
        Req::new("POST", "/graphql")
            .header("content-type", content_type)
            .body(body)
    }

    /// `{"query": q}` as a POST.
    pub fn query(q: &str) -> Req {
        Req::post_json(&serde_json::json!({ "query": q }).to_string())
    }

    /// `authorization: Bearer <token>` with a demo token from `envoy/tokens/` (`alice`, `bob`).
    pub fn token(self, user: &str) -> Req {
        let token = demo_token(user);
        self.header("authorization", &format!("Bearer {token}"))
    }

    pub fn header(mut self, name: &str, value: &str) -> Req {
        self.headers.push((name.into(), value.into()));
        self
    }

    pub fn path(mut self, path: &str) -> Req {
        self.path = path.into();
        self
    }

    pub fn body(mut self, body: &[u8]) -> Req {
        self.body = body.to_vec();
        self
    }

    /// The request as sent: `host: test.local` unless it has a host, a `content-length` unless
    /// it is a GET without a body, and `connection: close`.
    pub fn to_bytes(&self) -> Vec<u8> {
        let mut out = format!("{} {} HTTP/1.1\r\n", self.method, self.path).into_bytes();
        let has_host = self
            .headers
            .iter()
            .any(|(n, _)| n.eq_ignore_ascii_case("host"));
        if !has_host {
            out.extend_from_slice(b"host: test.local\r\n");
        }
        for (n, v) in &self.headers {
            out.extend_from_slice(format!("{n}: {v}\r\n").as_bytes());
        }
        if self.method != "GET" || !self.body.is_empty() {
            out.extend_from_slice(format!("content-length: {}\r\n", self.body.len()).as_bytes());
        }
        out.extend_from_slice(b"connection: close\r\n\r\n");
        out.extend_from_slice(&self.body);
        out
    }
}

#[derive(Clone, Debug)]
pub struct Resp {
    pub status: u16,
    pub headers: Vec<(String, String)>,
    pub body: Vec<u8>,
}

impl Resp {
    pub fn header(&self, name: &str) -> Option<&str> {
        self.headers
            .iter()
            .find(|(n, _)| n.eq_ignore_ascii_case(name))
            .map(|(_, v)| v.as_str())
    }

    /// The filter's `x-cache` (`-` when absent).
    pub fn cache(&self) -> &str {
        self.header("x-cache").unwrap_or("-")
    }

    /// The filter's `x-cache-reason`.
    pub fn reason(&self) -> Option<&str> {
        self.header("x-cache-reason")
    }

    /// Answered from the fleet's L2 (a hit there, or a wait on another Envoy's fetch).
    pub fn via_l2(&self) -> bool {
        self.reason() == Some("l2")
    }

    /// The L2 service's `x-l2` (empty when absent).
    pub fn l2(&self) -> &str {
        self.header("x-l2").unwrap_or("")
    }

    pub fn text(&self) -> String {
        String::from_utf8_lossy(&self.body).to_string()
    }

    pub fn json(&self) -> serde_json::Value {
        serde_json::from_slice(&self.body)
            .unwrap_or_else(|e| panic!("not JSON ({e}): {}", self.text()))
    }
}

/// `req` to 127.0.0.1:`port`; a failure fails the test.
pub fn http(port: u16, req: Req) -> Resp {
    try_http(port, req.clone())
        .unwrap_or_else(|e| panic!("request {} {} failed: {e}", req.method, req.path))
}

/// `req` to 127.0.0.1:`port`, waiting at most 20 s for each read.
pub fn try_http(port: u16, req: Req) -> std::io::Result<Resp> {
    send(
        SocketAddr::from(([127, 0, 0, 1], port)),
        &req,
        Duration::from_secs(20),
    )
}

/// `req` on a new connection to `addr`, waiting at most `timeout` for each read.
pub fn send(addr: SocketAddr, req: &Req, timeout: Duration) -> std::io::Result<Resp> {
    let mut stream = TcpStream::connect(addr)?;
    stream.set_nodelay(true)?;
    stream.set_read_timeout(Some(timeout))?;
    // A server may answer (a 413) and close before it reads a large body: then its answer, if
    // it gave one, is the outcome, else the failed write.
    let written = stream.write_all(&req.to_bytes());
    let head_only = req.method == "HEAD";
    // Read until the response is complete, not until EOF: after a local reply Envoy delays its
    // close (delayed_close_timeout, 1 s), which real clients never wait for either.
    let mut raw = Vec::new();
    let mut buf = [0u8; 65536];
    loop {
        if let Ok(resp) = parse_response(&raw, head_only) {
            if response_complete(&raw, &resp) {
                return Ok(resp);
            }
        }
        let n = match (stream.read(&mut buf), written.as_ref()) {
            (Ok(n), _) => n,
            // A signal to the test process interrupted the read (seen under load): read again.
            (Err(e), _) if e.kind() == std::io::ErrorKind::Interrupted => continue,
            (Err(e), Ok(())) => return Err(e),
            (Err(_), Err(_)) => 0,
        };
        if n == 0 {
            let resp = parse_response(&raw, head_only);
            return match written {
                Err(e) if resp.is_err() => Err(e),
                _ => resp,
            };
        }
        raw.extend_from_slice(&buf[..n]);
    }
}

/// Whether `raw` holds the whole response: its declared length, or a final chunk.
fn response_complete(raw: &[u8], resp: &Resp) -> bool {
    if resp.header("content-length").is_some() || matches!(resp.status, 204 | 304) {
        return true; // parse_response only succeeds once the whole body is there
    }
    resp.header("transfer-encoding")
        .is_some_and(|te| te.eq_ignore_ascii_case("chunked"))
        && raw.ends_with(b"0\r\n\r\n")
}

fn parse_response(raw: &[u8], head_only: bool) -> std::io::Result<Resp> {
    let bad = |m: &str| std::io::Error::new(std::io::ErrorKind::InvalidData, m.to_string());
    let end = raw
        .windows(4)
        .position(|w| w == b"\r\n\r\n")
        .ok_or_else(|| bad("no header end"))?;
    let head = String::from_utf8_lossy(&raw[..end]).to_string();
    let mut lines = head.split("\r\n");
    let status_line = lines.next().ok_or_else(|| bad("no status line"))?;
    let status: u16 = status_line
        .split(' ')
        .nth(1)
        .and_then(|s| s.parse().ok())
        .ok_or_else(|| bad("bad status line"))?;
    let headers: Vec<(String, String)> = lines
        .filter_map(|l| l.split_once(':'))
        .map(|(n, v)| (n.trim().to_ascii_lowercase(), v.trim().to_string()))
        .collect();
    let rest = &raw[end + 4..];
    let chunked = headers
        .iter()
        .any(|(n, v)| n == "transfer-encoding" && v.eq_ignore_ascii_case("chunked"));
    // 1xx, 204 and 304 answers have no body, whatever their headers say (RFC 9112 6.3).
    let bodiless = status == 204 || status == 304 || (100..200).contains(&status);
    let body = if head_only || bodiless {
        Vec::new()
    } else if chunked {
        dechunk(rest).ok_or_else(|| bad("bad chunked body"))?
    } else if let Some(len) = headers
        .iter()
        .find(|(n, _)| n == "content-length")
        .and_then(|(_, v)| v.parse::<usize>().ok())
    {
        if rest.len() < len {
            return Err(bad("short body"));
        }
        rest[..len].to_vec()
    } else {
        rest.to_vec()
    };
    Ok(Resp {
        status,
        headers,
        body,
    })
}

fn dechunk(mut data: &[u8]) -> Option<Vec<u8>> {
    let mut out = Vec::new();
    loop {
        let line_end = data.windows(2).position(|w| w == b"\r\n")?;
        let size_text = std::str::from_utf8(&data[..line_end]).ok()?;
        let size = usize::from_str_radix(size_text.split(';').next()?.trim(), 16).ok()?;
        data = &data[line_end + 2..];
        if size == 0 {
            return Some(out);
        }
        out.extend_from_slice(data.get(..size)?);
        data = data.get(size + 2..)?;
    }
}

pub fn demo_token(user: &str) -> String {
    let path = repo_root().join("envoy/tokens").join(format!("{user}.jwt"));
    std::fs::read_to_string(path).unwrap().trim().to_string()
}

/// A GraphQL POST body for `query` with optional variables and operation name.
pub fn gql(query: &str, variables: Option<serde_json::Value>, operation: Option<&str>) -> String {
    let mut v = serde_json::json!({ "query": query });
    if let Some(vars) = variables {
        v["variables"] = vars;
    }
    if let Some(op) = operation {
        v["operationName"] = serde_json::Value::String(op.into());
    }
    v.to_string()
}

/// Runs `f` on `n` threads at once (released together) and returns their results in order.
pub fn concurrently<T: Send + 'static>(
    n: usize,
    f: impl Fn(usize) -> T + Send + Sync + 'static,
) -> Vec<T> {
    let f = std::sync::Arc::new(f);
    let barrier = std::sync::Arc::new(std::sync::Barrier::new(n));
    let handles: Vec<_> = (0..n)
        .map(|i| {
            let f = f.clone();
            let barrier = barrier.clone();
            std::thread::spawn(move || {
                barrier.wait();
                f(i)
            })
        })
        .collect();
    handles.into_iter().map(|h| h.join().unwrap()).collect()
}
