//! What the fleet key protects. The L2 service and Redis keep what Envoys give them, so whoever
//! reaches them could hand every Envoy a forged answer or a purge that never ends. Each Envoy
//! signs what it puts there with the fleet key (HMAC-SHA-256), which neither the service nor Redis
//! holds, and uses nothing it reads back unless the signature holds. Names in the L2 are keyed
//! too: knowing a user's identity is not enough to find that user's private entries there.

pub use crate::config::FleetKey;
use crate::request::key::CacheKey;
use hmac::{Hmac, Mac};
use l2_proto::purge::{PurgeRecord, Target};
use sha2::Sha256;

type HmacSha256 = Hmac<Sha256>;

const MAC_BYTES: usize = 32;
/// A sealed value: this magic, the MAC, the value.
const MAGIC: &[u8; 4] = b"GQS1";

/// Each use of the key signs its own domain, so a MAC made for one kind of value never checks
/// for another (a purge record passed off as an entry, say).
#[derive(Clone, Copy)]
enum Domain {
    Name,
    Entry,
    Record,
}

impl Domain {
    fn label(self) -> &'static [u8] {
        match self {
            Domain::Name => b"graphql-cache/l2-name\0",
            Domain::Entry => b"graphql-cache/entry\0",
            Domain::Record => b"graphql-cache/purge-record\0",
        }
    }
}

impl FleetKey {
    fn mac(&self, domain: Domain, parts: &[&[u8]]) -> HmacSha256 {
        mac_with(self.bytes(), domain, parts)
    }

    /// The name `key`'s entry has in the L2.
    pub fn l2_name(&self, key: &CacheKey) -> CacheKey {
        let digest = self
            .mac(Domain::Name, &[&key.digest])
            .finalize()
            .into_bytes();
        let mut out = [0u8; 32];
        out.copy_from_slice(&digest);
        CacheKey { digest: out }
    }

    /// `entry` (an encoded cache entry of `key`) as it goes to the L2.
    pub fn seal_entry(&self, key: &CacheKey, entry: &[u8]) -> Vec<u8> {
        self.seal(Domain::Entry, &key.digest, entry)
    }

    /// The entry inside `sealed`, if this fleet's key signed it for `key`.
    pub fn open_entry<'a>(&self, key: &CacheKey, sealed: &'a [u8]) -> Option<&'a [u8]> {
        self.open(Domain::Entry, &key.digest, sealed)
    }

    /// A purge record as it goes to the fleet's purge log.
    pub fn seal_record(&self, record: &[u8]) -> Vec<u8> {
        self.seal(Domain::Record, &[], record)
    }

    /// One target's purge at `at_us`, as the fleet's purge log and its snapshot keep it: a
    /// record of that target alone, sealed, so that each can be checked on its own.
    pub fn seal_mark(&self, at_us: u64, target: Target, soft: bool) -> Vec<u8> {
        let record = PurgeRecord {
            at_us,
            targets: vec![(target, soft)],
        };
        // One target always encodes.
        self.seal_record(&record.encode().unwrap_or_default())
    }

    /// The record inside `sealed`, if this fleet's key signed it.
    pub fn open_record<'a>(&self, sealed: &'a [u8]) -> Option<&'a [u8]> {
        self.open(Domain::Record, &[], sealed)
    }

    fn seal(&self, domain: Domain, context: &[u8], value: &[u8]) -> Vec<u8> {
        let tag = self.mac(domain, &[context, value]).finalize().into_bytes();
        let mut out = Vec::with_capacity(MAGIC.len() + MAC_BYTES + value.len());
        out.extend_from_slice(MAGIC);
        out.extend_from_slice(&tag);
        out.extend_from_slice(value);
        out
    }

    fn open<'a>(&self, domain: Domain, context: &[u8], sealed: &'a [u8]) -> Option<&'a [u8]> {
        let rest = sealed.strip_prefix(MAGIC)?;
        if rest.len() < MAC_BYTES {
            return None;
        }
        let (tag, value) = rest.split_at(MAC_BYTES);
        // verify_slice compares in constant time. Any accepted key: one being rotated in or out.
        self.accepted()
            .any(|key| {
                mac_with(key, domain, &[context, value])
                    .verify_slice(tag)
                    .is_ok()
            })
            .then_some(value)
    }
}

fn mac_with(key: &[u8], domain: Domain, parts: &[&[u8]]) -> HmacSha256 {
    // HMAC takes a key of any length: this cannot fail.
    let mut mac = match HmacSha256::new_from_slice(key) {
        Ok(m) => m,
        Err(_) => unreachable_key(),
    };
    mac.update(domain.label());
    for part in parts {
        mac.update(&(part.len() as u64).to_le_bytes());
        mac.update(part);
    }
    mac
}

