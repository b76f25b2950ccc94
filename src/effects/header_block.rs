//! A request's headers as the host hands them over: one buffer in proxy-wasm's map serialization,
//! read in place. The SDK's own reader copies every name and value into an allocation of its
//! own (two per header, freed again after the decision); a hit reads each header once, so it
//! reads them where they lie (about 2% of a hit's Envoy CPU, bench/gateway/README.md).
//!
//! The layout (also of route metadata read as a property): a little-endian u32 count, then a (name length, value length) u32 pair per header,
//! then each name and each value followed by a NUL.

/// One request's header map, checked once when made: every size fits the buffer.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct HeaderBlock {
    bytes: Vec<u8>,
    count: usize,
}

fn u32_at(bytes: &[u8], at: usize) -> Option<usize> {
    let b: [u8; 4] = bytes.get(at..at.checked_add(4)?)?.try_into().ok()?;
    Some(u32::from_le_bytes(b) as usize)
}

/// How many pairs `bytes` holds, if it is exactly a map in this format (anything else is not a
/// map: refused, never read in part).
fn checked_count(bytes: &[u8]) -> Option<usize> {
    let count = u32_at(bytes, 0)?;
    // Each pair takes at least 8 bytes of lengths and 2 NULs: a count beyond that is a lie.
    if count > bytes.len() / 10 {
        return None;
    }
    let mut at = 4 + count * 8;
    for i in 0..count {
        let name_end = at.checked_add(u32_at(bytes, 4 + i * 8)?)?;
        let value_end = name_end
            .checked_add(1)?
            .checked_add(u32_at(bytes, 8 + i * 8)?)?;
        if bytes.get(name_end) != Some(&0) || bytes.get(value_end) != Some(&0) {
            return None;
        }
        at = value_end + 1;
    }
    (at == bytes.len()).then_some(count)
}

/// The pairs of a map in this format (route metadata, header maps), borrowed from it.
pub fn pairs(bytes: &[u8]) -> Option<Vec<(&[u8], &[u8])>> {
    let count = checked_count(bytes)?;
    Some(Pairs::over(bytes, count).collect())
}

impl HeaderBlock {
    /// The host's buffer, if it is a well-formed map (an empty buffer: no headers).
    pub fn parse(bytes: Vec<u8>) -> Option<HeaderBlock> {
        if bytes.is_empty() {
            return Some(HeaderBlock::default());
        }
        let count = checked_count(&bytes)?;
        Some(HeaderBlock { bytes, count })
    }

    /// The map of these pairs, in this order (what the host would hand over for them).
    pub fn from_pairs<'a>(pairs: impl IntoIterator<Item = (&'a [u8], &'a [u8])>) -> HeaderBlock {
        let pairs: Vec<(&[u8], &[u8])> = pairs.into_iter().collect();
        let mut bytes = Vec::new();
        bytes.extend_from_slice(&(pairs.len() as u32).to_le_bytes());
        for (name, value) in &pairs {
            bytes.extend_from_slice(&(name.len() as u32).to_le_bytes());
            bytes.extend_from_slice(&(value.len() as u32).to_le_bytes());
        }
        for (name, value) in &pairs {
            bytes.extend_from_slice(name);
            bytes.push(0);
            bytes.extend_from_slice(value);
            bytes.push(0);
        }
        HeaderBlock {
            bytes,
            count: pairs.len(),
        }
    }

    /// The same map with one more header at the end.
    pub fn with(&self, name: &str, value: &[u8]) -> HeaderBlock {
        HeaderBlock::from_pairs(self.iter().chain([(name.as_bytes(), value)]))
    }

    /// The map as the host serializes it.
    pub fn as_bytes(&self) -> &[u8] {
        &self.bytes
    }

    pub fn len(&self) -> usize {
        self.count
    }

    pub fn is_empty(&self) -> bool {
        self.count == 0
    }

    /// Every (name, value), in the order received.
    pub fn iter(&self) -> Pairs<'_> {
        Pairs::over(&self.bytes, self.count)
    }
}

/// The pairs of a checked map.
pub struct Pairs<'a> {
    bytes: &'a [u8],
    next: usize,
    count: usize,
    data: usize,
}

