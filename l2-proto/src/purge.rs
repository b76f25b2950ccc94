//! One Envoy's purge as the other Envoys read it from the fleet's purge log: the targets and the
//! moment they were purged (the purging Envoy's clock), so that every Envoy marks the same instant.
//! The service keeps these bytes without reading them (the filter seals them with the fleet key
//! first: `graphql-cache`'s `fleet::seal`); they are here because they are the format Envoys of
//! different builds exchange, bounded by what `POST /v1/purge` takes.
//!
//! Layout (little-endian): version `1`, `at_us` (u64), target count (u16), then each target as
//! one kind byte (`0` everything, `2` a tag; bit 0 set: soft) and its tag hash (u64; 0 for
//! everything).

use crate::error::DecodeError;
use crate::limits::MAX_PURGE_BYTES;

const VERSION: u8 = 1;
/// Version, time, target count.
const HEADER: usize = 1 + 8 + 2;
/// Kind and tag hash.
const TARGET_BYTES: usize = 1 + 8;
const KIND_ALL: u8 = 0;
const KIND_TAG: u8 = 2;
const SOFT: u8 = 1;
/// Room left in `POST /v1/purge`'s limit for what a sender wraps a record in: the filter seals
/// each record (36 bytes of magic and MAC), and a record that fits only unsealed would be refused
/// with 413 for ever, holding up every purge queued behind it.
pub const ENVELOPE_BYTES: usize = 64;
/// The most targets one record carries (a longer purge is split: [`records`]).
pub const MAX_TARGETS: usize = (MAX_PURGE_BYTES - ENVELOPE_BYTES - HEADER) / TARGET_BYTES;
/// The largest record.
const MAX_RECORD_BYTES: usize = HEADER + MAX_TARGETS * TARGET_BYTES;

/// What a purge applies to: a tag (by its hash), or everything. The filter's purge marks use this
/// same type, so what one Envoy purges is what the others apply.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Target {
    Tag(u64),
    All,
}

/// A purge: each target, soft (`true`) or hard, at `at_us` (µs since the Unix epoch).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PurgeRecord {
    pub at_us: u64,
    pub targets: Vec<(Target, bool)>,
}

impl PurgeRecord {
    /// `None` when there are more than [`MAX_TARGETS`] targets (the caller splits: [`records`]).
    pub fn encode(&self) -> Option<Vec<u8>> {
        let count = u16::try_from(self.targets.len()).ok()?;
        if self.targets.len() > MAX_TARGETS {
            return None;
        }
        let mut out = Vec::with_capacity(HEADER + TARGET_BYTES * self.targets.len());
        out.push(VERSION);
        out.extend_from_slice(&self.at_us.to_le_bytes());
        out.extend_from_slice(&count.to_le_bytes());
        for (target, soft) in &self.targets {
            let (kind, hash) = match target {
                Target::All => (KIND_ALL, 0u64),
                Target::Tag(h) => (KIND_TAG, *h),
            };
            out.push(kind | if *soft { SOFT } else { 0 });
            out.extend_from_slice(&hash.to_le_bytes());
        }
        Some(out)
    }

    /// Exactly what [`PurgeRecord::encode`] writes; anything else is an error.
    pub fn decode(bytes: &[u8]) -> Result<PurgeRecord, DecodeError> {
        if bytes.len() > MAX_RECORD_BYTES {
            return Err(DecodeError::TooLarge {
                limit: MAX_RECORD_BYTES,
            });
        }
        let (&version, rest) = bytes
            .split_first()
            .ok_or(DecodeError::Malformed("purge record header"))?;
        if version != VERSION {
            return Err(DecodeError::Version(version));
        }
        let (at, rest) = split::<8>(rest).ok_or(DecodeError::Malformed("purge record header"))?;
        let (count, body) =
            split::<2>(rest).ok_or(DecodeError::Malformed("purge record header"))?;
        let count = usize::from(u16::from_le_bytes(count));
        if count > MAX_TARGETS || body.len() != count * TARGET_BYTES {
            return Err(DecodeError::Malformed("purge record target count"));
        }
        let targets = body
            .chunks_exact(TARGET_BYTES)
            .map(target)
            .collect::<Result<Vec<_>, _>>()?;
        Ok(PurgeRecord {
            at_us: u64::from_le_bytes(at),
            targets,
        })
    }
}

fn split<const N: usize>(bytes: &[u8]) -> Option<([u8; N], &[u8])> {
    let (head, rest) = bytes.split_first_chunk::<N>()?;
    Some((*head, rest))
}

