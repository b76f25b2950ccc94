//! The JSON answers of the purge log's two verbs.
//!
//! `POST /v1/purge`: `{"id":"1764582000123-0","gen":"9f86d081884c7d65"}` once the log holds the
//! record. `GET /v1/purges`: `{"gen":G,"last":ID,"gap":B,"entries":[{"id":ID,"data":BASE64}..]}`,
//! oldest first, at most [`PURGES_PER_ANSWER`](crate::limits::PURGES_PER_ANSWER) entries; `last`
//! is where the next read starts, `gap` says records may have been missed (the log was trimmed
//! past the cursor, lost, or begun again under a new `gen`).

use base64::Engine as _;
use serde::{Deserialize, Serialize};

use crate::error::DecodeError;
use crate::limits::{valid_cursor, valid_generation, MAX_PURGES_ANSWER_BYTES, MAX_PURGE_BYTES};

fn b64() -> base64::engine::GeneralPurpose {
    base64::engine::general_purpose::STANDARD
}

/// Serialising strings, bools and lists of them cannot fail (serde_json fails only on map keys
/// that are not strings, and on a `Serialize` impl that fails: there are none here).
fn to_json(value: &impl Serialize) -> String {
    serde_json::to_string(value).unwrap_or_default()
}

/// The answer of `POST /v1/purge`: where the log put the record.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct PurgeAdded {
    /// The record's stream id.
    pub id: String,
    /// The log's generation.
    #[serde(rename = "gen")]
    pub generation: String,
}

impl PurgeAdded {
    pub fn encode(&self) -> String {
        to_json(self)
    }

    /// Both fields checked as a reader would put them back in a path.
    pub fn decode(body: &[u8]) -> Result<PurgeAdded, DecodeError> {
        if body.len() > MAX_PURGES_ANSWER_BYTES {
            return Err(DecodeError::TooLarge {
                limit: MAX_PURGES_ANSWER_BYTES,
            });
        }
        let added: PurgeAdded =
            serde_json::from_slice(body).map_err(|_| DecodeError::Malformed("purge answer"))?;
        if !valid_cursor(&added.id) || added.id == "$" {
            return Err(DecodeError::Malformed("purge answer id"));
        }
        if !valid_generation(&added.generation) {
            return Err(DecodeError::Malformed("purge answer gen"));
        }
        Ok(added)
    }
}

/// One entry of the log: its stream id and the record as the log holds it (sealed by the
/// writing Envoy), in base64 on the wire.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct PurgeEntry {
    /// Readers do not need it; one without it is still read.
    #[serde(default)]
    pub id: String,
    data: String,
    /// The entry's place in the log's sequence (entries written by `POST /v1/marks`): a reader
    /// that sees a number skipped knows a record was lost from the middle of the log.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub n: Option<u64>,
}

impl PurgeEntry {
    pub fn new(id: impl Into<String>, data: &[u8]) -> PurgeEntry {
        PurgeEntry {
            id: id.into(),
            data: b64().encode(data),
            n: None,
        }
    }

    /// The entry numbered `n` in the log's sequence.
    pub fn numbered(id: impl Into<String>, data: &[u8], n: u64) -> PurgeEntry {
        PurgeEntry {
            n: Some(n),
            ..PurgeEntry::new(id, data)
        }
    }

    /// The entry's bytes. An entry that is not base64, or larger than a purge body can be, is an
    /// error of its own: the reader counts it as a missed record rather than refusing the page.
    pub fn data(&self) -> Result<Vec<u8>, DecodeError> {
        let limit = MAX_PURGE_BYTES.div_ceil(3) * 4;
        if self.data.len() > limit {
            return Err(DecodeError::TooLarge { limit });
        }
        b64()
            .decode(&self.data)
            .map_err(|_| DecodeError::Malformed("purge entry data"))
    }
}

/// The answer of `GET /v1/purges`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct PurgesAnswer {
    /// The log's generation: a new one means the log was lost and begun again. The service
    /// always sends it; a reader still takes an answer without it (`None`).
    #[serde(rename = "gen", default, skip_serializing_if = "Option::is_none")]
    pub generation: Option<String>,
    /// Where the next read starts.
    pub last: String,
    /// Records may have been missed.
    pub gap: bool,
    /// Oldest first.
    pub entries: Vec<PurgeEntry>,
    /// The log's sequence number now (answered to a reader that sent its own, `n`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub n: Option<u64>,
}

impl PurgesAnswer {
    pub fn encode(&self) -> String {
        to_json(self)
    }

