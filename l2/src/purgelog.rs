//! The purge log and its snapshot in Redis: the stream `gc:purges` (one entry per record or mark,
//! numbered by the log's sequence), the hash `{gc:purges}:marks` beside it (the newest mark of
//! every target, each field expiring on its own), and the generation that names them both. All
//! three share one Cluster slot (`gc:purges` hashes whole, `{gc:purges}` hashes its tag, the same
//! string), so every verb is ONE script.
//!
//! The hash holds two fields that never expire: `gen` (the generation it belongs to) and `seq`
//! (the number of the log's newest entry). A mark's field is its 9-byte [`Mark::field`]; its value
//! is the mark's instant (8 bytes, big-endian: the script compares instants byte by byte), the id
//! of the log entry that wrote it, a space, and the sealed mark.

use std::sync::LazyLock;

use l2_proto::limits::valid_cursor;
use l2_proto::marks::{Mark, MARKS_PER_PAGE};
use redis::{Script, Value};

use crate::backend::{array, bytes, int, text, Backend, Fail};
use crate::config::PurgeLog;

pub const PURGE_STREAM: &str = "gc:purges";
/// The log's generation id: hash tag `{gc:purges}`, so the same Cluster slot as the stream.
pub const PURGE_GEN: &str = "{gc:purges}:gen";
/// The snapshot: the newest mark of every target, and the log's generation and sequence.
pub const PURGE_MARKS: &str = "{gc:purges}:marks";
/// `HSCAN`'s COUNT for one snapshot page: half of what a page may hold, because a scan answers
/// whole buckets and may overshoot its count a little.
const SNAPSHOT_SCAN_COUNT: usize = MARKS_PER_PAGE / 2;
/// A snapshot field: [`Mark::field`]'s length. The hash's own fields (`gen`, `seq`) are shorter.
const FIELD_BYTES: usize = 9;
/// The instant in front of a snapshot value.
const AT_BYTES: usize = 8;

/// What every script starts with. KEYS: stream, gen key, snapshot.
///
/// `generation(fresh)`: the generation is valid while its key, the stream and the snapshot's `gen`
/// field all agree (none has a TTL; losing any of them loses records or the numbering). Else a new
/// one begins: the snapshot is emptied and its sequence starts again at 0, and the stream is made
/// to exist (MKSTREAM, then the group dropped) so that the new generation stays valid until
/// something is really lost. Old entries are left in the log: they carry no number of the new
/// sequence, and a reader of the new generation starts after them, from the snapshot's tip.
///
/// `tip()`: the newest id the stream ever gave, `'0'` for none (trimmed entries included, so an
/// emptied log keeps its place).
///
/// `less(a, b)`: whether stream id `a` comes before `b` (`MS` reads as `MS-0`).
///
/// `trim(log_ms, max)`: drops entries older than `log_ms` by Redis's own clock (the one stream ids
/// come from), then all but about `max`; both `~`, whole stream nodes at a time.
/// How far behind the log's time a mark may be dated before the snapshot orders it by that time
/// less this instead: the filter's default `purge_skew_ms`.
const SNAPSHOT_SKEW_US: u64 = 1_000_000;

const PRELUDE: &str = r#"
local stream, genkey, marks = KEYS[1], KEYS[2], KEYS[3]
local function generation(fresh)
  local gen = redis.call('GET', genkey)
  if gen and redis.call('EXISTS', stream) == 1 and redis.call('HGET', marks, 'gen') == gen then
    return gen
  end
  redis.call('SET', genkey, fresh)
  redis.call('DEL', marks)
  redis.call('HSET', marks, 'gen', fresh, 'seq', 0)
  if redis.call('EXISTS', stream) == 0 then
    redis.call('XGROUP', 'CREATE', stream, 'gc-init', '$', 'MKSTREAM')
    redis.call('XGROUP', 'DESTROY', stream, 'gc-init')
  end
  return fresh
end
local function tip()
  local info = redis.call('XINFO', 'STREAM', stream)
  for i = 1, #info - 1, 2 do
    if info[i] == 'last-generated-id' then
      if info[i + 1] == '0-0' then return '0' end
      return info[i + 1]
    end
  end
  return '0'
end
local function seq()
  return tonumber(redis.call('HGET', marks, 'seq')) or 0
end
local function parse(id)
  local ms, seq = string.match(id, '^(%d+)-(%d+)$')
  if ms == nil then return tonumber(id), 0 end
  return tonumber(ms), tonumber(seq)
