//! The stored response and its byte encoding in Envoy's shared data.
//!
//! Shared data outlives VM reloads and is shared by every filter build with the same `vm_id`, so
//! every record starts with a magic and a format version: anything else decodes as a miss.

/// Bumped whenever the layout changes.
pub const FORMAT_VERSION: u8 = 3;
const MAGIC: &[u8; 4] = b"GQLC";
/// Magic, version, digest, seven u64 times, status, header count.
const FIXED_HEADER: usize = 4 + 1 + 32 + 7 * 8 + 2 + 2;

/// A response as the filter stores it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Entry<'a> {
    pub digest: [u8; 32],
    pub stored_at_ms: u64,
    pub expires_at_ms: u64,
    /// After expiry, how long it may be served stale while one refresh runs.
    pub stale_ms: u64,
    /// After expiry, how long it may be served stale when the origin fails.
    pub error_ms: u64,
    /// The answer's `age` when it arrived: a hit's `age` counts from the origin's answer.
    pub upstream_age_s: u64,
    /// When the answer was asked for (the fetch's start): purges at or after it reach the entry.
    pub born_us: u64,
    pub status: u16,
    pub headers: Vec<(&'a str, &'a str)>,
    /// Hashes of the entry's tags (`invalidate::marks::tag_hash`).
    pub tag_hashes: Vec<u64>,
    /// The tags themselves, comma-separated, for the debug header (empty unless debugging).
    pub tags: &'a str,
    pub body: &'a [u8],
}

/// What [`Entry::peek`] reads.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Peeked {
    pub digest: [u8; 32],
    pub stored_at_ms: u64,
    pub expires_at_ms: u64,
    pub keep_until_ms: u64,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum DecodeError {
    /// An empty value: what `remove_shared_data` leaves behind, or a never-written slot.
    Empty,
    /// Not ours, or written by another format version.
    ForeignFormat,
    /// Truncated or internally inconsistent.
    Corrupt,
}

impl<'a> Entry<'a> {
    /// Encoded size, computed without encoding (to refuse oversized entries cheaply).
    pub fn encoded_len(&self) -> usize {
        FIXED_HEADER
            + self
                .headers
                .iter()
                .map(|(n, v)| 2 + n.len() + 4 + v.len())
                .sum::<usize>()
            + 2
            + 8 * self.tag_hashes.len()
            + 2
            + self.tags.len()
            + 4
            + self.body.len()
    }

    pub fn encode(&self) -> Vec<u8> {
        let mut out = Vec::with_capacity(self.encoded_len());
        out.extend_from_slice(MAGIC);
        out.push(FORMAT_VERSION);
        out.extend_from_slice(&self.digest);
        out.extend_from_slice(&self.stored_at_ms.to_le_bytes());
        out.extend_from_slice(&self.expires_at_ms.to_le_bytes());
        out.extend_from_slice(&self.keep_until_ms().to_le_bytes());
        out.extend_from_slice(&self.stale_ms.to_le_bytes());
        out.extend_from_slice(&self.error_ms.to_le_bytes());
        out.extend_from_slice(&self.upstream_age_s.to_le_bytes());
        out.extend_from_slice(&self.born_us.to_le_bytes());
        out.extend_from_slice(&self.status.to_le_bytes());
        out.extend_from_slice(&(self.headers.len().min(u16::MAX as usize) as u16).to_le_bytes());
        for (name, value) in self.headers.iter().take(u16::MAX as usize) {
            out.extend_from_slice(&(name.len().min(u16::MAX as usize) as u16).to_le_bytes());
            out.extend_from_slice(&name.as_bytes()[..name.len().min(u16::MAX as usize)]);
            out.extend_from_slice(&(value.len() as u32).to_le_bytes());
            out.extend_from_slice(value.as_bytes());
        }
        let hashes = &self.tag_hashes[..self.tag_hashes.len().min(u16::MAX as usize)];
        out.extend_from_slice(&(hashes.len() as u16).to_le_bytes());
        for h in hashes {
            out.extend_from_slice(&h.to_le_bytes());
        }
        // Debug text only: cut at a character boundary rather than written past what u16 holds.
        let mut tags_len = self.tags.len().min(u16::MAX as usize);
        while !self.tags.is_char_boundary(tags_len) {
            tags_len -= 1;
        }
        out.extend_from_slice(&(tags_len as u16).to_le_bytes());
        out.extend_from_slice(&self.tags.as_bytes()[..tags_len]);
        out.extend_from_slice(&(self.body.len() as u32).to_le_bytes());
        out.extend_from_slice(self.body);
        out
    }

