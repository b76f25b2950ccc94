//! The filter's counters, as Envoy's `/stats` shows them (`wasmcustom.graphql_cache.<name>`).

#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Counter {
    Hits,
    Misses,
    Bypasses,
    RejectedInputs,
    Stores,
    StoreSkipped,
    StoreFailures,
    /// Live entries displaced for room (in their set, or for the byte budget).
    Evictions,
    /// Entries past their last serving instant whose room was taken back.
    EvictionsExpired,
    /// Answers not stored: everything they would have displaced is asked for more often.
    AdmissionsRejected,
    /// Misses a store of twice `cache_bytes` would have served (`cache::ghosts`).
    WouldHit2x,
    /// Misses a store of four times `cache_bytes` would have served (those of 2x among them).
    WouldHit4x,
    Coalesced,
    Leaders,
    WaitTimeouts,
    FetchFailures,
    LateWakeups,
    Purges,
    PurgeRejected,
    MutationPurges,
    MutationPurgesOwed,
    MutationPurgesCollapsed,
    PurgedMisses,
    StaleMisses,
    StaleServed,
    Refreshes,
    ShadowHits,
    ShadowMisses,
    ShadowMismatches,
    L2Hits,
    L2Leads,
    L2Waits,
    L2Failures,
    L2Stores,
    L2PurgesSent,
    L2PurgesApplied,
    L2Rejected,
    L2PurgeGaps,
    L2PurgesFolded,
    L2PurgesMerged,
    FeedFailSafe,
    /// Entry tags left out of a `cdn_tags` header (too long, not sendable, or past its size).
    CdnTagsLeftOut,
    /// Entity mode: entities answered from entries.
    EntitiesServed,
    /// Entity mode: entities asked of the subgraph (a partial fetch's, or a forwarded batch's).
    EntitiesFetched,
    /// Entity mode: batches answered partly from entries (`x-cache: PARTIAL`).
    EntityPartials,
    /// Entity mode: fetches of entities an answer named, before the gateway asked.
    EntityPrefetches,
    /// Entity mode: batches that waited for a prefetch of what they missed.
    EntityPrefetchWaits,
}

impl Counter {
    /// Every counter, in the order of its index.
    pub const ALL: [Counter; 47] = [
        Counter::Hits,
        Counter::Misses,
        Counter::Bypasses,
        Counter::RejectedInputs,
        Counter::Stores,
        Counter::StoreSkipped,
        Counter::StoreFailures,
        Counter::Evictions,
        Counter::EvictionsExpired,
        Counter::AdmissionsRejected,
        Counter::WouldHit2x,
        Counter::WouldHit4x,
        Counter::Coalesced,
        Counter::Leaders,
        Counter::WaitTimeouts,
        Counter::FetchFailures,
        Counter::LateWakeups,
        Counter::Purges,
        Counter::PurgeRejected,
        Counter::MutationPurges,
        Counter::MutationPurgesOwed,
        Counter::MutationPurgesCollapsed,
        Counter::PurgedMisses,
        Counter::StaleMisses,
        Counter::StaleServed,
        Counter::Refreshes,
        Counter::ShadowHits,
        Counter::ShadowMisses,
        Counter::ShadowMismatches,
        Counter::L2Hits,
        Counter::L2Leads,
        Counter::L2Waits,
        Counter::L2Failures,
        Counter::L2Stores,
        Counter::L2PurgesSent,
        Counter::L2PurgesApplied,
        Counter::L2Rejected,
        Counter::L2PurgeGaps,
        Counter::L2PurgesFolded,
        Counter::L2PurgesMerged,
        Counter::FeedFailSafe,
        Counter::CdnTagsLeftOut,
        Counter::EntitiesServed,
        Counter::EntitiesFetched,
        Counter::EntityPartials,
        Counter::EntityPrefetches,
        Counter::EntityPrefetchWaits,
    ];