end
local function less(a, b)
  local am, as = parse(a)
  local bm, bs = parse(b)
  return am < bm or (am == bm and as < bs)
end
local function trim(log_ms, max)
  local t = redis.call('TIME')
  local cutoff = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000) - tonumber(log_ms)
  if cutoff > 0 then
    redis.call('XTRIM', stream, 'MINID', '~', string.format('%d', cutoff))
  end
  redis.call('XTRIM', stream, 'MAXLEN', '~', max)
end
"#;

/// ARGV: data, log_ms, max entries, a fresh generation id. {id, gen}.
/// The old single-record verb: numbered like a mark, so that numbered readers see no hole; it
/// writes no snapshot field (its record may name many targets).
const PURGE: &str = r#"
local gen = generation(ARGV[4])
local n = redis.call('HINCRBY', marks, 'seq', 1)
local id = redis.call('XADD', stream, '*', 'd', ARGV[1], 'n', string.format('%d', n))
trim(ARGV[2], ARGV[3])
return {id, gen}
"#;

/// ARGV: after ('$', '0', 'MS' or 'MS-SEQ'), count, the reader's gen ('' for none), a fresh
/// generation id.
/// {gen, last, gap, entries}: for readers without a sequence number (older filters). Without a
/// gap, entries are XRANGE's (after, +] (at most count) and last is the last entry's id, else
/// `after` (for '$': the newest id ever added, or '0'). With a gap, entries come from the start of
/// the stream and last is the last of them, else '0'.
/// gap (never for a reader with no gen at '0', nor for '$'): the reader's gen is not the current
/// one (stream lost or recreated: a new Redis, a flush); `after` is beyond the newest id ever
/// added (a new stream whose clock is behind the old one's); or the stream was trimmed past
/// `after` (conservative: also when only `after` itself was trimmed).
const PURGES: &str = r#"
local after, given = ARGV[1], ARGV[3]
local gen = generation(ARGV[4])
local info = redis.call('XINFO', 'STREAM', stream)
local f = {}
for i = 1, #info, 2 do f[info[i]] = info[i + 1] end
local newest = f['last-generated-id']
if after == '$' then
  if newest == '0-0' then newest = '0' end
  return {gen, newest, 0, {}}
end
local gap = 0
if given ~= '' or after ~= '0' then
  local added, length, first = f['entries-added'], f['length'], f['recorded-first-entry-id']
  if given ~= '' and given ~= gen then
    gap = 1
  elseif less(newest, after) then
    gap = 1
  elseif added > length and length == 0 and less(after, newest) then
    gap = 1
  elseif added > length and length > 0 and less(after, first) then
    gap = 1
  end
end
local entries
local last = after
if gap == 1 then
  entries = redis.call('XRANGE', stream, '-', '+', 'COUNT', ARGV[2])
  last = '0'
else
  entries = redis.call('XRANGE', stream, '(' .. after, '+', 'COUNT', ARGV[2])
end
if #entries > 0 then last = entries[#entries][1] end
return {gen, last, gap, entries}
"#;

/// ARGV: after, count, the reader's gen ('' for none), a fresh generation id, the number of the
/// last entry the reader applied.
/// {gen, last, gap, entries, seq}: for readers that count. The entries after `after` must be
/// numbered n+1, n+2, ... and, when they reach the end of the log, end at the sequence; anything
/// else (an entry trimmed or deleted, one without a number, another generation) is a gap, answered
/// with no entries and `last` = `after`: the reader reloads the snapshot and goes on from its tip.
/// A reader at the end of an emptied log (XTRIM MAXLEN 0) holds the sequence: no gap.
const PURGES_NUMBERED: &str = r#"
local after, count, given = ARGV[1], tonumber(ARGV[2]), ARGV[3]
local gen = generation(ARGV[4])
local now = seq()
if after == '$' then
  return {gen, tip(), 0, {}, now}
end
if given ~= '' and given ~= gen then
  return {gen, after, 1, {}, now}
end
-- A log whose newest id is before the reader's place was written anew by a clock behind the old
-- one's (a failover): its entries would be skipped by the range below.
if less(tip(), after) then
  return {gen, after, 1, {}, now}
