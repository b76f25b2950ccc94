//! Strict JSON for the key: the POST body, `variables` and `extensions`, parsed once into a tree
//! that keeps what a generic JSON value loses and the origin may not. Also the cheap reader of
//! answers for their tags (`invalidate::tags`) and, in the same pass, for whether they may be
//! stored (`cache::storable`): its strings borrow from the text, where a `serde_json::Value`
//! allocates every name and string.
//!
//! - A number keeps its text. Read into a double, `0.10` and `0.1`, `1e2` and `100.0`, or two
//!   integers beyond 2^53 become one value, while the origin may read them as a `Decimal`, a
//!   big integer or an ID and answer them differently: same text, same key; any other text,
//!   another key (at worst a miss).
//! - An object that names a member twice is refused: servers disagree on which one wins (first,
//!   last, or an error), so no key can stand for what the origin will read.
//!
//! Everything else is canonical as before: members sorted by name, strings decoded and printed
//! with `serde_json`'s escapes, no white space.

use std::borrow::Cow;

/// Why a text is not JSON the key can stand on.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum JsonError {
    /// Not JSON (RFC 8259), or nested deeper than [`MAX_DEPTH`].
    Malformed,
    /// An object names a member twice (after decoding escapes).
    DuplicateMember,
}

/// The nesting `serde_json` accepts by default; it also bounds this parser's recursion.
const MAX_DEPTH: usize = 128;

#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Json<'a> {
    Null,
    Bool(bool),
    /// The number exactly as written (already checked against the JSON grammar).
    Number(&'a str),
    String(Cow<'a, str>),
    Array(Vec<Json<'a>>),
    /// Members sorted by name, no name twice.
    Object(Vec<(Cow<'a, str>, Json<'a>)>),
}

/// Parses one JSON text (white space around it allowed, nothing else).
pub fn parse(text: &str) -> Result<Json<'_>, JsonError> {
    let mut p = Parser {
        text,
        bytes: text.as_bytes(),
        pos: 0,
    };
    p.skip_ws();
    let value = p.value(0)?;
    p.skip_ws();
    if p.pos != p.bytes.len() {
        return Err(JsonError::Malformed);
    }
    Ok(value)
}

impl Json<'_> {
    /// The canonical text.
    pub fn to_canonical(&self) -> String {
        // Most texts printed so (a representation, a variable) are short: one allocation, not
        // the four of a string grown from empty.
        let mut out = String::with_capacity(64);
        self.write(&mut out);
        out
    }

    fn write(&self, out: &mut String) {
        match self {
            Json::Null => out.push_str("null"),
            Json::Bool(b) => out.push_str(if *b { "true" } else { "false" }),
            Json::Number(n) => out.push_str(n),
            Json::String(s) => write_string(out, s),
            Json::Array(items) => {
                out.push('[');
                for (i, item) in items.iter().enumerate() {
                    if i > 0 {
                        out.push(',');
                    }
                    item.write(out);
                }
                out.push(']');
            }
            Json::Object(members) => write_members(out, members),
        }
    }
}

/// Members (sorted) printed as an object.
pub fn write_members(out: &mut String, members: &[(Cow<'_, str>, Json<'_>)]) {
    out.push('{');
    for (i, (name, value)) in members.iter().enumerate() {
        if i > 0 {
            out.push(',');
        }
        write_string(out, name);
        out.push(':');
        value.write(out);
    }
    out.push('}');
}

/// A string as `serde_json` prints it, so canonical texts are what they were before this parser.
pub fn write_string(out: &mut String, s: &str) {
    out.push('"');
    let mut start = 0;
    for (i, b) in s.bytes().enumerate() {
        let escape = match b {
            b'"' => "\\\"",
            b'\\' => "\\\\",
            b'\n' => "\\n",
            b'\r' => "\\r",
            b'\t' => "\\t",
            0x08 => "\\b",
            0x0c => "\\f",
            0..=0x1f => "",
            _ => continue,
        };
        out.push_str(&s[start..i]);
        if escape.is_empty() {
            out.push_str("\\u00");
            out.push(char::from(HEX[usize::from(b >> 4)]));
            out.push(char::from(HEX[usize::from(b & 0xf)]));
        } else {
            out.push_str(escape);
        }
        start = i + 1;
    }
    out.push_str(&s[start..]);
    out.push('"');
}