impl<'a> Pairs<'a> {
    fn over(bytes: &'a [u8], count: usize) -> Pairs<'a> {
        Pairs {
            bytes,
            next: 0,
            count,
            data: count.saturating_mul(8).saturating_add(4),
        }
    }
}

impl<'a> Iterator for Pairs<'a> {
    type Item = (&'a [u8], &'a [u8]);

    fn next(&mut self) -> Option<Self::Item> {
        if self.next >= self.count {
            return None;
        }
        let name_len = u32_at(self.bytes, 4 + self.next * 8)?;
        let value_len = u32_at(self.bytes, 8 + self.next * 8)?;
        // Checked by `parse`; saturating all the same, so no buffer can make this panic.
        let name_at = self.data;
        let value_at = name_at.saturating_add(name_len).saturating_add(1);
        let name = self.bytes.get(name_at..name_at.saturating_add(name_len))?;
        let value = self
            .bytes
            .get(value_at..value_at.saturating_add(value_len))?;
        self.data = value_at.saturating_add(value_len).saturating_add(1);
        self.next += 1;
        Some((name, value))
    }

    fn size_hint(&self) -> (usize, Option<usize>) {
        let left = self.count - self.next.min(self.count);
        (left, Some(left))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn block(pairs: &[(&str, &str)]) -> HeaderBlock {
        HeaderBlock::from_pairs(pairs.iter().map(|(n, v)| (n.as_bytes(), v.as_bytes())))
    }

    #[test]
    fn route_metadata_comes_as_pairs() {
        let hex = |s: &str| -> Vec<u8> {
            (0..s.len())
                .step_by(2)
                .map(|i| u8::from_str_radix(&s[i..i + 2], 16).unwrap())
                .collect()
        };
        // As Envoy 1.40 hands over `filter_metadata.<ns>` holding `ttl_seconds: 2`, `disabled: true`.
        let ttl = hex("010000000b0000000800000074746c5f7365636f6e647300000000000000004000");
        let two = 2.0f64.to_le_bytes();
        assert_eq!(pairs(&ttl), Some(vec![(&b"ttl_seconds"[..], &two[..])]));
        let off = hex("01000000080000000100000064697361626c6564000100");
        assert_eq!(pairs(&off), Some(vec![(&b"disabled"[..], &[1u8][..])]));
        assert_eq!(pairs(&hex("00000000")), Some(vec![]));
        for bad in [
            &ttl[..ttl.len() - 1],
            &ttl[..3],
            b"",
            &[0xff, 0xff, 0xff, 0xff][..],
        ] {
            assert_eq!(pairs(bad), None, "{bad:?}");
        }
        let mut trailing = ttl.clone();
        trailing.push(0);
        assert_eq!(pairs(&trailing), None);
    }

    #[test]
    fn pairs_read_back_in_order() {
        let b = block(&[(":method", "POST"), ("x-empty", ""), ("accept", "a,b")]);
        let read: Vec<_> = b.iter().collect();
        assert_eq!(
            read,
            vec![
                (&b":method"[..], &b"POST"[..]),
                (&b"x-empty"[..], &b""[..]),
                (&b"accept"[..], &b"a,b"[..])
            ]
        );
        assert_eq!(b.len(), 3);
        assert_eq!(HeaderBlock::parse(b.bytes.clone()), Some(b.clone()));
        assert_eq!(
            b.with("x", b"1").iter().last(),
            Some((&b"x"[..], &b"1"[..]))
        );
    }

    #[test]
    fn a_malformed_buffer_is_refused_not_misread() {
        let good = block(&[("a", "1"), ("bb", "22")]).bytes;
        assert_eq!(HeaderBlock::parse(Vec::new()), Some(HeaderBlock::default()));
        // Every cut, every flipped byte: refused, or a map that still reads within its buffer.
        for cut in 1..good.len() {
            assert_eq!(
                HeaderBlock::parse(good[..cut].to_vec()),
                None,
                "cut at {cut}"
            );
        }
        for at in 0..good.len() {
            for byte in [0u8, 1, 0x7f, 0xff] {
                let mut bad = good.clone();
                bad[at] = byte;
                if let Some(b) = HeaderBlock::parse(bad) {
                    assert!(b.iter().count() <= b.len());
                }
            }
        }
        let mut huge = good.clone();
        huge[..4].copy_from_slice(&u32::MAX.to_le_bytes());
        assert_eq!(HeaderBlock::parse(huge), None);
    }
}