end
local entries = redis.call('XRANGE', stream, '(' .. after, '+', 'COUNT', count)
local expected = tonumber(ARGV[5])
for _, e in ipairs(entries) do
  expected = expected + 1
  local n
  local f = e[2]
  for j = 1, #f - 1, 2 do
    if f[j] == 'n' then n = tonumber(f[j + 1]) end
  end
  if n ~= expected then
    return {gen, after, 1, {}, now}
  end
end
if #entries < count and expected ~= now then
  return {gen, after, 1, {}, now}
end
local last = after
if #entries > 0 then last = entries[#entries][1] end
return {gen, last, 0, entries, now}
"#;

/// ARGV: a fresh generation id, keep_ms, log_ms, max entries, the skew (µs), then per mark its
/// field, its instant (8 bytes, big-endian) and its sealed bytes. {gen, last id, last n}.
/// Each mark is its own log entry, numbered (the numbers taken at once). The snapshot's field
/// takes the newest mark of the batch for it unless it already holds a newer one, "new" by the
/// instant a reader will date it at: the mark's own, but no earlier than the log's time
/// less the skew (an Envoy whose clock runs behind must not lose a later purge to an earlier
/// one), kept as the value's 8-byte prefix. A field keeps the longest expiry any batch asked for
/// (Envoys of one fleet may keep purges for different times). A storm of purges names the same
/// few fields again and again (an entity purge also marks its type's list and `overflow`): the
/// snapshot is read and written once per field per batch, not per mark. Instants are compared
/// byte by byte: Lua's `<` on strings is strcoll's, and Redis sets the collation from the locale.
const MARKS_ADD: &str = r#"
local gen = generation(ARGV[1])
local keep = tonumber(ARGV[2])
-- At least as new: on a tie the later write wins (a reader dates it no earlier, by its log time).
local function newer(at, old)
  if string.len(old) <= 8 then return true end
  for i = 1, 8 do
    local a, b = string.byte(at, i), string.byte(old, i)
    if a ~= b then return a > b end
  end
  return true
end
local function number(be)
  local x = 0
  for i = 1, 8 do x = x * 256 + string.byte(be, i) end
  return x
end
local function bytes(x)
  local b = {}
  for i = 8, 1, -1 do
    b[i] = x % 256
    x = math.floor(x / 256)
  end
  return string.char(unpack(b))
