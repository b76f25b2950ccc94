//! The L2 service's verbs as callouts, and its answers read strictly: anything not exactly what
//! the service sends is an [`L2Failure`], and the request goes on as if there were no L2. The
//! paths, headers and envelopes are the wire contract's (`l2_proto`); this is which cluster, with
//! what credentials, and what the filter signs.

use crate::config::L2;
use crate::effects::host::{status, Callout};
use crate::request::key::CacheKey;
use l2_proto::purge::PurgeRecord;
use l2_proto::{batch, content_type, header, marks, route};

/// The answer of `POST /v1/lookup` (a hit: an encoded cache entry, sealed by the storing node).
pub use l2_proto::lookup::Looked;

/// Why an L2 answer cannot be used.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum L2Failure {
    /// Envoy refused the callout, or the connection was reset.
    Unreachable,
    /// A status other than the verb's success (503: Redis is down; 504: the callout timed out).
    Status(u16),
    /// A value over `max_entry_bytes`: never copied into the VM.
    TooLarge,
    /// Not what the service answers.
    Malformed,
}

/// A lease owner: one worker of one Envoy.
pub fn owner(worker_id: u64) -> String {
    format!("{worker_id:016x}")
}

fn call(l2: &L2, cluster: &str, method: &str, path: String, body: Option<Vec<u8>>) -> Callout {
    let mut headers = vec![
        (":method".to_string(), method.to_string()),
        (":path".to_string(), path),
        (":authority".to_string(), l2.authority.clone()),
    ];
    if let Some(secret) = &l2.secret {
        headers.push((
            "authorization".to_string(),
            format!("{}{}", header::BEARER, secret.expose()),
        ));
    }
    if body.is_some() {
        headers.push(("content-type".to_string(), content_type::BYTES.to_string()));
    }
    Callout {
        cluster: cluster.to_string(),
        headers,
        body,
    }
}

/// The name of `key`'s entry in the L2 (see `seal`: keyed with the fleet key).
fn name(l2: &L2, key: &CacheKey) -> String {
    l2.fleet_key.l2_name(key).hex()
}

/// Looks `key` up, taking its lease for `lease_ms` if nobody holds it. With `wait_ms > 0` the
/// service waits for the holder's store, so the call goes to the long-poll cluster.
pub fn lookup(l2: &L2, key: &CacheKey, lease_ms: u64, owner: &str, wait_ms: u64) -> Callout {
    let path = route::lookup(&name(l2, key), lease_ms, owner, wait_ms);
    let cluster = if wait_ms > 0 {
        &l2.wait_cluster
    } else {
        &l2.cluster
    };
    call(l2, cluster, "POST", path, None)
}

/// Stores `entry` (encoded) under `key` for `ttl_ms`, signed with the fleet key, releasing the
/// lease if `owner` holds it.
pub fn store(l2: &L2, key: &CacheKey, ttl_ms: u64, owner: &str, entry: &[u8]) -> Callout {
    let path = route::store(&name(l2, key), ttl_ms, owner);
    let sealed = l2.fleet_key.seal_entry(key, entry);
    call(l2, &l2.cluster, "PUT", path, Some(sealed))
}

/// Gives the lease up (the fetch failed or its answer is not stored): a waiting node leads next.
pub fn release(l2: &L2, key: &CacheKey, owner: &str) -> Callout {
    let path = route::release(&name(l2, key), owner);
    call(l2, &l2.cluster, "POST", path, None)
}

/// Appends `records` to the fleet's purge log and its snapshot as marks, one per target, each
/// signed with the fleet key, kept in the snapshot `keep_ms` (the longest an entry they purge may
/// live). `None` when they hold no target or more than one call carries.
pub fn publish_marks(l2: &L2, keep_ms: u64, records: &[&PurgeRecord]) -> Option<Callout> {
    let sealed: Vec<Vec<u8>> = records
        .iter()
        .flat_map(|r| r.targets.iter().map(|&(t, soft)| (r.at_us, t, soft)))
        .map(|(at_us, target, soft)| l2.fleet_key.seal_mark(at_us, target, soft))
        .collect();
    let body = marks::MarksBatch::encode(keep_ms, &sealed)?;
    Some(call(
        l2,
        &l2.cluster,
        "POST",
        route::MARKS.to_string(),
        Some(body),
    ))
}

