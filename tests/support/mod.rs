//! Test support: a real origin process, a real Envoy with the built `.wasm`, and a small HTTP/1.1
//! client that can send arbitrary bytes and report exactly what came back.
#![allow(dead_code, clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use std::io::{BufRead, BufReader, Read, Write};
use std::net::TcpStream;
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

pub fn repo_root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

fn env_path(var: &str, default: &str) -> PathBuf {
    std::env::var_os(var)
        .map(PathBuf::from)
        .unwrap_or_else(|| repo_root().join(default))
}

pub fn envoy_bin() -> PathBuf {
    let p = env_path("ENVOY_BIN", ".tools/bin/envoy");
    assert!(
        p.exists(),
        "Envoy not found at {} (run `make tools` or set ENVOY_BIN)",
        p.display()
    );
    p
}

pub fn wasm_path() -> PathBuf {
    let p = env_path(
        "GRAPHQL_CACHE_WASM",
        "target/wasm32-wasip1/release/graphql_cache.wasm",
    );
    assert!(
        p.exists(),
        "filter not built at {} (run `make build`)",
        p.display()
    );
    p
}

pub fn origin_bin() -> PathBuf {
    let p = env_path("ORIGIN_BIN", "target/release/graphql-origin");
    assert!(
        p.exists(),
        "origin not built at {} (run `make build`)",
        p.display()
    );
    p
}

fn scratch_dir(tag: &str) -> PathBuf {
    static N: AtomicUsize = AtomicUsize::new(0);
    let dir = std::env::temp_dir().join(format!(
        "graphql-cache-test-{}-{}-{}",
        std::process::id(),
        tag,
        N.fetch_add(1, Ordering::SeqCst)
    ));
    std::fs::create_dir_all(&dir).unwrap();
    dir
}

// ---------------------------------------------------------------------------------------------
// The origin

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

// ---------------------------------------------------------------------------------------------
// Envoy

#[derive(Clone)]
pub struct EnvoyOptions {
    /// The filter's JSON configuration.
    pub plugin_config: String,
    pub concurrency: u32,
    /// Extra HTTP filters (YAML list items, indented for the `http_filters` list) before the cache.
    pub filters_before: String,
    /// Route entries (YAML list items) placed before the catch-all route.
    pub extra_routes: String,
    /// Extra clusters (YAML list items).
    pub extra_clusters: String,
    /// Route timeout for the catch-all route.
    pub route_timeout: String,
    /// The plugin option the README requires; off only to test the filter's safety net.
    pub allow_on_headers_stop_iteration: bool,
}

impl Default for EnvoyOptions {
    fn default() -> Self {
        EnvoyOptions {
            plugin_config: "{}".into(),
            concurrency: 2,
            filters_before: String::new(),
            extra_routes: String::new(),
            extra_clusters: String::new(),
            route_timeout: "15s".into(),
            allow_on_headers_stop_iteration: true,
        }
    }
}

impl EnvoyOptions {
    pub fn config(json: &str) -> Self {
        EnvoyOptions {
            plugin_config: json.into(),
            ..Default::default()
        }
    }
}

pub struct Envoy {
    child: Child,
    pub port: u16,
    pub admin_port: u16,
    pub dir: PathBuf,
}

/// Renders a complete bootstrap: one listener, the filter chain, the origin cluster.
pub fn render_envoy_yaml(opts: &EnvoyOptions, origin_port: u16) -> String {
    let config_literal = serde_json::to_string(&opts.plugin_config).unwrap();
    format!(
        r#"admin:
  address: {{ socket_address: {{ address: 127.0.0.1, port_value: 0 }} }}
static_resources:
  listeners:
  - name: main
    address: {{ socket_address: {{ address: 127.0.0.1, port_value: 0 }} }}
    # Spread connections evenly over the workers, so concurrent tests exercise both.
    connection_balance_config: {{ exact_balance: {{}} }}
    filter_chains:
    - filters:
      - name: envoy.filters.network.http_connection_manager
        typed_config:
          "@type": type.googleapis.com/envoy.extensions.filters.network.http_connection_manager.v3.HttpConnectionManager
          stat_prefix: ingress
          route_config:
            virtual_hosts:
            - name: all
              domains: ["*"]
              routes:
{extra_routes}
              - match: {{ prefix: "/" }}
                route: {{ cluster: origin, timeout: {timeout} }}
          http_filters:
{filters_before}
          - name: envoy.filters.http.wasm
            typed_config:
              "@type": type.googleapis.com/envoy.extensions.filters.http.wasm.v3.Wasm
              config:
                name: graphql_cache
                root_id: graphql_cache
                allow_on_headers_stop_iteration: {allow_stop}
                vm_config:
                  vm_id: graphql_cache
                  runtime: envoy.wasm.runtime.v8
                  code: {{ local: {{ filename: {wasm} }} }}
                configuration:
                  "@type": type.googleapis.com/google.protobuf.StringValue
                  value: {config_literal}
          - name: envoy.filters.http.router
            typed_config:
              "@type": type.googleapis.com/envoy.extensions.filters.http.router.v3.Router
  clusters:
{origin_cluster}
{extra_clusters}
"#,
        extra_routes = opts.extra_routes,
        timeout = opts.route_timeout,
        filters_before = opts.filters_before,
        wasm = wasm_path().display(),
        origin_cluster = cluster_yaml("origin", origin_port),
        extra_clusters = opts.extra_clusters,
        allow_stop = opts.allow_on_headers_stop_iteration,
    )
}

