//! What a handled request reports once its answer is known: the access log line and the
//! per-operation counters, in `CacheStatus`'s words.

use super::*;

impl Exchange {
    /// What a request this filter handled did, once its answer is known: for the access log and
    /// the per-operation counters.
    pub(super) fn report_outcome<H: RequestHost>(&self, cx: &mut Ctx<'_, H>) {
        let config = cx.config();
        let recording = cx.worker(|w| w.recent.is_on());
        if !config.access_log && !config.operation_stats.on() && !recording {
            return;
        }
        let (status, reason, key) = match &self.state {
            State::Served => match self.served {
                Some(s) => (s.cache, None, Some(s.key)),
                None => return,
            },
            State::Bypassed(reason) => (CacheStatus::Bypass, Some(reason.as_str()), None),
            State::Mutation(_) => (CacheStatus::Bypass, Some(Bypass::Mutation.as_str()), None),
            State::Keyed(Keyed::Missed { reason, key, .. }) => {
                (CacheStatus::Miss, reason.map(Release::as_str), Some(*key))
            }
            State::Shadow(shadow) => (CacheStatus::Shadow, None, Some(shadow.key())),
            _ => return,
        };
        self.report(cx, status, reason, key);
    }

    /// Keeps the lookup for the what-if route (`serving::recent`).
    fn record<H: RequestHost>(
        &self,
        cx: &mut Ctx<'_, H>,
        (status, bucket): (CacheStatus, Option<u16>),
        key: &CacheKey,
    ) {
        if !cx.worker(|w| w.recent.is_on()) {
            return;
        }
        let kind = match (status, self.missed) {
            (CacheStatus::Hit | CacheStatus::Stale, _) => Kind::Hit,
            (CacheStatus::Coalesced, _) => Kind::Coalesced,
            (CacheStatus::Miss, Some(MissReason::Purged)) => Kind::Purged,
            (CacheStatus::Miss, _) => Kind::Miss,
            _ => return,
        };
        let hash = self.hash.unwrap_or_else(|| cx.plugin().table.hash(key));
        let lookup = recent::Lookup {
            whose: recent::Whose {
                hash,
                operation: self.operation.as_deref(),
                bucket,
                variant: self.variant.unwrap_or_default(),
                ..recent::Whose::default()
            },
            at_ms: self.asked.as_ref().map(|a| a.born_us / 1000),
            kind,
            served: self.served.map(|s| (s.bytes, s.lifetime_s)),
        };
        recent::lookup(cx, &lookup);
    }

    pub(super) fn report<H: RequestHost>(
        &self,
        cx: &mut Ctx<'_, H>,
        status: CacheStatus,
        reason: Option<&'static str>,
        key: Option<CacheKey>,
    ) {
        self.log(cx, status, reason, key);
        let bucket = self.tally(cx, status, reason);
        if let Some(key) = key {
            self.record(cx, (status, bucket), &key);
        }
    }

    /// Counts the request for its operation, by what `x-cache` says; the operation's counter
    /// bucket (`None`: the counters are off, or a shadow lookup is not counted).
    pub(super) fn tally<H: RequestHost>(
        &self,
        cx: &mut Ctx<'_, H>,
        status: CacheStatus,
        reason: Option<&'static str>,
    ) -> Option<u16> {
        if !cx.config().operation_stats.on() {
            return None;
        }
        let missed = self.missed.unwrap_or(MissReason::Collision).as_str();
        let counted = match status {
            CacheStatus::Hit => Tally::one(OpCounter::Hits),
            CacheStatus::Stale => Tally::one(OpCounter::Stale),
            CacheStatus::Coalesced => Tally::one(OpCounter::Coalesced),
            CacheStatus::Miss | CacheStatus::Partial => Tally::because(OpCounter::Misses, missed),
            CacheStatus::Bypass => Tally::because(OpCounter::Bypasses, reason.unwrap_or("-")),
            CacheStatus::Shadow => return None,
        };
        // Only an answer served from an entry saved the origin anything (0 is not counted).
        let saved = Tally {
            amount: self.served.map_or(0, |s| s.origin_ms),
            ..Tally::one(OpCounter::OriginMsSaved)
        };
        // A miss a larger store would have served counts for each multiple that would have.
        let larger = match (status, self.would_hit) {
            (CacheStatus::Miss, Some(would)) => would.labels(),
            _ => &[],
        };
        let at =
            |i: usize| Tally::because(OpCounter::WouldHit, larger.get(i).copied().unwrap_or(""));
        let tallies = [counted, saved, at(0), at(1)];
        let used = &tallies[..2 + larger.len().min(2)];
        count_operation(cx, operation_of(self.operation.as_deref()), used)
    }

    pub(super) fn log<H: RequestHost>(
        &self,
        cx: &mut Ctx<'_, H>,
        status: CacheStatus,
        reason: Option<&'static str>,
        key: Option<CacheKey>,
    ) {
        if !cx.config().access_log {
            return;
        }
        let miss = match status {
            CacheStatus::Miss | CacheStatus::Partial => self.missed.map(MissReason::as_str),
            _ => None,
        };
        let record = LogRecord {
            status,
            reason,
            miss,
            operation: self.operation.as_ref().and_then(|o| o.name.as_deref()),
            key: key.as_ref(),
            age_s: self.served.map(|s| s.age_s),
            bytes: self.served.map(|s| s.bytes),
        };
        cx.host().set_log_record(&record.render());
    }

    /// Accounts for the origin's answer to this request, keyed `key`, as not stored.
    pub(super) fn not_stored<H: RequestHost>(
        &self,
        cx: &mut Ctx<'_, H>,
        key: &CacheKey,
        why: NotStored,
    ) {
        account_store(
            cx,
            key,
            self.operation.as_deref(),
            Fate::NotStored(why),
            None,
        );
    }
}