/// Reads the purge log after `cursor` (entry `n` of log `generation`), waiting up to `wait_ms`
/// for an entry.
pub fn read_purges(
    l2: &L2,
    cursor: &str,
    generation: Option<&str>,
    n: u64,
    wait_ms: u64,
) -> Callout {
    let path = route::purges(cursor, generation, Some(n), wait_ms);
    call(l2, &l2.wait_cluster, "GET", path, None)
}

/// Reads a page of the purge snapshot from `cursor` (`"0"`: the first).
pub fn read_marks(l2: &L2, cursor: &str) -> Callout {
    call(l2, &l2.cluster, "GET", route::marks(cursor), None)
}

/// Entity mode: the values of `keys` (at most `l2_proto::batch::MAX_BATCH_KEYS`) in one call;
/// `None` for none or too many. Nothing is signed: what comes back is checked per key.
pub fn mget(l2: &L2, keys: &[CacheKey]) -> Option<Callout> {
    let names: Vec<batch::Key> = keys
        .iter()
        .map(|k| l2.fleet_key.l2_name(k).digest)
        .collect();
    let body = batch::encode_mget(&names)?;
    Some(call(
        l2,
        &l2.cluster,
        "POST",
        route::MGET.to_string(),
        Some(body),
    ))
}

/// Entity mode: stores each `(key, ttl_ms, entry)`, signed with the fleet key, in as few calls
/// as the contract's limits allow (one for any batch a gateway sends).
pub fn mstore(l2: &L2, items: &[(CacheKey, u64, &[u8])]) -> Vec<Callout> {
    let sealed: Vec<(batch::Key, u64, Vec<u8>)> = items
        .iter()
        .map(|(key, ttl_ms, entry)| {
            let name = l2.fleet_key.l2_name(key).digest;
            (name, *ttl_ms, l2.fleet_key.seal_entry(key, entry))
        })
        .collect();
    let items: Vec<batch::MstoreItem<'_>> = sealed
        .iter()
        .map(|(key, ttl_ms, value)| batch::MstoreItem {
            key: *key,
            ttl_ms: *ttl_ms,
            value,
        })
        .collect();
    batch::MstoreItem::encode_all(&items)
        .into_iter()
        .map(|body| {
            call(
                l2,
                &l2.cluster,
                "PUT",
                route::MSTORE.to_string(),
                Some(body),
            )
        })
        .collect()
}

/// Reads an mget's answer to `asked` keys: per key, its sealed value or `None`. `body` is read
/// only for a `200` no larger than the contract allows (`body_size`).
pub fn read_mget(
    headers: &[(String, Vec<u8>)],
    body_size: usize,
    body: impl FnOnce() -> Option<Vec<u8>>,
    asked: usize,
) -> Result<Vec<Option<Vec<u8>>>, L2Failure> {
    match status(headers) {
        Some(200) => {}
        Some(s) => return Err(L2Failure::Status(s)),
        None => return Err(L2Failure::Malformed),
    }
    if body_size > batch::MAX_MGET_ANSWER_BYTES {
        return Err(L2Failure::TooLarge);
    }
    let body = body().ok_or(L2Failure::Malformed)?;
    let values = batch::decode_mget_answer(&body, asked).map_err(|_| L2Failure::Malformed)?;
    Ok(values.into_iter().map(|v| v.map(<[u8]>::to_vec)).collect())
}

fn header_value<'h>(headers: &'h [(String, Vec<u8>)], name: &str) -> Option<&'h [u8]> {
    headers
        .iter()
        .find(|(n, _)| n.eq_ignore_ascii_case(name))
        .map(|(_, v)| v.as_slice())
}

