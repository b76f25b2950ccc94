//! The bounds of the contract: the service refuses (or clamps) what is outside them, and the
//! filter never sends it. Values that come back from the service and go into a path again (a
//! cursor, a generation) are checked here by both sides with the same rule.

/// Shortest TTL a store may ask for (`ttl_ms`): 0 would be refused.
pub const MIN_TTL_MS: u64 = 1;
/// Longest TTL a store may ask for (`ttl_ms`): a year.
pub const MAX_TTL_MS: u64 = 365 * 86_400_000;
/// Shortest lease a lookup may ask for (`lease_ms`).
pub const MIN_LEASE_MS: u64 = 1;
/// Longest lease any service grants: the highest `--max-lease-ms` it takes (a day; above it even
/// the cap is a mistake). A longer `lease_ms` is clamped by the service, so the filter never asks.
pub const MAX_LEASE_MS: u64 = 86_400_000;
/// Longest `owner` (any text: the node, worker or request that leads).
pub const MAX_OWNER_BYTES: usize = 256;
/// A key's name in the L2: this many lower-case hex characters (32 bytes).
pub const KEY_HEX_LEN: usize = 64;
/// Largest body of `POST /v1/purge` (a sealed purge record); larger is 413.
pub const MAX_PURGE_BYTES: usize = 64 * 1024;
/// Most entries one `GET /v1/purges` answers: fewer means the reader is at the end of the log.
pub const PURGES_PER_ANSWER: usize = 100;
/// Longest generation id a reader may send back (the service makes 16 hex characters).
pub const MAX_GEN_BYTES: usize = 64;
/// Most digits of each part of a stream id (`MS-SEQ`): a u64's.
const STREAM_ID_DIGITS: usize = 20;
/// Largest `GET /v1/purges` answer a reader takes: a full page of the largest records, in
/// base64, with room to spare.
pub const MAX_PURGES_ANSWER_BYTES: usize = 10 << 20;
/// Shortest bearer secret either side accepts.
pub const MIN_SECRET_BYTES: usize = 16;

/// A full page: each entry's base64 data, its id and the JSON around it; the page's fields.
const FULL_PAGE_BYTES: usize = PURGES_PER_ANSWER
    * (MAX_PURGE_BYTES.div_ceil(3) * 4 + 2 * STREAM_ID_DIGITS + 32)
    + MAX_GEN_BYTES
    + 2 * STREAM_ID_DIGITS
    + 64;
const _: () = assert!(FULL_PAGE_BYTES <= MAX_PURGES_ANSWER_BYTES);

/// A key's name: exactly [`KEY_HEX_LEN`] lower-case hex characters.
pub fn valid_key(key: &str) -> bool {
    key.len() == KEY_HEX_LEN
        && key
            .bytes()
            .all(|b| b.is_ascii_digit() || (b'a'..=b'f').contains(&b))
}

/// An owner: 1..=[`MAX_OWNER_BYTES`] bytes.
pub fn valid_owner(owner: &str) -> bool {
    !owner.is_empty() && owner.len() <= MAX_OWNER_BYTES
}

/// A purge log cursor: a stream id (`MS-SEQ` or `MS`), `0` (from the start) or `$` (the end). It
/// goes back into a path, so nothing else is taken from the service either.
pub fn valid_cursor(cursor: &str) -> bool {
    let digits = |s: &str| {
        !s.is_empty() && s.len() <= STREAM_ID_DIGITS && s.bytes().all(|b| b.is_ascii_digit())
    };
    if cursor == "$" {
        return true;
    }
    match cursor.split_once('-') {
        Some((ms, seq)) => digits(ms) && digits(seq),
        None => digits(cursor),
    }
}

/// A purge log generation: 1..=[`MAX_GEN_BYTES`] letters and digits (it goes back into a path).
pub fn valid_generation(generation: &str) -> bool {
    !generation.is_empty()
        && generation.len() <= MAX_GEN_BYTES
        && generation.bytes().all(|b| b.is_ascii_alphanumeric())
}

/// A bearer secret's bytes: printable ASCII without spaces, so that it fits a header value as it
/// is (its length is checked against [`MIN_SECRET_BYTES`] apart, for a message of its own).
pub fn printable_secret(secret: &[u8]) -> bool {
    secret.iter().all(u8::is_ascii_graphic)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn keys_and_owners() {
        assert!(valid_key(&"0f".repeat(32)));
        assert!(!valid_key(&"0F".repeat(32)), "lower case only");
        assert!(!valid_key(&"0f".repeat(31)));
        assert!(!valid_key(&"0g".repeat(32)));
        assert!(!valid_key(""));
        assert!(valid_owner("a") && valid_owner(&"o".repeat(MAX_OWNER_BYTES)));
        assert!(!valid_owner("") && !valid_owner(&"o".repeat(MAX_OWNER_BYTES + 1)));
    }

    #[test]
    fn cursors_are_stream_ids() {
        for ok in ["0", "$", "1700000000000-0", "12", "1-2"] {
            assert!(valid_cursor(ok), "{ok}");
        }
        let longest = format!("{}-{}", u64::MAX, u64::MAX);
        assert!(valid_cursor(&longest));
        for bad in [
            "",
            "-",
            "1-",
            "-1",
            "a-1",
            "1-2-3",
            "1--2",
            "+",
            "(1",
            "0&x=1",
            "$$",
            &"1".repeat(21),
            &format!("1-{}", "2".repeat(21)),
        ] {
            assert!(!valid_cursor(bad), "{bad}");
        }
    }

    #[test]
    fn generations_are_letters_and_digits() {
        assert!(valid_generation("a1b2") && valid_generation(&"f".repeat(MAX_GEN_BYTES)));
        for bad in ["", "a&b", "not hex", "a-b", &"f".repeat(MAX_GEN_BYTES + 1)] {
            assert!(!valid_generation(bad), "{bad}");
        }
    }

    #[test]
    fn secrets_are_printable_without_spaces() {
        assert!(printable_secret(b"0123456789abcdef-!~"));
        for bad in [
            &b"0123456789 abcdef"[..],
            b"tab\there",
            b"\x7f",
            "é".as_bytes(),
        ] {
            assert!(!printable_secret(bad), "{bad:?}");
        }
    }
}