#[cold]
fn unreachable_key() -> ! {
    // Hmac::new_from_slice refuses no key length; a wasm trap here would be a library bug.
    std::process::abort()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_mark_is_the_size_the_l2_reads() {
        use l2_proto::marks::{Mark, MARK_BYTES, SEAL_HEADER_BYTES};
        assert_eq!(MAGIC.len() + MAC_BYTES, SEAL_HEADER_BYTES);
        let sealed = key(7).seal_mark(u64::MAX, Target::Tag(9), true);
        assert_eq!(sealed.len(), MARK_BYTES);
        let read = Mark::read(&sealed).unwrap();
        assert_eq!(
            (read.at_us, read.target, read.soft),
            (u64::MAX, Target::Tag(9), true)
        );
        let opened = PurgeRecord::decode(key(7).open_record(&sealed).unwrap()).unwrap();
        assert_eq!(opened.targets, vec![(Target::Tag(9), true)]);
    }

    #[test]
    fn a_sealed_record_of_the_most_targets_fits_what_the_l2_takes() {
        use l2_proto::purge::{ENVELOPE_BYTES, MAX_TARGETS};
        assert!(MAGIC.len() + MAC_BYTES <= ENVELOPE_BYTES);
        let record = PurgeRecord {
            at_us: u64::MAX,
            targets: vec![(Target::Tag(u64::MAX), true); MAX_TARGETS],
        };
        let key = FleetKey::new(&[7; 32]).unwrap();
        let sealed = key.seal_record(&record.encode().unwrap());
        assert!(
            sealed.len() <= l2_proto::limits::MAX_PURGE_BYTES,
            "{}",
            sealed.len()
        );
    }

    fn key(b: u8) -> FleetKey {
        FleetKey::new(&[b; 32]).unwrap()
    }

    #[test]
    fn a_sealed_entry_opens_only_for_its_key_and_its_fleet() {
        let k = CacheKey { digest: [1; 32] };
        let other = CacheKey { digest: [2; 32] };
        let sealed = key(7).seal_entry(&k, b"entry");
        assert_eq!(key(7).open_entry(&k, &sealed), Some(&b"entry"[..]));
        assert_eq!(
            key(7).open_entry(&other, &sealed),
            None,
            "replayed for another key"
        );
        assert_eq!(key(8).open_entry(&k, &sealed), None, "another fleet's key");
        assert_eq!(
            key(7).open_record(&sealed),
            None,
            "an entry is no purge record"
        );
        let mut flipped = sealed.clone();
        *flipped.last_mut().unwrap() ^= 1;
        assert_eq!(key(7).open_entry(&k, &flipped), None);
        assert_eq!(key(7).open_entry(&k, b"entry"), None, "unsigned");
        assert_eq!(key(7).open_entry(&k, &sealed[..20]), None, "truncated");
        assert_eq!(key(7).open_entry(&k, b""), None);
    }

    #[test]
    fn while_a_key_is_rotated_both_are_accepted_and_the_first_signs() {
        let old = key(3);
        let both = FleetKey::rotating(&[&[4; 32], &[3; 32]]).unwrap();
        let by_old = old.seal_record(b"rec");
        let by_both = both.seal_record(b"rec");
        assert_eq!(
            both.open_record(&by_old),
            Some(&b"rec"[..]),
            "the old one's"
        );
        assert_eq!(by_both, key(4).seal_record(b"rec"), "signed with the first");
        assert_eq!(
            old.open_record(&by_both),
            None,
            "not yet accepted by the old fleet"
        );
        assert_eq!(key(4).open_record(&by_both), Some(&b"rec"[..]));
        assert_eq!(
            both.l2_name(&CacheKey { digest: [9; 32] }),
            key(4).l2_name(&CacheKey { digest: [9; 32] })
        );
        assert!(FleetKey::rotating(&[&[4; 32], &[3; 31]]).is_none());
        assert!(FleetKey::rotating(&[]).is_none());
    }

    #[test]
    fn records_and_names() {
        let sealed = key(3).seal_record(b"rec");
        assert_eq!(key(3).open_record(&sealed), Some(&b"rec"[..]));
        assert_eq!(key(4).open_record(&sealed), None);
        let k = CacheKey { digest: [9; 32] };
        assert_ne!(key(3).l2_name(&k), k);
        assert_ne!(key(3).l2_name(&k), key(4).l2_name(&k));
        assert_eq!(key(3).l2_name(&k), key(3).l2_name(&k));
        assert!(FleetKey::new(&[0; 31]).is_none());
        assert_eq!(format!("{:?}", key(3)), "FleetKey(..)");
    }
}