/// One encoded target: everything has hash 0; no other kind exists.
fn target(bytes: &[u8]) -> Result<(Target, bool), DecodeError> {
    let (&kind, hash) = bytes
        .split_first()
        .ok_or(DecodeError::Malformed("purge target"))?;
    let (hash, _) = split::<8>(hash).ok_or(DecodeError::Malformed("purge target"))?;
    let hash = u64::from_le_bytes(hash);
    let target = match kind & !SOFT {
        KIND_ALL if hash == 0 => Target::All,
        KIND_TAG => Target::Tag(hash),
        _ => return Err(DecodeError::Malformed("purge target kind")),
    };
    Ok((target, kind & SOFT == SOFT))
}

/// A purge split into records of at most [`MAX_TARGETS`] targets each, encoded.
pub fn records(at_us: u64, targets: &[(Target, bool)]) -> Vec<Vec<u8>> {
    targets
        .chunks(MAX_TARGETS)
        .filter_map(|chunk| {
            PurgeRecord {
                at_us,
                targets: chunk.to_vec(),
            }
            .encode()
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn record() -> PurgeRecord {
        PurgeRecord {
            at_us: 1_764_582_000_123_456,
            targets: vec![
                (Target::All, true),
                (Target::Tag(7), false),
                (Target::Tag(u64::MAX), true),
            ],
        }
    }

    #[test]
    fn the_layout_is_the_one_written_down() {
        let bytes = PurgeRecord {
            at_us: 0x0102,
            targets: vec![(Target::All, false), (Target::Tag(5), true)],
        }
        .encode()
        .unwrap();
        assert_eq!(
            bytes,
            [
                &[1u8][..],
                &[2, 1, 0, 0, 0, 0, 0, 0],
                &[2, 0],
                &[0, 0, 0, 0, 0, 0, 0, 0, 0],
                &[3, 5, 0, 0, 0, 0, 0, 0, 0],
            ]
            .concat()
        );
    }

    #[test]
    fn a_record_decodes_to_itself_and_nothing_else_decodes() {
        let bytes = record().encode().unwrap();
        assert_eq!(PurgeRecord::decode(&bytes), Ok(record()));
        for cut in 0..bytes.len() {
            assert!(
                PurgeRecord::decode(&bytes[..cut]).is_err(),
                "truncated at {cut}"
            );
        }
        let mut longer = bytes.clone();
        longer.push(0);
        assert_eq!(
            PurgeRecord::decode(&longer),
            Err(DecodeError::Malformed("purge record target count"))
        );
        let mut other_version = bytes.clone();
        other_version[0] = 2;
        assert_eq!(
            PurgeRecord::decode(&other_version),
            Err(DecodeError::Version(2))
        );
        let mut bad_kind = bytes.clone();
        bad_kind[11] = 4;
        assert_eq!(
            PurgeRecord::decode(&bad_kind),
            Err(DecodeError::Malformed("purge target kind"))
        );
        let mut all_with_a_hash = bytes;
        all_with_a_hash[12] = 1;
        assert!(PurgeRecord::decode(&all_with_a_hash).is_err());
        assert!(PurgeRecord::decode(&[]).is_err());
    }

    #[test]
    fn oversize_records_are_neither_written_nor_read() {
        let full = PurgeRecord {
            at_us: 1,
            targets: vec![(Target::Tag(9), false); MAX_TARGETS],
        };
        let bytes = full.encode().unwrap();
        assert!(bytes.len() <= MAX_PURGE_BYTES);
        assert_eq!(PurgeRecord::decode(&bytes), Ok(full.clone()));
        let over = PurgeRecord {
            targets: vec![(Target::Tag(9), false); MAX_TARGETS + 1],
            ..full
        };
        assert_eq!(over.encode(), None);
        let mut claimed = bytes;
        claimed[9..11].copy_from_slice(&u16::MAX.to_le_bytes());
        assert!(PurgeRecord::decode(&claimed).is_err());
        claimed.resize(HEADER + usize::from(u16::MAX) * TARGET_BYTES, 0);
        assert_eq!(
            PurgeRecord::decode(&claimed),
            Err(DecodeError::TooLarge {
                limit: MAX_RECORD_BYTES
            })
        );
    }

    #[test]
    fn big_purges_are_split_into_records_the_service_takes() {
        let targets: Vec<(Target, bool)> = (0..MAX_TARGETS as u64 + 5)
            .map(|h| (Target::Tag(h + 1), false))
            .collect();
        let out = records(9, &targets);
        assert_eq!(out.len(), 2);
        assert!(out.iter().all(|r| r.len() <= MAX_PURGE_BYTES));
        let back: Vec<_> = out
            .iter()
            .flat_map(|r| PurgeRecord::decode(r).unwrap().targets)
            .collect();
        assert_eq!(back, targets);
        assert!(records(9, &[]).is_empty());
    }
}