    /// At most [`MAX_PURGES_ANSWER_BYTES`]; `last` and `gen` must be what a reader may put back
    /// in a path ([`valid_cursor`], [`valid_generation`]). Entries are checked one by one, when
    /// read ([`PurgeEntry::data`]).
    ///
    /// `#[inline]`: serde_json's parser is then instantiated in the caller's crate, beside its
    /// own uses, rather than a second copy of it here (13 KB of the filter's wasm).
    #[inline]
    pub fn decode(body: &[u8]) -> Result<PurgesAnswer, DecodeError> {
        if body.len() > MAX_PURGES_ANSWER_BYTES {
            return Err(DecodeError::TooLarge {
                limit: MAX_PURGES_ANSWER_BYTES,
            });
        }
        let answer: PurgesAnswer =
            serde_json::from_slice(body).map_err(|_| DecodeError::Malformed("purges answer"))?;
        if !valid_cursor(&answer.last) {
            return Err(DecodeError::Malformed("purges answer last"));
        }
        if answer
            .generation
            .as_deref()
            .is_some_and(|g| !valid_generation(g))
        {
            return Err(DecodeError::Malformed("purges answer gen"));
        }
        Ok(answer)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn answer() -> PurgesAnswer {
        PurgesAnswer {
            generation: Some("00112233aabbccdd".into()),
            last: "1764582000456-0".into(),
            gap: false,
            entries: vec![
                PurgeEntry::new("1764582000123-0", b"\x00\xffrecord"),
                PurgeEntry::new("1764582000456-0", b""),
            ],
            n: None,
        }
    }

    #[test]
    fn the_purges_answer_is_the_json_written_down() {
        assert_eq!(
            answer().encode(),
            r#"{"gen":"00112233aabbccdd","last":"1764582000456-0","gap":false,"entries":[{"id":"1764582000123-0","data":"AP9yZWNvcmQ="},{"id":"1764582000456-0","data":""}]}"#
        );
        let empty = PurgesAnswer {
            generation: Some("g".into()),
            last: "0".into(),
            gap: true,
            entries: Vec::new(),
            n: None,
        };
        assert_eq!(
            empty.encode(),
            r#"{"gen":"g","last":"0","gap":true,"entries":[]}"#
        );
    }

    #[test]
    fn purges_answers_round_trip() {
        let back = PurgesAnswer::decode(answer().encode().as_bytes()).unwrap();
        assert_eq!(back, answer());
        assert_eq!(back.entries[0].data().unwrap(), b"\x00\xffrecord");
        assert_eq!(back.entries[1].data().unwrap(), b"");
    }

    #[test]
    fn an_answer_without_gen_or_ids_is_still_read() {
        let old = PurgesAnswer::decode(br#"{"last":"5","gap":false,"entries":[{"data":"eA=="}]}"#)
            .unwrap();
        assert_eq!(old.generation, None);
        assert_eq!(old.entries[0].id, "");
        assert_eq!(old.entries[0].data().unwrap(), b"x");
    }

    #[test]
    fn malformed_purges_answers_are_refused() {
        for (body, why) in [
            (&b"not json"[..], "purges answer"),
            (br#"{"gap":false,"entries":[]}"#, "purges answer"),
            (br#"{"last":"0","entries":[]}"#, "purges answer"),
            (br#"{"last":"0","gap":false}"#, "purges answer"),
            (br#"{"last":"0","gap":"no","entries":[]}"#, "purges answer"),
            (
                br#"{"last":"0","gap":false,"entries":[{}]}"#,
                "purges answer",
            ),
            (
                br#"{"last":"0&x=1","gap":false,"entries":[]}"#,
                "purges answer last",
            ),
            (
                br#"{"gen":"a&b","last":"0","gap":false,"entries":[]}"#,
                "purges answer gen",
            ),
            (
                br#"{"gen":"","last":"0","gap":false,"entries":[]}"#,
                "purges answer gen",
            ),
        ] {
            assert_eq!(
                PurgesAnswer::decode(body),
                Err(DecodeError::Malformed(why)),
                "{}",
                String::from_utf8_lossy(body)
            );
        }
    }

    #[test]
    fn oversize_answers_and_entries_are_refused() {
        let mut huge = br#"{"last":"0","gap":false,"entries":[],"pad":""#.to_vec();
        huge.resize(MAX_PURGES_ANSWER_BYTES, b'x');
        huge.extend_from_slice(b"\"}");
        assert_eq!(
            PurgesAnswer::decode(&huge),
            Err(DecodeError::TooLarge {
                limit: MAX_PURGES_ANSWER_BYTES
            })
        );
        let biggest = PurgeEntry::new("1-0", &vec![7; MAX_PURGE_BYTES]);
        assert_eq!(biggest.data().unwrap().len(), MAX_PURGE_BYTES);
        let over = PurgeEntry::new("1-0", &vec![7; MAX_PURGE_BYTES + 3]);
        assert!(matches!(over.data(), Err(DecodeError::TooLarge { .. })));
        let page = br#"{"last":"0","gap":false,"entries":[{"id":"1-0","data":"!!"}]}"#;
        let read = PurgesAnswer::decode(page).unwrap();
        assert_eq!(
            read.entries[0].data(),
            Err(DecodeError::Malformed("purge entry data")),
            "a bad entry is the reader's to count, not a bad page"
        );
    }

    #[test]
    fn a_full_page_of_the_largest_records_fits() {
        let entry = PurgeEntry::numbered(
            format!("{}-{}", u64::MAX, u64::MAX),
            &[0xff; MAX_PURGE_BYTES],
            u64::MAX,
        );
        let full = PurgesAnswer {
            generation: Some("f".repeat(crate::limits::MAX_GEN_BYTES)),
            last: format!("{}-{}", u64::MAX, u64::MAX),
            gap: true,
            entries: vec![entry; crate::limits::PURGES_PER_ANSWER],
            n: Some(u64::MAX),
        };
        let body = full.encode();
        assert!(body.len() <= MAX_PURGES_ANSWER_BYTES);
        assert_eq!(PurgesAnswer::decode(body.as_bytes()), Ok(full));
    }

    #[test]
    fn purge_added_round_trips_and_is_checked() {
        let added = PurgeAdded {
            id: "1764582000123-0".into(),
            generation: "9f86d081884c7d65".into(),
        };
        assert_eq!(
            added.encode(),
            r#"{"id":"1764582000123-0","gen":"9f86d081884c7d65"}"#
        );
        assert_eq!(PurgeAdded::decode(added.encode().as_bytes()), Ok(added));
        for bad in [
            &br#"{"id":"$","gen":"a"}"#[..],
            br#"{"id":"1-0","gen":"a b"}"#,
            br#"{"id":"1-0"}"#,
            b"[]",
        ] {
            assert!(PurgeAdded::decode(bad).is_err(), "{bad:?}");
        }
    }
}