/// A static cluster named `name` for `extra_clusters`, pointing at a local port.
pub fn cluster_yaml(name: &str, port: u16) -> String {
    format!(
        r#"  - name: {name}
    connect_timeout: 1s
    type: STATIC
    load_assignment:
      cluster_name: {name}
      endpoints:
      - lb_endpoints:
        - endpoint: {{ address: {{ socket_address: {{ address: 127.0.0.1, port_value: {port} }} }} }}"#
    )
}

/// One of the shipped configurations under `envoy/`, with only what must differ for a test run
/// substituted: ephemeral ports, the origin's port and the absolute path of the built filter.
pub fn shipped_config(file: &str, origin_port: u16) -> String {
    let text = std::fs::read_to_string(repo_root().join("envoy").join(file)).unwrap();
    let substitutions = [
        ("port_value: 8080", "port_value: 0".to_string()),
        ("port_value: 9901", "port_value: 0".to_string()),
        ("port_value: 8081", format!("port_value: {origin_port}")),
        (
            "filename: graphql_cache.wasm",
            format!("filename: {}", wasm_path().display()),
        ),
    ];
    substitutions.iter().fold(text, |t, (from, to)| {
        assert!(t.contains(from), "{file} no longer contains {from:?}");
        t.replace(from, to)
    })
}

impl Envoy {
    /// Starts Envoy on a shipped configuration (see [`shipped_config`]).
    pub fn start_shipped(file: &str, origin: &Origin) -> Envoy {
        Envoy::start_yaml(&shipped_config(file, origin.port), 2)
            .unwrap_or_else(|log| panic!("Envoy failed to start:\n{log}"))
    }

    pub fn start(opts: &EnvoyOptions, origin: &Origin) -> Envoy {
        Envoy::try_start(opts, origin.port)
            .unwrap_or_else(|log| panic!("Envoy failed to start:\n{log}"))
    }

    /// Starts Envoy and waits for its listener; on failure returns Envoy's log.
    pub fn try_start(opts: &EnvoyOptions, origin_port: u16) -> Result<Envoy, String> {
        Envoy::start_yaml(&render_envoy_yaml(opts, origin_port), opts.concurrency)
    }

    fn start_yaml(config: &str, concurrency: u32) -> Result<Envoy, String> {
        let dir = scratch_dir("envoy");
        let yaml = dir.join("envoy.yaml");
        std::fs::write(&yaml, config).unwrap();
        let admin_file = dir.join("admin.txt");
        let log_file = dir.join("envoy.log");
        let log = std::fs::File::create(&log_file).unwrap();
        let mut child = Command::new(envoy_bin())
            .arg("-c")
            .arg(&yaml)
            .args(["--concurrency", &concurrency.to_string()])
            .arg("--use-dynamic-base-id")
            .arg("--admin-address-path")
            .arg(&admin_file)
            .args(["-l", "info", "--component-log-level", "wasm:info"])
            .stdout(log.try_clone().unwrap())
            .stderr(log)
            .spawn()
            .expect("start envoy");
        let deadline = Instant::now() + Duration::from_secs(30);
        loop {
            if let Some(status) = child.try_wait().unwrap() {
                let log = std::fs::read_to_string(&log_file).unwrap_or_default();
                return Err(format!("exited with {status}\n{log}"));
            }
            if Instant::now() > deadline {
                let _ = child.kill();
                let log = std::fs::read_to_string(&log_file).unwrap_or_default();
                return Err(format!("not ready after 30s\n{log}"));
            }
            if let Some(ports) = Envoy::ready_ports(&admin_file) {
                return Ok(Envoy {
                    child,
                    port: ports.1,
                    admin_port: ports.0,
                    dir,
                });
            }
            std::thread::sleep(Duration::from_millis(50));
        }
    }

    fn ready_ports(admin_file: &PathBuf) -> Option<(u16, u16)> {
        let admin = std::fs::read_to_string(admin_file).ok()?;
        let admin_port: u16 = admin.trim().rsplit(':').next()?.parse().ok()?;
        let ready = try_http(admin_port, Req::get("/ready")).ok()?;
        if ready.status != 200 {
            return None;
        }
        let listeners = try_http(admin_port, Req::get("/listeners?format=json")).ok()?;
        let v: serde_json::Value = serde_json::from_slice(&listeners.body).ok()?;
        let port =
            v["listener_statuses"][0]["local_address"]["socket_address"]["port_value"].as_u64()?;
        Some((admin_port, port as u16))
    }