const HEX: &[u8; 16] = b"0123456789abcdef";

struct Parser<'a> {
    text: &'a str,
    bytes: &'a [u8],
    pos: usize,
}

impl<'a> Parser<'a> {
    fn peek(&self) -> Option<u8> {
        self.bytes.get(self.pos).copied()
    }

    fn skip_ws(&mut self) {
        while matches!(self.peek(), Some(b' ' | b'\t' | b'\n' | b'\r')) {
            self.pos += 1;
        }
    }

    fn eat(&mut self, b: u8) -> Result<(), JsonError> {
        if self.peek() == Some(b) {
            self.pos += 1;
            Ok(())
        } else {
            Err(JsonError::Malformed)
        }
    }

    fn literal(&mut self, word: &str, value: Json<'a>) -> Result<Json<'a>, JsonError> {
        if self.bytes[self.pos..].starts_with(word.as_bytes()) {
            self.pos += word.len();
            Ok(value)
        } else {
            Err(JsonError::Malformed)
        }
    }

    fn value(&mut self, depth: usize) -> Result<Json<'a>, JsonError> {
        match self.peek() {
            Some(b'{') => self.object(depth + 1),
            Some(b'[') => self.array(depth + 1),
            Some(b'"') => self.string().map(Json::String),
            Some(b't') => self.literal("true", Json::Bool(true)),
            Some(b'f') => self.literal("false", Json::Bool(false)),
            Some(b'n') => self.literal("null", Json::Null),
            Some(b'-' | b'0'..=b'9') => self.number().map(Json::Number),
            _ => Err(JsonError::Malformed),
        }
    }