/// A write verb's answer (store, release, purge): its 2xx, or why not.
pub fn written(headers: &[(String, Vec<u8>)]) -> Result<(), L2Failure> {
    match status(headers) {
        Some(s) if (200..300).contains(&s) => Ok(()),
        Some(s) => Err(L2Failure::Status(s)),
        None => Err(L2Failure::Malformed),
    }
}

/// Reads a lookup's answer. `body` is what came with it (only read for a hit).
pub fn read_lookup(
    headers: &[(String, Vec<u8>)],
    body: impl FnOnce() -> Option<Vec<u8>>,
) -> Result<Looked, L2Failure> {
    match status(headers) {
        Some(200) => {}
        Some(s) => return Err(L2Failure::Status(s)),
        None => return Err(L2Failure::Malformed),
    }
    Looked::read(header_value(headers, header::X_L2), body).map_err(|_| L2Failure::Malformed)
}

#[cfg(test)]
mod tests {
    use super::*;
    use l2_proto::purge::Target;

    fn l2() -> L2 {
        L2 {
            cluster: "l2".into(),
            wait_cluster: "l2_wait".into(),
            timeout_ms: 50,
            wait_ms: 2000,
            authority: "graphql-cache-l2".into(),
            secret: None,
            fleet_key: crate::fleet::seal::FleetKey::new(&[1; 32]).unwrap(),
            purge_skew_ms: 1000,
            feed_failsafe_ms: 5000,
        }
    }

    fn path(c: &Callout) -> &str {
        &c.headers[1].1
    }

    fn answer(status: &str, x_l2: Option<&str>) -> Vec<(String, Vec<u8>)> {
        let mut h = vec![(":status".to_string(), status.as_bytes().to_vec())];
        if let Some(v) = x_l2 {
            h.push(("x-l2".to_string(), v.as_bytes().to_vec()));
        }
        h
    }

    #[test]
    fn lookups_wait_on_the_long_poll_cluster_only() {
        let key = CacheKey { digest: [0xab; 32] };
        let quick = lookup(&l2(), &key, 12_000, "00000000000000ff", 0);
        assert_eq!(quick.cluster, "l2");
        assert_eq!(
            path(&quick),
            format!(
                "/v1/lookup?key={}&lease_ms=12000&owner=00000000000000ff",
                l2().fleet_key.l2_name(&key).hex()
            )
        );
        assert!(!path(&quick).contains(&key.hex()), "names are keyed");
        assert_eq!(quick.headers[2].1, "graphql-cache-l2");
        let waiting = lookup(&l2(), &key, 0, "o", 1500);
        assert_eq!(waiting.cluster, "l2_wait");
        assert!(path(&waiting).ends_with("&lease_ms=1&owner=o&wait_ms=1500"));
        let put = store(&l2(), &key, 0, "o", b"v");
        assert_eq!(put.headers[0].1, "PUT");
        assert!(
            path(&put).contains("&ttl_ms=1&"),
            "a ttl of 0 would be refused"
        );
        let sealed = put.body.unwrap();
        assert_eq!(l2().fleet_key.open_entry(&key, &sealed), Some(&b"v"[..]));
        let read = read_purges(&l2(), "0", Some("g1"), 7, 1000);
        assert_eq!(read.cluster, "l2_wait");
        assert!(path(&read).ends_with("&gen=g1&n=7"));
        let snapshot = read_marks(&l2(), "0");
        assert_eq!(
            (snapshot.cluster.as_str(), path(&snapshot)),
            ("l2", "/v1/marks?cursor=0")
        );
        let record = PurgeRecord {
            at_us: 5,
            targets: vec![(Target::Tag(1), false), (Target::All, true)],
        };
        let marks = publish_marks(&l2(), 60_000, &[&record]).unwrap();
        assert_eq!((marks.cluster.as_str(), path(&marks)), ("l2", "/v1/marks"));
        let batch = marks::MarksBatch::decode(marks.body.as_ref().unwrap()).unwrap();
        assert_eq!(batch.keep_ms, 60_000);
        assert_eq!(batch.marks.len(), 2, "one mark per target");
        for (mark, &(target, soft)) in batch.marks.iter().zip(&record.targets) {
            assert_eq!((mark.at_us, mark.target, mark.soft), (5, target, soft));
            assert!(l2().fleet_key.open_record(&mark.sealed).is_some(), "signed");
        }
        assert!(quick.headers.iter().all(|(n, _)| n != "authorization"));
        let with_secret = L2 {
            secret: Some(crate::config::Secret::new("s3cret-0123456789".into())),
            ..l2()
        };
        let authed = release(&with_secret, &key, "o");
        assert!(authed
            .headers
            .contains(&("authorization".into(), "Bearer s3cret-0123456789".into())));
        assert_eq!(owner(255), "00000000000000ff");
    }