    /// Position in [`Counter::ALL`], for a host that keeps metric ids in an array.
    pub fn index(self) -> usize {
        self as usize
    }

    pub fn name(self) -> &'static str {
        match self {
            Counter::Hits => "graphql_cache.hits",
            Counter::Misses => "graphql_cache.misses",
            Counter::Bypasses => "graphql_cache.bypasses",
            Counter::RejectedInputs => "graphql_cache.rejected_inputs",
            Counter::Stores => "graphql_cache.stores",
            Counter::StoreSkipped => "graphql_cache.store_skipped",
            Counter::StoreFailures => "graphql_cache.store_failures",
            Counter::Evictions => "graphql_cache.evictions",
            Counter::EvictionsExpired => "graphql_cache.evictions_expired",
            Counter::AdmissionsRejected => "graphql_cache.admissions_rejected",
            Counter::WouldHit2x => "graphql_cache.would_hit_2x",
            Counter::WouldHit4x => "graphql_cache.would_hit_4x",
            Counter::Coalesced => "graphql_cache.coalesced",
            Counter::Leaders => "graphql_cache.leaders",
            Counter::WaitTimeouts => "graphql_cache.wait_timeouts",
            Counter::FetchFailures => "graphql_cache.fetch_failures",
            Counter::LateWakeups => "graphql_cache.late_wakeups",
            Counter::Purges => "graphql_cache.purges",
            Counter::PurgeRejected => "graphql_cache.purge_rejected",
            Counter::MutationPurges => "graphql_cache.mutation_purges",
            Counter::MutationPurgesOwed => "graphql_cache.mutation_purges_owed",
            Counter::MutationPurgesCollapsed => "graphql_cache.mutation_purges_collapsed",
            Counter::PurgedMisses => "graphql_cache.purged_misses",
            Counter::StaleMisses => "graphql_cache.stale_misses",
            Counter::StaleServed => "graphql_cache.stale_served",
            Counter::Refreshes => "graphql_cache.refreshes",
            Counter::ShadowHits => "graphql_cache.shadow_hits",
            Counter::ShadowMisses => "graphql_cache.shadow_misses",
            Counter::ShadowMismatches => "graphql_cache.shadow_mismatches",
            Counter::L2Hits => "graphql_cache.l2_hits",
            Counter::L2Leads => "graphql_cache.l2_leads",
            Counter::L2Waits => "graphql_cache.l2_waits",
            Counter::L2Failures => "graphql_cache.l2_failures",
            Counter::L2Stores => "graphql_cache.l2_stores",
            Counter::L2PurgesSent => "graphql_cache.l2_purges_sent",
            Counter::L2PurgesApplied => "graphql_cache.l2_purges_applied",
            Counter::L2Rejected => "graphql_cache.l2_rejected",
            Counter::L2PurgeGaps => "graphql_cache.l2_purge_gaps",
            Counter::L2PurgesFolded => "graphql_cache.l2_purges_folded",
            Counter::L2PurgesMerged => "graphql_cache.l2_purges_merged",
            Counter::FeedFailSafe => "graphql_cache.l2_feed_failsafe",
            Counter::CdnTagsLeftOut => "graphql_cache.cdn_tags_left_out",
            Counter::EntitiesServed => "graphql_cache.entities_served",
            Counter::EntitiesFetched => "graphql_cache.entities_fetched",
            Counter::EntityPartials => "graphql_cache.entity_partials",
            Counter::EntityPrefetches => "graphql_cache.entity_prefetches",
            Counter::EntityPrefetchWaits => "graphql_cache.entity_prefetch_waits",
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn indexes_match_the_list_and_names_are_unique() {
        for (i, c) in Counter::ALL.iter().enumerate() {
            assert_eq!(c.index(), i);
        }
        let mut names: Vec<_> = Counter::ALL.iter().map(|c| c.name()).collect();
        names.sort_unstable();
        names.dedup();
        assert_eq!(names.len(), Counter::ALL.len());
    }
}