    fn array(&mut self, depth: usize) -> Result<Json<'a>, JsonError> {
        if depth > MAX_DEPTH {
            return Err(JsonError::Malformed);
        }
        self.pos += 1;
        self.skip_ws();
        let mut items = Vec::new();
        if self.peek() == Some(b']') {
            self.pos += 1;
            return Ok(Json::Array(items));
        }
        loop {
            items.push(self.value(depth)?);
            self.skip_ws();
            match self.peek() {
                Some(b',') => {
                    self.pos += 1;
                    self.skip_ws();
                }
                Some(b']') => {
                    self.pos += 1;
                    return Ok(Json::Array(items));
                }
                _ => return Err(JsonError::Malformed),
            }
        }
    }

    fn object(&mut self, depth: usize) -> Result<Json<'a>, JsonError> {
        if depth > MAX_DEPTH {
            return Err(JsonError::Malformed);
        }
        self.pos += 1;
        self.skip_ws();
        let mut members = Vec::new();
        if self.peek() == Some(b'}') {
            self.pos += 1;
            return Ok(Json::Object(members));
        }
        loop {
            if self.peek() != Some(b'"') {
                return Err(JsonError::Malformed);
            }
            let name = self.string()?;
            self.skip_ws();
            self.eat(b':')?;
            self.skip_ws();
            members.push((name, self.value(depth)?));
            self.skip_ws();
            match self.peek() {
                Some(b',') => {
                    self.pos += 1;
                    self.skip_ws();
                }
                Some(b'}') => {
                    self.pos += 1;
                    break;
                }
                _ => return Err(JsonError::Malformed),
            }
        }
        // Stable: of two equal names the first stays first, and the pair is adjacent.
        members.sort_by(|a, b| a.0.cmp(&b.0));
        if members.windows(2).any(|w| w[0].0 == w[1].0) {
            return Err(JsonError::DuplicateMember);
        }
        Ok(Json::Object(members))
    }

    /// `-?(0|[1-9][0-9]*)(\.[0-9]+)?([eE][+-]?[0-9]+)?`, returned as written.
    fn number(&mut self) -> Result<&'a str, JsonError> {
        let start = self.pos;
        if self.peek() == Some(b'-') {
            self.pos += 1;
        }
        match self.peek() {
            Some(b'0') => self.pos += 1,
            Some(b'1'..=b'9') => self.digits(),
            _ => return Err(JsonError::Malformed),
        }
        if self.peek() == Some(b'.') {
            self.pos += 1;
            self.some_digits()?;
        }
        if matches!(self.peek(), Some(b'e' | b'E')) {
            self.pos += 1;
            if matches!(self.peek(), Some(b'+' | b'-')) {
                self.pos += 1;
            }
            self.some_digits()?;
        }
        Ok(&self.text[start..self.pos])
    }

    fn digits(&mut self) {
        while matches!(self.peek(), Some(b'0'..=b'9')) {
            self.pos += 1;
        }
    }

    fn some_digits(&mut self) -> Result<(), JsonError> {
        let start = self.pos;
        self.digits();
        if self.pos == start {
            return Err(JsonError::Malformed);
        }
        Ok(())
    }

    /// A string at `"`, decoded; borrowed when it has no escapes.
    fn string(&mut self) -> Result<Cow<'a, str>, JsonError> {
        self.pos += 1;
        let start = self.pos;
        let mut owned: Option<String> = None;
        let mut chunk = start;
        loop {
            match self.peek() {
                Some(b'"') => {
                    let tail = &self.text[chunk..self.pos];
                    self.pos += 1;
                    return Ok(match owned {
                        None => Cow::Borrowed(tail),
                        Some(mut s) => {
                            s.push_str(tail);
                            Cow::Owned(s)
                        }
                    });
                }
                Some(b'\\') => {
                    let s = owned.get_or_insert_with(String::new);
                    s.push_str(&self.text[chunk..self.pos]);
                    self.pos += 1;
                    let c = self.escape()?;
                    s.push(c);
                    chunk = self.pos;
                }
                // Raw control characters are not allowed in a JSON string.
                Some(0..=0x1f) | None => return Err(JsonError::Malformed),
                Some(_) => self.pos += 1,
            }
        }
    }

    /// The character of the escape after a `\`.
    fn escape(&mut self) -> Result<char, JsonError> {
        let b = self.peek().ok_or(JsonError::Malformed)?;
        self.pos += 1;
        let c = match b {
            b'"' => '"',
            b'\\' => '\\',
            b'/' => '/',
            b'b' => '\u{8}',
            b'f' => '\u{c}',
            b'n' => '\n',
            b'r' => '\r',
            b't' => '\t',
            b'u' => return self.unicode_escape(),
            _ => return Err(JsonError::Malformed),
        };
        Ok(c)
    }

    /// `\uXXXX`, or a surrogate pair as two of them; a lone surrogate is no character.
    fn unicode_escape(&mut self) -> Result<char, JsonError> {
        let first = self.hex4()?;
        let code = match first {
            0xd800..=0xdbff => {
                if !self.bytes[self.pos..].starts_with(b"\\u") {
                    return Err(JsonError::Malformed);
                }
                self.pos += 2;
                let low = self.hex4()?;
                if !(0xdc00..=0xdfff).contains(&low) {
                    return Err(JsonError::Malformed);
                }
                0x10000 + ((first - 0xd800) << 10) + (low - 0xdc00)
            }
            0xdc00..=0xdfff => return Err(JsonError::Malformed),
            _ => first,
        };
        char::from_u32(code).ok_or(JsonError::Malformed)
    }

    fn hex4(&mut self) -> Result<u32, JsonError> {
        let digits = self
            .bytes
            .get(self.pos..self.pos + 4)
            .ok_or(JsonError::Malformed)?;
        let mut v = 0u32;
        for &d in digits {
            let n = char::from(d).to_digit(16).ok_or(JsonError::Malformed)?;
            v = v << 4 | n;
        }
        self.pos += 4;
        Ok(v)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn canon(text: &str) -> Result<String, JsonError> {
        parse(text).map(|j| j.to_canonical())
    }

    #[test]
    fn canonical_text_sorts_members_and_drops_white_space() {
        assert_eq!(
            canon(" {\"b\" : [1, {\"d\":null,\"c\":true}] ,\n\"a\":\"x\"}\t").unwrap(),
            r#"{"a":"x","b":[1,{"c":true,"d":null}]}"#
        );
        assert_eq!(canon("[]").unwrap(), "[]");
        assert_eq!(canon("{}").unwrap(), "{}");
    }

    #[test]
    fn numbers_keep_their_text() {
        for n in [
            "0.10",
            "0.1",
            "1e2",
            "1E2",
            "1e+2",
            "100",
            "100.0",
            "-0",
            "9007199254740993",
            "9007199254740992",
            "123456789012345678901234567890",
            "1e999",
        ] {
            assert_eq!(canon(n).unwrap(), n);
            assert_eq!(
                canon(&format!("{{\"x\":[{n}]}}")).unwrap(),
                format!("{{\"x\":[{n}]}}")
            );
        }
        for bad in [
            "01", "-", "1.", ".1", "1e", "1e+", "+1", "0x1", "1.e2", "--1", "NaN",
        ] {
            assert_eq!(canon(bad), Err(JsonError::Malformed), "{bad}");
        }
    }

    #[test]
    fn strings_decode_and_print_as_serde_json_does() {
        let text = r#""a\"\\\/\b\f\n\r\t\u0001\u00e9\ud83d\ude00 é\u007f""#;
        let ours = canon(text).unwrap();
        let serde: String = serde_json::from_str(text).unwrap();
        assert_eq!(ours, serde_json::to_string(&serde).unwrap());
        assert_eq!(canon(r#""\u0041""#).unwrap(), canon(r#""A""#).unwrap());
        for bad in [
            "\"a",
            "\"\\x\"",
            "\"\\u12\"",
            "\"\\ud800\"",
            "\"\\ud800\\u0041\"",
            "\"\\udc00\"",
            "\"\u{1}\"",
            "\"a\nb\"",
        ] {
            assert_eq!(canon(bad), Err(JsonError::Malformed), "{bad:?}");
        }
    }

    #[test]
    fn duplicate_members_are_refused_at_any_depth() {
        assert_eq!(canon(r#"{"a":1,"a":1}"#), Err(JsonError::DuplicateMember));
        assert_eq!(
            canon(r#"{"a":1,"\u0061":2}"#),
            Err(JsonError::DuplicateMember)
        );
        assert_eq!(
            canon(r#"{"x":[{"b":1,"c":2,"b":3}]}"#),
            Err(JsonError::DuplicateMember)
        );
        assert_eq!(canon(r#"{"a":{"a":1}}"#).unwrap(), r#"{"a":{"a":1}}"#);
    }

    #[test]
    fn not_json_is_malformed() {
        for bad in [
            "",
            " ",
            "{",
            "}",
            "[1,]",
            "{\"a\":1,}",
            "{\"a\"}",
            "{a:1}",
            "tru",
            "nul",
            "[1 2]",
            "{} {}",
            "\u{feff}{}",
            "'a'",
            "{\"a\":1\u{c}}",
        ] {
            assert_eq!(canon(bad), Err(JsonError::Malformed), "{bad:?}");
        }
        let deep = format!("{}{}", "[".repeat(MAX_DEPTH), "]".repeat(MAX_DEPTH));
        assert!(canon(&deep).is_ok());
        let deeper = format!("{}{}", "[".repeat(MAX_DEPTH + 1), "]".repeat(MAX_DEPTH + 1));
        assert_eq!(canon(&deeper), Err(JsonError::Malformed));
        let hostile = "{\"a\":".repeat(1_000_000);
        assert_eq!(canon(&hostile), Err(JsonError::Malformed));
    }
}