end
local t = redis.call('TIME')
local floor = tonumber(t[1]) * 1000000 + tonumber(t[2]) - tonumber(ARGV[5])
local count = (#ARGV - 5) / 3
local n = redis.call('HINCRBY', marks, 'seq', count) - count
local id
local newest, order = {}, {}
for i = 6, #ARGV - 2, 3 do
  local field, at, sealed = ARGV[i], ARGV[i + 1], ARGV[i + 2]
  n = n + 1
  id = redis.call('XADD', stream, '*', 'd', sealed, 'n', string.format('%d', n))
  if number(at) < floor then at = bytes(floor) end
  local best = newest[field]
  if not best then
    order[#order + 1] = field
  end
  if not best or newer(at, best) then
    newest[field] = at .. id .. ' ' .. sealed
  end
end
local olds = redis.call('HMGET', marks, unpack(order))
local set, fields = {}, {}
for i, field in ipairs(order) do
  local old = olds[i]
  if not old or newer(newest[field], old) then
    set[#set + 1] = field
    set[#set + 1] = newest[field]
    fields[#fields + 1] = field
  end
end
if #fields > 0 then
  local before = redis.call('HPTTL', marks, 'FIELDS', #fields, unpack(fields))
  redis.call('HSET', marks, unpack(set))
  redis.call('HPEXPIRE', marks, keep, 'FIELDS', #fields, unpack(fields))
  for i, field in ipairs(fields) do
    if before[i] > keep then
      redis.call('HPEXPIRE', marks, before[i], 'FIELDS', 1, field)
    end
  end
end
trim(ARGV[3], ARGV[4])
return {gen, id, n}
"#;

/// ARGV: the HSCAN cursor, its COUNT, a fresh generation id. {gen, next cursor, tip, seq, [field,
/// value, ...]}: the tip and the sequence read in the same script as the page, so a reader that
/// follows the log from the first page's tip misses nothing written after it.
const MARKS_PAGE: &str = r#"
local gen = generation(ARGV[3])
local page = redis.call('HSCAN', marks, ARGV[1], 'COUNT', ARGV[2])
return {gen, page[1], tip(), seq(), page[2]}
"#;

fn script(body: &str) -> Script {
    Script::new(&[PRELUDE, body].concat())
}

static PURGE_SCRIPT: LazyLock<Script> = LazyLock::new(|| script(PURGE));
static PURGES_SCRIPT: LazyLock<Script> = LazyLock::new(|| script(PURGES));
static PURGES_NUMBERED_SCRIPT: LazyLock<Script> = LazyLock::new(|| script(PURGES_NUMBERED));
static MARKS_ADD_SCRIPT: LazyLock<Script> = LazyLock::new(|| script(MARKS_ADD));
static MARKS_PAGE_SCRIPT: LazyLock<Script> = LazyLock::new(|| script(MARKS_PAGE));

/// One entry of the log.
pub struct LogEntry {
    pub id: String,
    pub data: Vec<u8>,
    /// Its number in the log's sequence; `None` for entries written before there was one.
    pub n: Option<u64>,
}

pub struct Purges {
    pub gen: String,
    pub last: String,
    pub gap: bool,
    pub entries: Vec<LogEntry>,
    /// The log's sequence now: answered to numbered readers only.
    pub n: Option<u64>,
}

/// Where a batch of marks landed.
pub struct Added {
    pub gen: String,
    pub last: String,
    pub n: u64,
}

/// One page of the snapshot.
pub struct SnapshotPage {
    pub gen: String,
    pub cursor: String,
    pub tip: String,
    pub n: u64,
    /// (id of the log entry that wrote it, sealed mark), per field.
    pub marks: Vec<(String, Vec<u8>)>,
}

fn unsigned(v: Option<&Value>) -> Option<u64> {
    int(v).and_then(|n| u64::try_from(n).ok())
}

fn parse_entry(e: &Value) -> Option<LogEntry> {
    let e = array(Some(e))?;
    let id = text(e.first())?;
    let fields = array(e.get(1))?;
    let mut data = Vec::new();
    let mut n = None;
    for pair in fields.chunks(2) {
        match text(pair.first()).as_deref() {
            Some("d") => data = bytes(pair.get(1))?,
            Some("n") => n = text(pair.get(1)).and_then(|t| t.parse().ok()),
            _ => {}
        }
    }
    Some(LogEntry { id, data, n })
}

/// {gen, last, gap, entries[, seq]}.
fn parse_purges(v: &Value) -> Option<Purges> {
    let a = array(Some(v))?;
    let entries = array(a.get(3))?
        .iter()
        .map(parse_entry)
        .collect::<Option<Vec<_>>>()?;
    Some(Purges {
        gen: text(a.first())?,
        last: text(a.get(1))?,
        gap: int(a.get(2))? != 0,
        entries,
        n: match a.get(4) {
            Some(v) => Some(unsigned(Some(v))?),
            None => None,
        },
    })
}

/// A snapshot value: instant, log entry id, space, sealed mark. `None` for anything else (a value
/// written by something else is skipped, not answered).
fn parse_mark_value(value: &[u8]) -> Option<(String, Vec<u8>)> {
    let rest = value.get(AT_BYTES..)?;
    let space = rest.iter().position(|b| *b == b' ')?;
    let id = std::str::from_utf8(&rest[..space]).ok()?;
    let sealed = &rest[space + 1..];
    (valid_cursor(id) && id != "$" && id != "0" && !sealed.is_empty())
        .then(|| (id.to_string(), sealed.to_vec()))
}

/// {gen, cursor, tip, seq, [field, value, ...]}; the hash's own fields and values that do not
/// parse are left out.
fn parse_page(v: &Value) -> Option<SnapshotPage> {
    let a = array(Some(v))?;
    let pairs = array(a.get(4))?;
    let mut marks = Vec::with_capacity(pairs.len() / 2);
    for pair in pairs.chunks(2) {
        let (Some(field), Some(value)) = (bytes(pair.first()), bytes(pair.get(1))) else {
            return None;
        };
        if field.len() != FIELD_BYTES {
            continue;
        }
        if let Some(mark) = parse_mark_value(&value) {
            marks.push(mark);
        }
    }
    Some(SnapshotPage {
        gen: text(a.first())?,
        cursor: text(a.get(1))?,
        tip: text(a.get(2))?,
        n: unsigned(a.get(3))?,
        marks,
    })
}

fn parse_added(v: &Value) -> Option<Added> {
    let a = array(Some(v))?;
    Some(Added {
        gen: text(a.first())?,
        last: text(a.get(1))?,
        n: unsigned(a.get(2))?,
    })
}

impl Backend {
    /// The old single-record verb: appends `data` as one numbered entry; returns its id and the
    /// log's generation.
    pub async fn purge(&self, data: &[u8], log: &PurgeLog) -> Result<(String, String), Fail> {
        let fresh = new_gen();
        let v: Value = self
            .round_trip(|mut c| async move {
                let mut inv = PURGE_SCRIPT.prepare_invoke();
                inv.key(PURGE_STREAM)
                    .key(PURGE_GEN)
                    .key(PURGE_MARKS)
                    .arg(data)
                    .arg(log.log_ms)
                    .arg(log.max_entries)
                    .arg(&fresh);
                inv.invoke_async(&mut c).await
            })
            .await?;
        let a = array(Some(&v));
        match (
            text(a.and_then(|a| a.first())),
            text(a.and_then(|a| a.get(1))),
        ) {
            (Some(id), Some(gen)) => Ok((id, gen)),
            _ => Err(Fail::Reply("purge script")),
        }
    }

    /// `gen`: the reader's generation, `""` for none. `n`: the number of the last entry the reader
    /// applied: with it, any entry missing after it is a gap (numbered reads); without it, the
    /// old reading (a gap only for a lost log or a cursor trimmed past).
    pub async fn purges(
        &self,
        after: &str,
        gen: &str,
        n: Option<u64>,
        count: usize,
    ) -> Result<Purges, Fail> {
        let fresh = new_gen();
        let v: Value = self
            .round_trip(|mut c| async move {
                let script = match n {
                    Some(_) => &PURGES_NUMBERED_SCRIPT,
                    None => &PURGES_SCRIPT,
                };
                let mut inv = script.prepare_invoke();
                inv.key(PURGE_STREAM)
                    .key(PURGE_GEN)
                    .key(PURGE_MARKS)
                    .arg(after)
                    .arg(count)
                    .arg(gen)
                    .arg(&fresh);
                if let Some(n) = n {
                    inv.arg(n);
                }
                inv.invoke_async(&mut c).await
            })
            .await?;
        parse_purges(&v).ok_or(Fail::Reply("purges script"))
    }

    /// Appends every mark to the log (one numbered entry each, in order) and keeps the newest of
    /// each target in the snapshot for `keep_ms`; then trims the log. One script.
    pub async fn add_marks(
        &self,
        marks: &[Mark],
        keep_ms: u64,
        log: &PurgeLog,
    ) -> Result<Added, Fail> {
        let fresh = new_gen();
        let v: Value = self
            .round_trip(|mut c| async move {
                let mut inv = MARKS_ADD_SCRIPT.prepare_invoke();
                inv.key(PURGE_STREAM)
                    .key(PURGE_GEN)
                    .key(PURGE_MARKS)
                    .arg(&fresh)
                    .arg(keep_ms)
                    .arg(log.log_ms)
                    .arg(log.max_entries)
                    .arg(SNAPSHOT_SKEW_US);
                for m in marks {
                    inv.arg(&m.field()[..])
                        .arg(&m.at_us.to_be_bytes()[..])
                        .arg(m.sealed.as_slice());
                }
                inv.invoke_async(&mut c).await
            })
            .await?;
        parse_added(&v).ok_or(Fail::Reply("marks script"))
    }

    /// One page of the snapshot from `cursor` (`"0"`: the first), with the log's tip and sequence.
    pub async fn marks_page(&self, cursor: u64) -> Result<SnapshotPage, Fail> {
        let fresh = new_gen();
        let v: Value = self
            .round_trip(|mut c| async move {
                let mut inv = MARKS_PAGE_SCRIPT.prepare_invoke();
                inv.key(PURGE_STREAM)
                    .key(PURGE_GEN)
                    .key(PURGE_MARKS)
                    .arg(cursor)
                    .arg(SNAPSHOT_SCAN_COUNT)
                    .arg(&fresh);
                inv.invoke_async(&mut c).await
            })
            .await?;
        parse_page(&v).ok_or(Fail::Reply("snapshot script"))
    }
}

/// 16 hex characters, different in every call and every process (generation ids need to be
/// unique, not secret).
pub fn new_gen() -> String {
    use std::hash::{BuildHasher, Hasher};
    use std::sync::atomic::{AtomicU64, Ordering};
    static COUNTER: AtomicU64 = AtomicU64::new(0);
    // RandomState's keys come from the OS's random source.
    let mut h = std::collections::hash_map::RandomState::new().build_hasher();
    h.write_u64(COUNTER.fetch_add(1, Ordering::Relaxed));
    h.write_u32(std::process::id());
    if let Ok(t) = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH) {
        h.write_u128(t.as_nanos());
    }
    format!("{:016x}", h.finish())
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]
mod tests {
    use super::*;

    fn bulk(b: &[u8]) -> Value {
        Value::BulkString(b.to_vec())
    }

    fn entry(id: &str, fields: &[(&str, &[u8])]) -> Value {
        let flat = fields
            .iter()
            .flat_map(|(f, v)| [bulk(f.as_bytes()), bulk(v)])
            .collect();
        Value::Array(vec![bulk(id.as_bytes()), Value::Array(flat)])
    }

    #[test]
    fn parses_purges_replies_with_and_without_numbers() {
        let old = Value::Array(vec![
            bulk(b"00112233aabbccdd"),
            bulk(b"5-0"),
            Value::Int(0),
            Value::Array(vec![entry("5-0", &[("d", b"\x00\xff")])]),
        ]);
        let p = parse_purges(&old).unwrap();
        assert_eq!(
            (p.gen.as_str(), p.last.as_str(), p.gap),
            ("00112233aabbccdd", "5-0", false)
        );
        assert_eq!(p.entries.len(), 1);
        assert_eq!(p.entries[0].data, b"\x00\xff");
        assert_eq!((p.entries[0].n, p.n), (None, None));
        let numbered = Value::Array(vec![
            bulk(b"g"),
            bulk(b"7-0"),
            Value::Int(0),
            Value::Array(vec![entry("7-0", &[("d", b"m"), ("n", b"12")])]),
            Value::Int(12),
        ]);
        let p = parse_purges(&numbered).unwrap();
        assert_eq!((p.entries[0].n, p.n), (Some(12), Some(12)));
        let negative = Value::Array(vec![
            bulk(b"g"),
            bulk(b"0"),
            Value::Int(0),
            Value::Array(vec![]),
            Value::Int(-1),
        ]);
        assert!(parse_purges(&negative).is_none());
    }

    #[test]
    fn snapshot_values_are_instant_id_space_mark() {
        let mut value = 7u64.to_be_bytes().to_vec();
        value.extend_from_slice(b"1700000000000-3 ");
        value.extend_from_slice(b"sealed mark with spaces");
        assert_eq!(
            parse_mark_value(&value),
            Some((
                "1700000000000-3".to_string(),
                b"sealed mark with spaces".to_vec()
            ))
        );
        // An instant holding a space byte does not end the id early.
        let mut spaced = vec![b' '; AT_BYTES];
        spaced.extend_from_slice(b"5-0 x");
        assert_eq!(
            parse_mark_value(&spaced),
            Some(("5-0".to_string(), b"x".to_vec()))
        );
        for bad in [
            &b""[..],
            b"12345678",
            b"123456785-0",
            b"123456785-0 ",
            b"12345678$ x",
            b"12345678 x",
            b"12345678a-b x",
        ] {
            assert_eq!(parse_mark_value(bad), None, "{bad:?}");
        }
    }

    #[test]
    fn a_page_leaves_out_the_hash_fields_and_bad_values() {
        let mut good = 1u64.to_be_bytes().to_vec();
        good.extend_from_slice(b"9-0 m");
        let page = Value::Array(vec![
            bulk(b"g"),
            bulk(b"17"),
            bulk(b"9-0"),
            Value::Int(4),
            Value::Array(vec![
                bulk(b"gen"),
                bulk(b"g"),
                bulk(b"seq"),
                bulk(b"4"),
                bulk(&[2; FIELD_BYTES]),
                bulk(&good),
                bulk(&[3; FIELD_BYTES]),
                bulk(b"garbage"),
            ]),
        ]);
        let p = parse_page(&page).unwrap();
        assert_eq!(
            (p.gen.as_str(), p.cursor.as_str(), p.tip.as_str(), p.n),
            ("g", "17", "9-0", 4)
        );
        assert_eq!(p.marks, vec![("9-0".to_string(), b"m".to_vec())]);
    }

    #[test]
    fn every_script_keeps_the_generation_rule() {
        for body in [PURGE, PURGES, PURGES_NUMBERED, MARKS_ADD, MARKS_PAGE] {
            assert!(body.contains("generation(ARGV["), "{body}");
        }
    }
}
