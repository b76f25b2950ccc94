//! Starts a real Envoy with the built `.wasm`, on a rendered or a shipped configuration.

use std::path::PathBuf;
use std::process::{Child, Command};
use std::time::{Duration, Instant};

use crate::client::{http, try_http, Req, Resp};
use crate::origin::Origin;
use crate::{bootstrap, envoy_bin, repo_root, scratch_dir, wasm_path};

/// The secrets `envoy/fleet.yaml` reads from Envoy's environment (`host_env_keys`), as the demo
/// sets them: every Envoy a test starts has them.
pub const FLEET_SECRETS: [(&str, &str); 3] = [
    ("GRAPHQL_CACHE_FLEET_KEY", FLEET_KEY),
    ("GRAPHQL_CACHE_L2_SECRET", L2_SECRET),
    ("GRAPHQL_CACHE_PURGE_TOKEN", "demo-purge-token-change-me"),
];
pub const FLEET_KEY: &str = "dev-fleet-key-change-me-0123456789abcdef";
pub const L2_SECRET: &str = crate::l2::DEV_SECRET;

/// What a test changes of the rendered bootstrap; the YAML blocks may come at any indentation.
#[derive(Clone)]
pub struct EnvoyOptions {
    /// The filter's JSON configuration.
    pub plugin_config: String,
    pub concurrency: u32,
    /// Extra HTTP filters (YAML list items) before the cache.
    pub filters_before: String,
    /// Route entries (YAML list items) placed before the catch-all route.
    pub extra_routes: String,
    /// Extra clusters (YAML list items).
    pub extra_clusters: String,
    /// Route timeout for the catch-all route.
    pub route_timeout: String,
    /// The plugin option the README requires; off only to test the filter's safety net.
    pub allow_on_headers_stop_iteration: bool,
    /// Top-level bootstrap fields, e.g. a `stats_config`.
    pub bootstrap_extra: String,
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
            bootstrap_extra: String::new(),
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

/// The origin's test controls (`x-origin-delay-ms`, ...) work by reaching the origin: through a
/// shared fetch too, which carries only the key's headers and `forward_headers`.
const ORIGIN_CONTROLS: [&str; 4] = [
    "x-origin-delay-ms",
    "x-origin-fault",
    "x-origin-status",
    "x-origin-header",
];

/// The plugin configuration as given, with the origin's controls added to the default
/// `forward_headers` when it names none (a configuration that is not an object stays as it is).
fn with_origin_controls(plugin_config: &str) -> String {
    let Ok(serde_json::Value::Object(mut map)) = serde_json::from_str(plugin_config) else {
        return plugin_config.to_string();
    };
    if map.contains_key("forward_headers") {
        return plugin_config.to_string();
    }
    let mut names = vec!["traceparent", "tracestate", "user-agent", "x-request-id"];
    names.extend(ORIGIN_CONTROLS);
    map.insert("forward_headers".into(), serde_json::json!(names));
    serde_json::Value::Object(map).to_string()
}

/// Renders a complete bootstrap (`testkit/bootstrap/`): one listener, the filter chain, the
/// origin cluster.
pub fn render_envoy_yaml(opts: &EnvoyOptions, origin_port: u16) -> String {
    let filter = bootstrap::wasm_filter(
        &wasm_path(),
        "graphql_cache",
        opts.allow_on_headers_stop_iteration,
        &with_origin_controls(&opts.plugin_config),
    );
    let listener = bootstrap::listener(&bootstrap::Listener {
        name: "main",
        port: 0,
        stat_prefix: "ingress",
        // Spread connections evenly over the workers, so concurrent tests exercise both.
        extra: "connection_balance_config: { exact_balance: {} }",
        routes: &opts.extra_routes,
        catch_all: &format!(
            "route: {{ cluster: origin, timeout: {} }}",
            opts.route_timeout
        ),
        filters: &bootstrap::blocks(&[&opts.filters_before, &filter]),
    });
    bootstrap::envoy(
        0,
        &listener,
        origin_port,
        &opts.extra_clusters,
        &opts.bootstrap_extra,
    )
}

/// A static cluster named `name` for `extra_clusters`, pointing at a local port.
pub fn cluster_yaml(name: &str, port: u16) -> String {
    bootstrap::cluster(name, port)
}

/// One of the shipped configurations under `envoy/`, with only what must differ for a test run
/// substituted: ephemeral ports, the origin's port and the absolute path of the built filter.
pub fn shipped_config(file: &str, origin_port: u16) -> String {
    let text = std::fs::read_to_string(repo_root().join("envoy").join(file)).unwrap();
    let substitutions = [
        ("port_value: 8080", "port_value: 0".to_string()),
        ("port_value: 9901", "port_value: 0".to_string()),
        ("port_value: 8082", "port_value: 0".to_string()),
        ("port_value: 8081", format!("port_value: {origin_port}")),
        (
            "filename: graphql_cache.wasm",
            format!("filename: {}", wasm_path().display()),
        ),
    ];
    substitutions.iter().fold(text, |t, (from, to)| {
        // The internal listener (8082) is only in the configurations that have a purge API.
        let optional = *from == "port_value: 8082";
        assert!(
            optional || t.contains(from),
            "{file} no longer contains {from:?}"
        );
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

    /// Starts Envoy on a complete bootstrap written by the test.
    pub fn start_bootstrap(config: &str, concurrency: u32) -> Envoy {
        Envoy::start_yaml(config, concurrency)
            .unwrap_or_else(|log| panic!("Envoy failed to start:\n{log}"))
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
            .envs(FLEET_SECRETS)
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
            if let Some(ports) = Envoy::ready_ports(&admin_file, config) {
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

    /// The admin port and the port of the listener configured first. `/listeners` does not list
    /// them in configuration order (an internal listener can come first), so the first one is
    /// found by where its name appears in the configuration.
    fn ready_ports(admin_file: &PathBuf, config: &str) -> Option<(u16, u16)> {
        let admin = std::fs::read_to_string(admin_file).ok()?;
        let admin_port: u16 = admin.trim().rsplit(':').next()?.parse().ok()?;
        let ready = try_http(admin_port, Req::get("/ready")).ok()?;
        if ready.status != 200 {
            return None;
        }
        let listeners = try_http(admin_port, Req::get("/listeners?format=json")).ok()?;
        let v: serde_json::Value = serde_json::from_slice(&listeners.body).ok()?;
        let first = v["listener_statuses"].as_array()?.iter().min_by_key(|l| {
            l["name"]
                .as_str()
                .and_then(|name| name_position(config, name))
                .unwrap_or(usize::MAX)
        })?;
        let port = first["local_address"]["socket_address"]["port_value"].as_u64()?;
        Some((admin_port, port as u16))
    }

    /// The port of the listener named `name` (the first listener's is `port`).
    pub fn listener_port(&self, name: &str) -> u16 {
        let listeners = http(self.admin_port, Req::get("/listeners?format=json"));
        let v: serde_json::Value = serde_json::from_slice(&listeners.body).unwrap();
        let status = v["listener_statuses"]
            .as_array()
            .unwrap()
            .iter()
            .find(|l| l["name"] == name)
            .unwrap_or_else(|| panic!("no listener {name}"));
        status["local_address"]["socket_address"]["port_value"]
            .as_u64()
            .unwrap() as u16
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

    /// The samples of `/stats/prometheus` whose metric name starts with `prefix`: the name, its
    /// labels (sorted) and the value.
    pub fn prometheus(&self, prefix: &str) -> Vec<PromSample> {
        let r = http(self.admin_port, Req::get("/stats/prometheus"));
        String::from_utf8_lossy(&r.body)
            .lines()
            .filter(|l| l.starts_with(prefix))
            .filter_map(PromSample::parse)
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

/// Where `name: <name>` first appears in `config` as a whole name (not a prefix of a longer one).
fn name_position(config: &str, name: &str) -> Option<usize> {
    let needle = format!("name: {name}");
    config.match_indices(&needle).map(|(i, _)| i).find(|i| {
        config[i + needle.len()..]
            .chars()
            .next()
            .is_none_or(|c| !(c.is_ascii_alphanumeric() || c == '_'))
    })
}

/// One sample of Prometheus' text format.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord)]
pub struct PromSample {
    pub name: String,
    pub labels: Vec<(String, String)>,
    pub value: String,
}

impl PromSample {
    fn parse(line: &str) -> Option<PromSample> {
        let (series, value) = line.rsplit_once(' ')?;
        let (name, labels) = match series.split_once('{') {
            Some((name, rest)) => (name, rest.strip_suffix('}')?),
            None => (series, ""),
        };
        let mut labels: Vec<(String, String)> = labels
            .split("\",")
            .filter(|l| !l.is_empty())
            .filter_map(|l| {
                let (k, v) = l.split_once("=\"")?;
                Some((k.to_string(), v.trim_end_matches('"').to_string()))
            })
            .collect();
        labels.sort();
        Some(PromSample {
            name: name.to_string(),
            labels,
            value: value.to_string(),
        })
    }

    pub fn label(&self, name: &str) -> Option<&str> {
        self.labels
            .iter()
            .find(|(k, _)| k == name)
            .map(|(_, v)| v.as_str())
    }
}

/// The bootstrap's `stats_config` that turns the per-operation counters' names into tags (the
/// same block the shipped configurations carry).
pub const OPERATION_STATS_TAGS: &str = r#"stats_config:
  stats_tags:
  - tag_name: graphql_operation
    regex: "(graphql_operation=\\.=(.*?);\\.;)"
  - tag_name: graphql_cache_reason
    regex: "(graphql_cache_reason=\\.=(.*?);\\.;)"
"#;
