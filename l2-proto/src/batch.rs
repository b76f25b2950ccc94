//! The batch verbs of entity mode: `POST /v1/mget` (the values of several keys in one call) and
//! `PUT /v1/mstore` (several values in one call). One `_entities` request asks every entity it
//! did not find in its own Envoy in one call, which the service answers with one Redis round trip
//! (per Cluster master), however many entities the batch holds.
//!
//! No leases: entities are not coalesced through the L2 (a batch that misses fetches its own
//! misses from its subgraph), so these verbs only read and write values, under the same names and
//! with the same format-version byte as `lookup` and `store`.
//!
//! Layouts (little-endian; a key is the 32 bytes of its L2 name, whose hex is the `key` of the
//! single-key verbs):
//! - mget request: version `1`, count (u16, 1..=[`MAX_BATCH_KEYS`]), then each key;
//! - mget answer: version `1`, count (u16, the request's), then per key in the request's order
//!   `0` (absent) or `1`, the value's length (u32, at least 1) and the value;
//! - mstore request: version `1`, count (u16, 1..=[`MAX_BATCH_KEYS`]), then per item its key,
//!   its TTL in ms (u64, [`MIN_TTL_MS`]..=[`MAX_TTL_MS`]), the value's length (u32, at least 1)
//!   and the value.
//!
//! Both sides decode strictly: any other version, count, tag, length, TTL, a trailing byte or a
//! body over its limit is a [`DecodeError`].

use crate::error::DecodeError;
use crate::limits::{MAX_TTL_MS, MIN_TTL_MS};

const VERSION: u8 = 1;
/// Version and count.
const HEADER: usize = 1 + 2;
/// Bytes of a key: a 32-byte L2 name.
pub const KEY_BYTES: usize = 32;
/// Most keys one mget asks, or items one mstore carries: a gateway's batch of distinct entities
/// rarely holds more; the filter asks for the first ones of a larger batch only.
pub const MAX_BATCH_KEYS: usize = 512;
/// Largest mget answer the service sends (it answers the values past it as absent), and the
/// largest one a reader takes.
pub const MAX_MGET_ANSWER_BYTES: usize = 8 << 20;
/// Largest mstore body the service takes (a sender splits a larger batch: [`MstoreItem::encode_all`]).
pub const MAX_MSTORE_BYTES: usize = 8 << 20;
/// The most an mget request can weigh.
pub const MAX_MGET_REQUEST_BYTES: usize = HEADER + MAX_BATCH_KEYS * KEY_BYTES;
const ABSENT: u8 = 0;
const PRESENT: u8 = 1;
/// An mstore item without its value: key, TTL, length.
const ITEM_HEAD: usize = KEY_BYTES + 8 + 4;
/// An answered value without its bytes: tag, length.
const VALUE_HEAD: usize = 1 + 4;

/// A key's L2 name, as the batch verbs carry it.
pub type Key = [u8; KEY_BYTES];

fn header(count: usize) -> Option<Vec<u8>> {
    let n = u16::try_from(count)
        .ok()
        .filter(|n| (1..=MAX_BATCH_KEYS).contains(&usize::from(*n)))?;
    let mut out = vec![VERSION];
    out.extend_from_slice(&n.to_le_bytes());
    Some(out)
}

/// Reads the version and count; the rest of the body.
fn read_header<'a>(bytes: &'a [u8], what: &'static str) -> Result<(usize, &'a [u8]), DecodeError> {
    let (&version, rest) = bytes.split_first().ok_or(DecodeError::Malformed(what))?;
    if version != VERSION {
        return Err(DecodeError::Version(version));
    }
    let (count, rest) = take::<2>(rest).ok_or(DecodeError::Malformed(what))?;
    Ok((usize::from(u16::from_le_bytes(count)), rest))
}

fn take<const N: usize>(bytes: &[u8]) -> Option<([u8; N], &[u8])> {
    let (head, rest) = bytes.split_first_chunk::<N>()?;
    Some((*head, rest))
}