    pub fn log(&self) -> String {
        std::fs::read_to_string(self.dir.join("envoy.log")).unwrap_or_default()
    }

    /// A counter from `/stats` (0 when absent).
    pub fn stat(&self, name: &str) -> u64 {
        let r = http(
            self.admin_port,
            Req::get(&format!("/stats?filter=^{name}$")),
        );
        let text = String::from_utf8_lossy(&r.body).to_string();
        text.lines()
            .find_map(|l| l.strip_prefix(&format!("{name}: ")))
            .and_then(|v| v.trim().parse().ok())
            .unwrap_or(0)
    }

    /// Downstream connections each worker accepted on the main listener.
    pub fn worker_connections(&self) -> Vec<u64> {
        let r = http(
            self.admin_port,
            Req::get("/stats?filter=^listener\\..*worker_.*downstream_cx_total$"),
        );
        let text = String::from_utf8_lossy(&r.body).to_string();
        text.lines()
            .filter(|l| !l.contains("admin"))
            .filter_map(|l| l.rsplit(": ").next()?.trim().parse().ok())
            .collect()
    }

    /// A filter counter, `wasmcustom.graphql_cache.<name>`.
    pub fn counter(&self, name: &str) -> u64 {
        self.stat(&format!("wasmcustom.graphql_cache.{name}"))
    }

    pub fn is_alive(&mut self) -> bool {
        self.child.try_wait().unwrap().is_none()
            && try_http(self.admin_port, Req::get("/ready")).is_ok_and(|r| r.status == 200)
    }

    pub fn send(&self, req: Req) -> Resp {
        http(self.port, req)
    }
}

impl Drop for Envoy {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
        if !std::thread::panicking() {
            let _ = std::fs::remove_dir_all(&self.dir);
        }
    }
}

// ---------------------------------------------------------------------------------------------
// HTTP/1.1 client

#[derive(Clone, Debug)]
pub struct Req {
    pub method: String,
    pub path: String,
    pub headers: Vec<(String, String)>,
    pub body: Vec<u8>,
}

impl Req {
    pub fn get(path: &str) -> Req {
        Req {
            method: "GET".into(),
            path: path.into(),
            headers: vec![],
            body: vec![],
        }
    }

    /// A GraphQL POST with a JSON body given as text.
    pub fn post_json(body: &str) -> Req {
        Req::post_raw("application/json", body.as_bytes())
    }

    pub fn post_raw(content_type: &str, body: &[u8]) -> Req {
        Req {
            method: "POST".into(),
            path: "/graphql".into(),
            headers: vec![("content-type".into(), content_type.into())],
            body: body.to_vec(),
        }
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

    pub fn cache(&self) -> &str {
        self.header("x-cache").unwrap_or("-")
    }

    pub fn text(&self) -> String {
        String::from_utf8_lossy(&self.body).to_string()
    }

    pub fn json(&self) -> serde_json::Value {
        serde_json::from_slice(&self.body)
            .unwrap_or_else(|e| panic!("not JSON ({e}): {}", self.text()))
    }
}

pub fn http(port: u16, req: Req) -> Resp {
    try_http(port, req.clone())
        .unwrap_or_else(|e| panic!("request {} {} failed: {e}", req.method, req.path))
}

pub fn try_http(port: u16, req: Req) -> std::io::Result<Resp> {
    let mut stream = TcpStream::connect(("127.0.0.1", port))?;
    stream.set_read_timeout(Some(Duration::from_secs(20)))?;
    stream.write_all(&req.to_bytes())?;
    // Read until the response is complete, not until EOF: after a local reply Envoy delays its
    // close (delayed_close_timeout, 1 s), which real clients never wait for either.
    let mut raw = Vec::new();
    let mut buf = [0u8; 65536];
    loop {
        if let Ok(resp) = parse_response(&raw, req.method == "HEAD") {
            if response_complete(&raw, &resp) {
                return Ok(resp);
            }
        }
        let n = stream.read(&mut buf)?;
        if n == 0 {
            return parse_response(&raw, req.method == "HEAD");
        }
        raw.extend_from_slice(&buf[..n]);
    }
}

/// Whether `raw` holds the whole response: its declared length, or a final chunk.
fn response_complete(raw: &[u8], resp: &Resp) -> bool {
    if resp.header("content-length").is_some() {
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
    let body = if head_only {
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

/// An origin and an Envoy with the cache configured by `config`.
pub fn stack(config: &str) -> (Origin, Envoy) {
    let origin = Origin::start();
    let envoy = Envoy::start(&EnvoyOptions::config(config), &origin);
    (origin, envoy)
}
