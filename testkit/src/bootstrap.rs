//! The Envoy bootstrap, rendered from the templates in `testkit/bootstrap/`. `bench/bench.py`
//! renders the same files by the same two rules (their README): `${name}` takes a value inline,
//! and a placeholder alone on its line takes a block indented to its column.

use std::path::Path;

const ENVOY: &str = include_str!("../bootstrap/envoy.yaml");
const LISTENER: &str = include_str!("../bootstrap/listener.yaml");
const WASM_FILTER: &str = include_str!("../bootstrap/wasm_filter.yaml");
const CLUSTER: &str = include_str!("../bootstrap/cluster.yaml");

/// A complete bootstrap: admin on `admin_port`, `listener` (see [`listener`]), the `origin`
/// cluster on `origin_port`, then `clusters` (YAML list items) and `extra` (top-level fields).
pub fn envoy(
    admin_port: u16,
    listener: &str,
    origin_port: u16,
    clusters: &str,
    extra: &str,
) -> String {
    render(
        ENVOY,
        &[
            ("admin_port", &admin_port.to_string()),
            ("listener", listener),
            ("origin_cluster", &cluster("origin", origin_port)),
            ("clusters", clusters),
            ("bootstrap_extra", extra),
        ],
    )
}

/// One HTTP listener with the filter chain: the blocks are YAML at any indentation.
pub struct Listener<'a> {
    pub name: &'a str,
    pub port: u16,
    pub stat_prefix: &'a str,
    /// More listener fields.
    pub extra: &'a str,
    /// Route entries before the catch-all.
    pub routes: &'a str,
    /// What the catch-all route does (`route: ...`, `direct_response: ...`).
    pub catch_all: &'a str,
    /// HTTP filters before the router.
    pub filters: &'a str,
}

/// The listener as a YAML mapping (not a list item).
pub fn listener(l: &Listener) -> String {
    render(
        LISTENER,
        &[
            ("name", l.name),
            ("port", &l.port.to_string()),
            ("listener_extra", l.extra),
            ("stat_prefix", l.stat_prefix),
            ("routes", l.routes),
            ("catch_all", l.catch_all),
            ("filters", l.filters),
        ],
    )
}

/// The filter as an `http_filters` item: `wasm` in VM `vm_id`, configured with `config` (text).
pub fn wasm_filter(wasm: &Path, vm_id: &str, allow_stop: bool, config: &str) -> String {
    let literal = serde_json::to_string(config).unwrap();
    render(
        WASM_FILTER,
        &[
            ("allow_stop", &allow_stop.to_string()),
            ("vm_id", vm_id),
            ("wasm", &wasm.display().to_string()),
            ("config", &literal),
        ],
    )
}

/// A static cluster named `name` on a local port, as a YAML list item.
pub fn cluster(name: &str, port: u16) -> String {
    render(CLUSTER, &[("name", name), ("port", &port.to_string())])
}

/// Blocks given each at its own indentation, as one block.
pub fn blocks(parts: &[&str]) -> String {
    parts
        .iter()
        .map(|p| dedent(p))
        .filter(|p| !p.is_empty())
        .collect::<Vec<_>>()
        .join("\n")
}

/// `template` with every `${name}` replaced by its value; a placeholder alone on its line (or
/// after `- `) by the value as a block indented to its column. A missing value panics.
pub fn render(template: &str, values: &[(&str, &str)]) -> String {
    let value = |name: &str| -> &str {
        values
            .iter()
            .find(|(n, _)| *n == name)
            .map(|(_, v)| *v)
            .unwrap_or_else(|| panic!("no value for ${{{name}}}"))
    };
    let mut out = String::new();
    for line in template.lines() {
        let Some((indent, item, name)) = block_placeholder(line) else {
            out.push_str(&inline(line, &value));
            out.push('\n');
            continue;
        };
        for (i, l) in dedent(value(name)).lines().enumerate() {
            if !l.is_empty() {
                out.push_str(indent);
                if item {
                    out.push_str(if i == 0 { "- " } else { "  " });
                }
                out.push_str(l);
            }
            out.push('\n');
        }
    }
    out
}

/// `(indentation, after "- ", name)` of a line that is only a placeholder.
fn block_placeholder(line: &str) -> Option<(&str, bool, &str)> {
    let rest = line.trim_start_matches(' ');
    let indent = &line[..line.len() - rest.len()];
    let (item, rest) = match rest.strip_prefix("- ") {
        Some(r) => (true, r),
        None => (false, rest),
    };
    let name = rest.strip_prefix("${")?.strip_suffix('}')?;
    is_name(name).then_some((indent, item, name))
}

fn inline<'v>(line: &str, value: &impl Fn(&str) -> &'v str) -> String {
    let mut out = String::new();
    let mut rest = line;
    while let Some(start) = rest.find("${") {
        let after = &rest[start + 2..];
        match after.find('}').filter(|&end| is_name(&after[..end])) {
            Some(end) => {
                out.push_str(&rest[..start]);
                out.push_str(value(&after[..end]));
                rest = &after[end + 1..];
            }
            None => {
                out.push_str(&rest[..start + 2]);
                rest = after;
            }
        }
    }
    out.push_str(rest);
    out
}

fn is_name(s: &str) -> bool {
    !s.is_empty() && s.chars().all(|c| c.is_alphanumeric() || c == '_')
}

/// `text` without its leading and trailing blank lines and without the indentation all its
/// lines share (blank lines become empty), as Python's `textwrap.dedent(text).strip("\n")`.
pub fn dedent(text: &str) -> String {
    let lines: Vec<&str> = text.lines().collect();
    let blank = |l: &&str| l.trim().is_empty();
    let first = lines.iter().position(|l| !blank(l)).unwrap_or(lines.len());
    let last = lines
        .iter()
        .rposition(|l| !blank(l))
        .map_or(first, |i| i + 1);
    let lines = &lines[first..last];
    let margin = lines
        .iter()
        .filter(|l| !blank(l))
        .map(|l| l.len() - l.trim_start().len())
        .min()
        .unwrap_or(0);
    lines
        .iter()
        .map(|l| if blank(l) { "" } else { &l[margin..] })
        .collect::<Vec<_>>()
        .join("\n")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn blocks_take_the_placeholder_column_and_list_items_their_dash() {
        let t = "a:\n  ${b}\n  - ${c}\n  ${empty}\nd: ${e}\n";
        let out = render(
            t,
            &[
                ("b", "\n      x: 1\n        y: 2\n"),
                ("c", "p: 1\nq: 2"),
                ("empty", ""),
                ("e", "v"),
            ],
        );
        assert_eq!(out, "a:\n  x: 1\n    y: 2\n  - p: 1\n    q: 2\nd: v\n");
    }

    #[test]
    fn text_that_is_not_a_placeholder_stays() {
        assert_eq!(render("a: ${ b}$\n", &[]), "a: ${ b}$\n");
    }
}