/// A length-prefixed value (u32, at least 1 byte); the rest.
fn value<'a>(bytes: &'a [u8], what: &'static str) -> Result<(&'a [u8], &'a [u8]), DecodeError> {
    let (len, rest) = take::<4>(bytes).ok_or(DecodeError::Malformed(what))?;
    let len = usize::try_from(u32::from_le_bytes(len)).map_err(|_| DecodeError::Malformed(what))?;
    if len == 0 || len > rest.len() {
        return Err(DecodeError::Malformed(what));
    }
    Ok(rest.split_at(len))
}

fn push_value(out: &mut Vec<u8>, value: &[u8]) -> Option<()> {
    out.extend_from_slice(&u32::try_from(value.len()).ok()?.to_le_bytes());
    out.extend_from_slice(value);
    Some(())
}

/// The body of `POST /v1/mget` for `keys`; `None` for none, or more than [`MAX_BATCH_KEYS`].
pub fn encode_mget(keys: &[Key]) -> Option<Vec<u8>> {
    let mut out = header(keys.len())?;
    for k in keys {
        out.extend_from_slice(k);
    }
    Some(out)
}

/// The keys of a `POST /v1/mget` body.
pub fn decode_mget(bytes: &[u8]) -> Result<Vec<Key>, DecodeError> {
    if bytes.len() > MAX_MGET_REQUEST_BYTES {
        return Err(DecodeError::TooLarge {
            limit: MAX_MGET_REQUEST_BYTES,
        });
    }
    let (count, rest) = read_header(bytes, "mget header")?;
    if count == 0 || count > MAX_BATCH_KEYS || rest.len() != count * KEY_BYTES {
        return Err(DecodeError::Malformed("mget key count"));
    }
    Ok(rest
        .chunks_exact(KEY_BYTES)
        .filter_map(|c| Key::try_from(c).ok())
        .collect())
}

/// An mget answer for `values` (in the request's order; `None`: absent). A value that would take
/// the answer past [`MAX_MGET_ANSWER_BYTES`], or an empty one, is answered absent.
pub fn encode_mget_answer(values: &[Option<&[u8]>]) -> Option<Vec<u8>> {
    let mut out = header(values.len())?;
    for v in values {
        let fits = |v: &&[u8]| {
            !v.is_empty()
                && out.len() + VALUE_HEAD + v.len() + values.len() <= MAX_MGET_ANSWER_BYTES
        };
        match v.filter(fits) {
            Some(v) => {
                out.push(PRESENT);
                push_value(&mut out, v)?;
            }
            None => out.push(ABSENT),
        }
    }
    Some(out)
}

/// An mget answer to a request of `asked` keys: per key, its value or `None`.
pub fn decode_mget_answer(bytes: &[u8], asked: usize) -> Result<Vec<Option<&[u8]>>, DecodeError> {
    if bytes.len() > MAX_MGET_ANSWER_BYTES {
        return Err(DecodeError::TooLarge {
            limit: MAX_MGET_ANSWER_BYTES,
        });
    }
    let (count, mut rest) = read_header(bytes, "mget answer header")?;
    if count != asked || count == 0 {
        return Err(DecodeError::Malformed("mget answer count"));
    }
    let mut values = Vec::with_capacity(count);
    for _ in 0..count {
        let (&tag, after) = rest
            .split_first()
            .ok_or(DecodeError::Malformed("mget answer value"))?;
        rest = after;
        match tag {
            ABSENT => values.push(None),
            PRESENT => {
                let (v, after) = value(rest, "mget answer value")?;
                values.push(Some(v));
                rest = after;
            }
            _ => return Err(DecodeError::Malformed("mget answer tag")),
        }
    }
    if !rest.is_empty() {
        return Err(DecodeError::Malformed("mget answer length"));
    }
    Ok(values)
}

/// One value of `PUT /v1/mstore`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct MstoreItem<'a> {
    pub key: Key,
    pub ttl_ms: u64,
    pub value: &'a [u8],
}