    /// Decodes without copying: headers and body borrow from `bytes`.
    pub fn decode(bytes: &'a [u8]) -> Result<Entry<'a>, DecodeError> {
        if bytes.is_empty() {
            return Err(DecodeError::Empty);
        }
        if bytes.len() < 5 || &bytes[..4] != MAGIC || bytes[4] != FORMAT_VERSION {
            return Err(DecodeError::ForeignFormat);
        }
        let mut r = ByteReader { bytes, pos: 5 };
        let mut digest = [0u8; 32];
        digest.copy_from_slice(r.take(32)?);
        let stored_at_ms = r.u64()?;
        let expires_at_ms = r.u64()?;
        let keep_until = r.u64()?;
        let stale_ms = r.u64()?;
        let error_ms = r.u64()?;
        let upstream_age_s = r.u64()?;
        let born_us = r.u64()?;
        let status = r.u16()?;
        let count = r.u16()? as usize;
        let mut headers = Vec::with_capacity(count.min(64));
        for _ in 0..count {
            let n = r.u16()? as usize;
            let name = std::str::from_utf8(r.take(n)?).map_err(|_| DecodeError::Corrupt)?;
            let v = r.u32()? as usize;
            let value = std::str::from_utf8(r.take(v)?).map_err(|_| DecodeError::Corrupt)?;
            headers.push((name, value));
        }
        let hash_count = r.u16()? as usize;
        let mut tag_hashes = Vec::with_capacity(hash_count.min(64));
        for _ in 0..hash_count {
            tag_hashes.push(r.u64()?);
        }
        let tags_len = r.u16()? as usize;
        let tags = std::str::from_utf8(r.take(tags_len)?).map_err(|_| DecodeError::Corrupt)?;
        let body_len = r.u32()? as usize;
        let body = r.take(body_len)?;
        if r.pos != bytes.len() {
            return Err(DecodeError::Corrupt);
        }
        let entry = Entry {
            digest,
            stored_at_ms,
            expires_at_ms,
            stale_ms,
            error_ms,
            upstream_age_s,
            born_us,
            status,
            headers,
            tag_hashes,
            tags,
            body,
        };
        // Derived, stored for `peek`: a record that disagrees with itself is not ours.
        if entry.keep_until_ms() != keep_until {
            return Err(DecodeError::Corrupt);
        }
        Ok(entry)
    }

    /// Until when the entry is worth keeping: its expiry, or the end of its stale windows.
    pub fn keep_until_ms(&self) -> u64 {
        self.expires_at_ms
            .saturating_add(self.stale_ms.max(self.error_ms))
    }

    /// When it may be served stale while refreshing (within `stale-while-revalidate`).
    pub fn stale_until_ms(&self) -> u64 {
        self.expires_at_ms.saturating_add(self.stale_ms)
    }

    /// Whether it may be served stale at `now_ms` while one refresh runs: expired (or soft-purged)
    /// and within its `stale-while-revalidate` window.
    pub fn within_stale_window(&self, now_ms: u64) -> bool {
        self.stale_ms > 0 && now_ms < self.stale_until_ms()
    }

    /// When it may be served stale instead of an origin failure (within `stale-if-error`).
    pub fn error_until_ms(&self) -> u64 {
        self.expires_at_ms.saturating_add(self.error_ms)
    }

    /// The `age` to send at `now_ms`: the upstream age plus the time since the entry was stored.
    pub fn age_s(&self, now_ms: u64) -> u64 {
        self.upstream_age_s
            .saturating_add(now_ms.saturating_sub(self.stored_at_ms) / 1000)
    }

    /// Reads only the digest, expiry and keep-until time: enough to decide hit, stale, miss or
    /// eviction.
    pub fn peek(bytes: &[u8]) -> Result<Peeked, DecodeError> {
        if bytes.is_empty() {
            return Err(DecodeError::Empty);
        }
        if bytes.len() < FIXED_HEADER || &bytes[..4] != MAGIC || bytes[4] != FORMAT_VERSION {
            return Err(DecodeError::ForeignFormat);
        }
        let mut r = ByteReader { bytes, pos: 5 };
        let mut digest = [0u8; 32];
        digest.copy_from_slice(r.take(32)?);
        let stored_at_ms = r.u64()?;
        let expires_at_ms = r.u64()?;
        let keep_until_ms = r.u64()?;
        Ok(Peeked {
            digest,
            stored_at_ms,
            expires_at_ms,
            keep_until_ms,
        })
    }
}

struct ByteReader<'a> {
    bytes: &'a [u8],
    pos: usize,
}

