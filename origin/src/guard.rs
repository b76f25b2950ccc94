//! Cheap pre-parse guard against pathologically nested query documents.
//!
//! async-graphql caps selection-set nesting but not the nesting of input
//! values (`{nested: {nested: ...}}`, `[[[...]]]`); thousands of levels
//! overflow a worker thread's stack (and the release profile aborts on
//! panic). Counting brackets outside strings and comments is O(n) and catches
//! that before the parser runs.

/// Deepest bracket nesting (`{`, `[`, `(` combined) accepted in a query.
pub const MAX_NESTING: usize = 256;

/// Returns the maximum bracket nesting of a GraphQL document, ignoring
/// brackets inside strings, block strings and comments. Stops counting (and
/// returns a value > `limit`) as soon as `limit` is exceeded.
pub fn max_nesting(query: &str, limit: usize) -> usize {
    let bytes = query.as_bytes();
    let mut depth: usize = 0;
    let mut max: usize = 0;
    let mut i = 0;
    while i < bytes.len() {
        match bytes[i] {
            b'#' => {
                while i < bytes.len() && bytes[i] != b'\n' && bytes[i] != b'\r' {
                    i += 1;
                }
            }
            b'"' if bytes[i..].starts_with(b"\"\"\"") => {
                i += 3;
                while i < bytes.len() {
                    if bytes[i..].starts_with(b"\\\"\"\"") {
                        i += 4;
                    } else if bytes[i..].starts_with(b"\"\"\"") {
                        i += 3;
                        break;
                    } else {
                        i += 1;
                    }
                }
                continue;
            }
            b'"' => {
                i += 1;
                while i < bytes.len() {
                    match bytes[i] {
                        b'\\' => i += 2,
                        b'"' => {
                            i += 1;
                            break;
                        }
                        // An unterminated string ends at the line end.
                        b'\n' | b'\r' => break,
                        _ => i += 1,
                    }
                }
                continue;
            }
            b'{' | b'[' | b'(' => {
                depth += 1;
                if depth > max {
                    max = depth;
                    if max > limit {
                        return max;
                    }
                }
            }
            b'}' | b']' | b')' => depth = depth.saturating_sub(1),
            _ => {}
        }
        i += 1;
    }
    max
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]
mod tests {
    use super::*;

    #[test]
    fn counts_brackets() {
        assert_eq!(max_nesting("", 10), 0);
        assert_eq!(max_nesting("{ a }", 10), 1);
        assert_eq!(max_nesting("{ a(x: [1, {b: 2}]) { c } }", 10), 4);
        assert_eq!(max_nesting("{a}{b}", 10), 1);
    }

    #[test]
    fn ignores_strings_and_comments() {
        assert_eq!(max_nesting(r#"{ echo(value: "[[[{{{(((") }"#, 10), 2);
        assert_eq!(max_nesting(r#"{ echo(value: "a\"[[[") }"#, 10), 2);
        assert_eq!(max_nesting("{ a # {{{{ [[[\n b }", 10), 1);
        assert_eq!(
            max_nesting("{ echo(value: \"\"\"x \\\"\"\" {{{ \"\"\") }", 10),
            2
        );
    }

    #[test]
    fn stops_past_limit() {
        let deep = "[".repeat(100_000);
        assert_eq!(max_nesting(&deep, 256), 257);
        let ok = format!("{}{}", "{a:".repeat(200), "}".repeat(200));
        assert_eq!(max_nesting(&ok, 256), 200);
    }
}