impl MstoreItem<'_> {
    /// The bodies of `PUT /v1/mstore` carrying `items` (TTLs clamped into what the service takes):
    /// as few as the limits allow, each within [`MAX_BATCH_KEYS`] and [`MAX_MSTORE_BYTES`]. An
    /// item that fits no body alone, or is empty, is left out.
    pub fn encode_all(items: &[MstoreItem<'_>]) -> Vec<Vec<u8>> {
        let mut bodies = Vec::new();
        let mut chunk: Vec<&MstoreItem<'_>> = Vec::new();
        let mut size = HEADER;
        for item in items {
            let weight = ITEM_HEAD + item.value.len();
            if item.value.is_empty() || HEADER + weight > MAX_MSTORE_BYTES {
                continue;
            }
            if chunk.len() == MAX_BATCH_KEYS || size + weight > MAX_MSTORE_BYTES {
                bodies.extend(encode_chunk(&chunk));
                chunk.clear();
                size = HEADER;
            }
            chunk.push(item);
            size += weight;
        }
        bodies.extend(encode_chunk(&chunk));
        bodies
    }
}

fn encode_chunk(items: &[&MstoreItem<'_>]) -> Option<Vec<u8>> {
    let mut out = header(items.len())?;
    for item in items {
        out.extend_from_slice(&item.key);
        let ttl = item.ttl_ms.clamp(MIN_TTL_MS, MAX_TTL_MS);
        out.extend_from_slice(&ttl.to_le_bytes());
        push_value(&mut out, item.value)?;
    }
    Some(out)
}

/// The items of a `PUT /v1/mstore` body.
pub fn decode_mstore(bytes: &[u8]) -> Result<Vec<MstoreItem<'_>>, DecodeError> {
    if bytes.len() > MAX_MSTORE_BYTES {
        return Err(DecodeError::TooLarge {
            limit: MAX_MSTORE_BYTES,
        });
    }
    let (count, mut rest) = read_header(bytes, "mstore header")?;
    if count == 0 || count > MAX_BATCH_KEYS {
        return Err(DecodeError::Malformed("mstore item count"));
    }
    let mut items = Vec::with_capacity(count);
    for _ in 0..count {
        let (key, after) = take::<KEY_BYTES>(rest).ok_or(DecodeError::Malformed("mstore key"))?;
        let (ttl, after) = take::<8>(after).ok_or(DecodeError::Malformed("mstore ttl"))?;
        let ttl_ms = u64::from_le_bytes(ttl);
        if !(MIN_TTL_MS..=MAX_TTL_MS).contains(&ttl_ms) {
            return Err(DecodeError::Malformed("mstore ttl"));
        }
        let (value, after) = value(after, "mstore value")?;
        items.push(MstoreItem { key, ttl_ms, value });
        rest = after;
    }
    if !rest.is_empty() {
        return Err(DecodeError::Malformed("mstore length"));
    }
    Ok(items)
}