impl<'a> ByteReader<'a> {
    fn take(&mut self, n: usize) -> Result<&'a [u8], DecodeError> {
        let end = self.pos.checked_add(n).ok_or(DecodeError::Corrupt)?;
        let slice = self.bytes.get(self.pos..end).ok_or(DecodeError::Corrupt)?;
        self.pos = end;
        Ok(slice)
    }

    fn array<const N: usize>(&mut self) -> Result<[u8; N], DecodeError> {
        let mut a = [0u8; N];
        a.copy_from_slice(self.take(N)?);
        Ok(a)
    }

    fn u16(&mut self) -> Result<u16, DecodeError> {
        self.array().map(u16::from_le_bytes)
    }

    fn u32(&mut self) -> Result<u32, DecodeError> {
        self.array().map(u32::from_le_bytes)
    }

    fn u64(&mut self) -> Result<u64, DecodeError> {
        self.array().map(u64::from_le_bytes)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sample() -> Entry<'static> {
        Entry {
            digest: [7; 32],
            stored_at_ms: 1_000,
            expires_at_ms: 61_000,
            stale_ms: 10_000,
            error_ms: 300_000,
            upstream_age_s: 5,
            born_us: 990,
            status: 200,
            headers: vec![("content-type", "application/json"), ("etag", "\"x\"")],
            tag_hashes: vec![1, u64::MAX],
            tags: "type:User,entity:User:1",
            body: br#"{"data":{"a":1}}"#,
        }
    }

    #[test]
    fn round_trip() {
        let e = sample();
        let bytes = e.encode();
        assert_eq!(bytes.len(), e.encoded_len());
        assert_eq!(Entry::decode(&bytes).unwrap(), e);
        let peeked = Entry::peek(&bytes).unwrap();
        assert_eq!(
            (peeked.digest, peeked.expires_at_ms, peeked.keep_until_ms),
            ([7; 32], 61_000, 361_000)
        );
        assert_eq!(e.age_s(3_000), 7, "upstream age plus time since stored");
    }

    #[test]
    fn empty_body_and_no_headers() {
        let e = Entry {
            headers: vec![],
            tag_hashes: vec![],
            tags: "",
            body: b"",
            ..sample()
        };
        assert_eq!(Entry::decode(&e.encode()).unwrap(), e);
    }

    #[test]
    fn other_versions_and_garbage_are_not_entries() {
        assert_eq!(Entry::decode(b""), Err(DecodeError::Empty));
        assert_eq!(Entry::peek(b""), Err(DecodeError::Empty));
        let mut bytes = sample().encode();
        bytes[4] = FORMAT_VERSION + 1;
        assert_eq!(Entry::decode(&bytes), Err(DecodeError::ForeignFormat));
        assert_eq!(Entry::peek(&bytes), Err(DecodeError::ForeignFormat));
        assert_eq!(Entry::decode(b"nope"), Err(DecodeError::ForeignFormat));
    }

    #[test]
    fn every_truncation_is_corrupt_not_a_panic() {
        let bytes = sample().encode();
        for len in 5..bytes.len() {
            assert!(Entry::decode(&bytes[..len]).is_err(), "len {len}");
        }
        let mut longer = bytes.clone();
        longer.push(0);
        assert_eq!(Entry::decode(&longer), Err(DecodeError::Corrupt));
    }

    #[test]
    fn arbitrary_bytes_never_panic() {
        let mut seed = 0x2545_f491_4f6c_dd1du64;
        let base = sample().encode();
        for _ in 0..2000 {
            let mut b = base.clone();
            for _ in 0..4 {
                seed ^= seed << 13;
                seed ^= seed >> 7;
                seed ^= seed << 17;
                let i = (seed as usize) % b.len();
                b[i] = (seed >> 32) as u8;
            }
            let _ = Entry::decode(&b);
            let _ = Entry::peek(&b);
        }
    }
}