    #[test]
    fn batch_calls_are_keyed_and_signed_and_their_answers_read_strictly() {
        let keys = [CacheKey { digest: [1; 32] }, CacheKey { digest: [2; 32] }];
        let get = mget(&l2(), &keys).unwrap();
        assert_eq!((get.cluster.as_str(), path(&get)), ("l2", "/v1/mget"));
        let names = batch::decode_mget(get.body.as_ref().unwrap()).unwrap();
        assert_eq!(
            names[1],
            l2().fleet_key.l2_name(&keys[1]).digest,
            "names are keyed"
        );
        assert!(mget(&l2(), &[]).is_none());
        let puts = mstore(&l2(), &[(keys[0], 5_000, b"entry")]);
        assert_eq!(puts.len(), 1);
        assert_eq!(
            (puts[0].headers[0].1.as_str(), path(&puts[0])),
            ("PUT", "/v1/mstore")
        );
        let items = batch::decode_mstore(puts[0].body.as_ref().unwrap()).unwrap();
        assert_eq!(items[0].ttl_ms, 5_000);
        let opened = l2().fleet_key.open_entry(&keys[0], items[0].value);
        assert_eq!(opened, Some(&b"entry"[..]), "sealed for its key");
        let encoded = batch::encode_mget_answer(&[Some(b"v"), None]).unwrap();
        let n = encoded.len();
        let body = || Some(encoded.clone());
        assert_eq!(
            read_mget(&answer("200", None), n, body, 2),
            Ok(vec![Some(b"v".to_vec()), None])
        );
        assert_eq!(
            read_mget(&answer("200", None), n, body, 3),
            Err(L2Failure::Malformed)
        );
        assert_eq!(
            read_mget(&answer("424", None), n, body, 2),
            Err(L2Failure::Status(424))
        );
        let huge = batch::MAX_MGET_ANSWER_BYTES + 1;
        assert_eq!(
            read_mget(&answer("200", None), huge, || panic!("not read"), 2),
            Err(L2Failure::TooLarge)
        );
        assert_eq!(read_mget(&[], n, body, 2), Err(L2Failure::Malformed));
    }

    #[test]
    fn lookup_answers_are_read_strictly() {
        let body = || Some(b"entry".to_vec());
        assert_eq!(
            read_lookup(&answer("200", Some("hit")), body),
            Ok(Looked::Hit(b"entry".to_vec()))
        );
        assert_eq!(
            read_lookup(&answer("200", Some("lead")), body),
            Ok(Looked::Lead)
        );
        assert_eq!(
            read_lookup(&answer("200", Some("busy")), body),
            Ok(Looked::Busy)
        );
        assert_eq!(
            read_lookup(&answer("200", Some("hit")), || None),
            Err(L2Failure::Malformed)
        );
        assert_eq!(
            read_lookup(&answer("200", Some("maybe")), body),
            Err(L2Failure::Malformed)
        );
        assert_eq!(
            read_lookup(&answer("200", None), body),
            Err(L2Failure::Malformed)
        );
        assert_eq!(
            read_lookup(&answer("503", None), body),
            Err(L2Failure::Status(503))
        );
        assert_eq!(read_lookup(&[], body), Err(L2Failure::Malformed));
        assert_eq!(written(&answer("204", None)), Ok(()));
        assert_eq!(written(&answer("413", None)), Err(L2Failure::Status(413)));
    }
}