/// A key's name as the single-key verbs carry it: 64 lower-case hex characters.
pub fn hex(key: &Key) -> String {
    key.iter().map(|b| format!("{b:02x}")).collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn k(n: u8) -> Key {
        [n; KEY_BYTES]
    }

    #[test]
    fn mget_requests_round_trip_and_are_bounded() {
        let keys = vec![k(1), k(2), k(3)];
        let body = encode_mget(&keys).unwrap();
        assert_eq!(body.len(), HEADER + 3 * KEY_BYTES);
        assert_eq!(decode_mget(&body).unwrap(), keys);
        assert!(encode_mget(&[]).is_none());
        assert!(encode_mget(&vec![k(0); MAX_BATCH_KEYS + 1]).is_none());
        let full = encode_mget(&vec![k(0); MAX_BATCH_KEYS]).unwrap();
        assert_eq!(full.len(), MAX_MGET_REQUEST_BYTES);
        assert_eq!(decode_mget(&full).unwrap().len(), MAX_BATCH_KEYS);
    }

    #[test]
    fn malformed_mget_requests_are_refused() {
        let good = encode_mget(&[k(1), k(2)]).unwrap();
        let mut bad_version = good.clone();
        bad_version[0] = 2;
        assert_eq!(decode_mget(&bad_version), Err(DecodeError::Version(2)));
        let bad = DecodeError::Malformed("mget key count");
        assert_eq!(decode_mget(&good[..good.len() - 1]), Err(bad));
        let mut longer = good.clone();
        longer.push(0);
        assert_eq!(decode_mget(&longer), Err(bad));
        let mut count_wrong = good.clone();
        count_wrong[1] = 3;
        assert_eq!(decode_mget(&count_wrong), Err(bad));
        assert_eq!(decode_mget(&[VERSION, 0, 0]), Err(bad), "no key");
        assert_eq!(decode_mget(&[]), Err(DecodeError::Malformed("mget header")));
        assert_eq!(
            decode_mget(&[VERSION, 1]),
            Err(DecodeError::Malformed("mget header"))
        );
        let mut over = vec![VERSION, 0x01, 0x02];
        over.extend(std::iter::repeat_n(0, 0x0201 * KEY_BYTES));
        assert!(matches!(
            decode_mget(&over),
            Err(DecodeError::TooLarge { .. })
        ));
    }

    #[test]
    fn mget_answers_round_trip() {
        let values: Vec<Option<&[u8]>> = vec![Some(b"one"), None, Some(b"three")];
        let body = encode_mget_answer(&values).unwrap();
        assert_eq!(decode_mget_answer(&body, 3).unwrap(), values);
        assert_eq!(
            decode_mget_answer(&body, 2),
            Err(DecodeError::Malformed("mget answer count")),
            "an answer to another request"
        );
        let empty: Vec<Option<&[u8]>> = vec![Some(b""), None];
        let body = encode_mget_answer(&empty).unwrap();
        assert_eq!(decode_mget_answer(&body, 2).unwrap(), vec![None, None]);
    }

    #[test]
    fn mget_answers_stay_within_their_limit() {
        let big = vec![7u8; MAX_MGET_ANSWER_BYTES / 2];
        let values: Vec<Option<&[u8]>> = vec![Some(&big), Some(&big), Some(b"small")];
        let body = encode_mget_answer(&values).unwrap();
        assert!(body.len() <= MAX_MGET_ANSWER_BYTES);
        let read = decode_mget_answer(&body, 3).unwrap();
        assert_eq!(read[0], Some(&big[..]));
        assert_eq!(read[1], None, "past the limit: absent");
        assert_eq!(read[2], Some(&b"small"[..]));
    }

    #[test]
    fn malformed_mget_answers_are_refused() {
        let body = encode_mget_answer(&[Some(b"abc"), None]).unwrap();
        let mut tag = body.clone();
        tag[3] = 2;
        assert_eq!(
            decode_mget_answer(&tag, 2),
            Err(DecodeError::Malformed("mget answer tag"))
        );
        let value = DecodeError::Malformed("mget answer value");
        assert_eq!(decode_mget_answer(&body[..body.len() - 1], 2), Err(value));
        let mut long = body.clone();
        long[4] = 200;
        assert_eq!(
            decode_mget_answer(&long, 2),
            Err(value),
            "length past the end"
        );
        let mut zero = body.clone();
        zero[4] = 0;
        assert_eq!(decode_mget_answer(&zero, 2), Err(value), "an empty value");
        let mut trailing = body.clone();
        trailing.push(0);
        assert_eq!(
            decode_mget_answer(&trailing, 2),
            Err(DecodeError::Malformed("mget answer length"))
        );
        let mut version = body;
        version[0] = 9;
        assert_eq!(
            decode_mget_answer(&version, 2),
            Err(DecodeError::Version(9))
        );
        let huge = vec![0u8; MAX_MGET_ANSWER_BYTES + 1];
        assert!(matches!(
            decode_mget_answer(&huge, 1),
            Err(DecodeError::TooLarge { .. })
        ));
    }

    #[test]
    fn mstore_bodies_round_trip() {
        let items = vec![
            MstoreItem {
                key: k(1),
                ttl_ms: 5_000,
                value: b"one",
            },
            MstoreItem {
                key: k(2),
                ttl_ms: 0,
                value: b"two",
            },
            MstoreItem {
                key: k(3),
                ttl_ms: 9,
                value: b"",
            },
        ];
        let bodies = MstoreItem::encode_all(&items);
        assert_eq!(bodies.len(), 1, "one call");
        let read = decode_mstore(&bodies[0]).unwrap();
        assert_eq!(read.len(), 2, "the empty value is left out");
        assert_eq!(read[0], items[0]);
        assert_eq!(read[1].ttl_ms, MIN_TTL_MS, "clamped");
        assert!(MstoreItem::encode_all(&[]).is_empty());
    }

    #[test]
    fn mstore_bodies_are_split_within_the_limits() {
        let value = vec![1u8; 10];
        let many: Vec<MstoreItem<'_>> = (0..MAX_BATCH_KEYS + 3)
            .map(|i| MstoreItem {
                key: k(i as u8),
                ttl_ms: 1_000,
                value: &value,
            })
            .collect();
        let bodies = MstoreItem::encode_all(&many);
        let counts: Vec<usize> = bodies
            .iter()
            .map(|b| decode_mstore(b).unwrap().len())
            .collect();
        assert_eq!(counts, vec![MAX_BATCH_KEYS, 3]);
        let big = vec![2u8; MAX_MSTORE_BYTES / 2];
        let heavy: Vec<MstoreItem<'_>> = (0..3)
            .map(|i| MstoreItem {
                key: k(i),
                ttl_ms: 1_000,
                value: &big,
            })
            .collect();
        let bodies = MstoreItem::encode_all(&heavy);
        assert_eq!(bodies.len(), 3);
        assert!(bodies.iter().all(|b| b.len() <= MAX_MSTORE_BYTES));
        let too_big = vec![3u8; MAX_MSTORE_BYTES];
        let alone = [MstoreItem {
            key: k(9),
            ttl_ms: 1_000,
            value: &too_big,
        }];
        assert!(MstoreItem::encode_all(&alone).is_empty());
    }

    #[test]
    fn malformed_mstore_bodies_are_refused() {
        let item = MstoreItem {
            key: k(1),
            ttl_ms: 5_000,
            value: b"one",
        };
        let body = MstoreItem::encode_all(&[item]).remove(0);
        assert_eq!(
            decode_mstore(&body[..body.len() - 1]),
            Err(DecodeError::Malformed("mstore value"))
        );
        let mut trailing = body.clone();
        trailing.push(0);
        assert_eq!(
            decode_mstore(&trailing),
            Err(DecodeError::Malformed("mstore length"))
        );
        let ttl_at = HEADER + KEY_BYTES;
        let mut no_ttl = body.clone();
        no_ttl[ttl_at..ttl_at + 8].copy_from_slice(&0u64.to_le_bytes());
        assert_eq!(
            decode_mstore(&no_ttl),
            Err(DecodeError::Malformed("mstore ttl"))
        );
        let mut forever = body.clone();
        forever[ttl_at..ttl_at + 8].copy_from_slice(&(MAX_TTL_MS + 1).to_le_bytes());
        assert_eq!(
            decode_mstore(&forever),
            Err(DecodeError::Malformed("mstore ttl"))
        );
        let mut count = body.clone();
        count[1] = 2;
        assert_eq!(
            decode_mstore(&count),
            Err(DecodeError::Malformed("mstore key"))
        );
        assert_eq!(
            decode_mstore(&[VERSION, 0, 0]),
            Err(DecodeError::Malformed("mstore item count"))
        );
        let mut version = body;
        version[0] = 0;
        assert_eq!(decode_mstore(&version), Err(DecodeError::Version(0)));
    }

    #[test]
    fn keys_are_named_as_the_single_key_verbs_name_them() {
        let name = hex(&k(0xab));
        assert_eq!(name, "ab".repeat(32));
        assert!(crate::limits::valid_key(&name));
    }
}
